"""An in-memory stand-in for the API server's side of the operator's calls, for
`kai-ray bench k8s --world-nodes ...` only: a world of 100,000 pods is far more than the
test API server holds on these machines, and that bench measures the operator's own
step, not the server. Its objects live in the operator's informers (filled directly,
as a first list fills them); a binding or an eviction changes them at once and tells
the informers' subscriber, as the watch would; every other write is counted, not kept.
Never the proof that something works with a real API server: tests/k8s is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kai_ray.k8s.watches import Watches

__all__ = ["MemoryApi"]


class MemoryApi:
    """`watches`: the operator's, whose objects this serves (set once it exists)."""

    def __init__(self, watches: Watches | None = None) -> None:
        self._watches = watches
        self.writes = 0  # conditions, Events, Queue status: counted only

    @property
    def watches(self) -> Watches:
        assert self._watches is not None, "MemoryApi.watches is set to the operator's first"
        return self._watches

    @watches.setter
    def watches(self, watches: Watches) -> None:
        self._watches = watches

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.watches.pods.items.get((namespace, name))

    async def bind(self, namespace: str, pod: str, node: str, uid: str = "") -> None:
        obj = self._pod(namespace, pod)
        if obj is None:
            return
        fresh = {**obj, "spec": {**obj["spec"], "nodeName": node}, "status": {"phase": "Running"}}
        self.watches.pods.items[(namespace, pod)] = fresh
        if self.watches.pods.on_change is not None:
            self.watches.pods.on_change("MODIFIED", fresh)

    async def evict(self, namespace: str, pod: str) -> bool:
        obj = self.watches.pods.items.pop((namespace, pod), None)
        if obj is not None and self.watches.pods.on_change is not None:
            self.watches.pods.on_change("DELETED", obj)
        return obj is not None

    async def patch(self, path: str, body: Mapping[str, Any], *, merge: bool = True) -> dict[str, Any]:
        self.writes += 1
        return {}

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.writes += 1
        return dict(body)
