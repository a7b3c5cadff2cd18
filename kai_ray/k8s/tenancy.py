"""Namespaces as tenants (docs/tenants.md), for the Kubernetes backend's ClusterSource:
each namespace's labels (a queue's tenantSelector reads them, and one of them names the
namespace's default queue), which namespaces changed since the last look, and each
ruled queue's rule resolved against them for its status (the admission policy's data),
made again only after something it reads changed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kai_ray.core import QueueInfo
from kai_ray.k8s.queues import access_status
from kai_ray.k8s.watches import Watches

__all__ = ["Namespaces", "of_namespaces"]


class Namespaces:
    def __init__(self, closed_queues: bool = False) -> None:
        self.closed_queues = closed_queues  # SchedulerConfig.closed_queues
        self.labels: dict[str, dict[str, str]] = {}  # namespace -> its labels
        self._seen: set[str] | None = None  # changed since the last read; None: all may have
        # (the queues, classes and labels it was made from: held, compared by identity; it)
        self._resolved: tuple[tuple[object, ...], dict[str, dict[str, Any]]] = ((), {})

    def changed(self, name: str) -> None:
        if self._seen is not None:
            self._seen.add(name)

    def relisted(self) -> None:
        self._seen = None

    def read(self, watches: Watches) -> set[str]:
        """The namespaces whose labels changed since the last read."""
        seen = self._seen
        if seen is not None and not seen:
            return set()
        fresh = watches.namespace_labels()
        names = set(fresh) | set(self.labels) if seen is None else seen
        moved = {ns for ns in names if fresh.get(ns) != self.labels.get(ns)}
        self.labels, self._seen = fresh, set()
        return moved

    def queue_access(
        self, queues: Sequence[QueueInfo], classes: Mapping[str, int]
    ) -> dict[str, dict[str, Any]]:
        """access_status of the queues, kept while the queues, classes and labels are the
        same objects (each is replaced, never changed in place, when it changes)."""
        made_from, said = self._resolved
        now = (queues, classes, self.labels)
        if len(made_from) != 3 or any(a is not b for a, b in zip(made_from, now, strict=True)):
            said = access_status(queues, self.closed_queues, self.labels, self.labels, classes)
            self._resolved = (now, said)
        return said


def of_namespaces(gang_ids: Sequence[str], namespaces: set[str]) -> set[str]:
    """The gangs (ids "<namespace>/<Kind>/<name>") of these namespaces."""
    return {g for g in gang_ids if g.split("/", 1)[0] in namespaces}
