"""The watches the Kubernetes backend keeps: one informer per resource it reads, each
telling its subscriber what changed (kai_ray.k8s.source patches its world from that)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from kai_ray.k8s.client import Kube
from kai_ray.k8s.informer import Informer
from kai_ray.k8s.queues import KAI_RAY_QUEUE_API

__all__ = ["OWNER_APIS", "QUEUE_APIS", "OwnerObjects", "Subscriber", "Watches", "owner_path"]

OWNER_APIS = {
    "RayCluster": "/apis/ray.io/v1/rayclusters",
    "RayJob": "/apis/ray.io/v1/rayjobs",
    "RayService": "/apis/ray.io/v1/rayservices",
    "Job": "/apis/batch/v1/jobs",
}


def owner_path(kind: str, namespace: str, name: str) -> str:
    """The API path of one owner object of a kind in OWNER_APIS."""
    group, plural = OWNER_APIS[kind].rsplit("/", 1)
    return f"{group}/namespaces/{namespace}/{plural}/{name}"


QUEUE_APIS = (f"/apis/{KAI_RAY_QUEUE_API}/queues", "/apis/scheduling.run.ai/v2/queues")


class Subscriber(Protocol):
    def pod_changed(self, kind: str, obj: dict[str, Any]) -> None: ...
    def node_changed(self, kind: str, obj: dict[str, Any]) -> None: ...
    def owner_changed(self, owner_kind: str, obj: dict[str, Any]) -> None: ...
    def classes_changed(self) -> None: ...
    def queues_changed(self) -> None: ...
    def namespace_changed(self, kind: str, obj: dict[str, Any]) -> None: ...
    def relisted(self, what: str) -> None: ...


class Watches:
    def __init__(self, kube: Kube, changed: asyncio.Event | None = None) -> None:
        self.changed = changed or asyncio.Event()

        def informer(path: str, optional: bool = False) -> Informer:
            return Informer(kube, path, changed=self.changed, optional=optional)

        self.nodes = informer("/api/v1/nodes")
        self.pods = informer("/api/v1/pods")
        self.classes = informer("/apis/scheduling.k8s.io/v1/priorityclasses")
        self.queues = [informer(path, optional=True) for path in QUEUE_APIS]
        self.owners = {kind: informer(path, optional=True) for kind, path in OWNER_APIS.items()}
        # Namespaces are the tenants: their labels select them into queues, and name
        # their default queue (docs/tenants.md).
        self.namespaces = informer("/api/v1/namespaces")

    def all(self) -> list[Informer]:
        return [self.nodes, self.pods, self.classes, *self.queues, *self.owners.values(), self.namespaces]

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        """Every namespace -> its labels."""
        out = {}
        for (_, name), obj in self.namespaces.items.items():
            labels = (obj.get("metadata") or {}).get("labels") or {}
            out[name] = {str(k): str(v) for k, v in labels.items()}
        return out

    def subscribe(self, to: Subscriber) -> None:
        """Route every informer's deltas, and its relists, to `to`."""
        self.nodes.on_change, self.nodes.on_relist = to.node_changed, lambda: to.relisted("nodes")
        self.pods.on_change, self.pods.on_relist = to.pod_changed, lambda: to.relisted("pods")
        self.classes.on_change = lambda kind, obj: to.classes_changed()
        self.classes.on_relist = lambda: to.relisted("classes")
        for q in self.queues:
            q.on_change, q.on_relist = (
                (lambda kind, obj: to.queues_changed()),
                (lambda: to.relisted("queues")),
            )
        for kind, inf in self.owners.items():
            inf.on_change = _owner_delta(to, kind)
            inf.on_relist = lambda: to.relisted("owners")
        self.namespaces.on_change = to.namespace_changed
        self.namespaces.on_relist = lambda: to.relisted("namespaces")

    async def synced(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.all()))


class OwnerObjects(Mapping[tuple[str, str, str], Mapping[str, Any]]):
    """The owner informers' objects by (kind, namespace, name), without copying them."""

    def __init__(self, watches: Watches) -> None:
        self.watches = watches

    def __getitem__(self, key: tuple[str, str, str]) -> Mapping[str, Any]:
        informer = self.watches.owners.get(key[0])
        if informer is None:
            raise KeyError(key)
        return informer.items[(key[1], key[2])]

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        for kind, informer in self.watches.owners.items():
            for ns, name in informer.items:
                yield (kind, ns, name)

    def __len__(self) -> int:
        return sum(len(i.items) for i in self.watches.owners.values())


def _owner_delta(to: Subscriber, owner_kind: str) -> Any:
    return lambda kind, obj: to.owner_changed(owner_kind, obj)
