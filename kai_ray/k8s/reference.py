"""The Kubernetes world built whole from every object the watches hold: the reference
the patched world (kai_ray.k8s.source) is checked against when KAI_RAY_CHECK_INCREMENTAL
is set, and what `kai-ray bench k8s --world-nodes` times as the rebuild."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kai_ray.control.kubenodes import GPU_PRODUCT_LABEL
from kai_ray.core import ClusterSnapshot, JobInfo, NodeInfo, QueueInfo
from kai_ray.k8s.gangs import build_gangs
from kai_ray.k8s.sharing import idle_reservations, is_reservation
from kai_ray.k8s.suspension import virtual_pods, virtual_scheduler
from kai_ray.k8s.watches import OwnerObjects, Watches
from kai_ray.k8s.world import World, build_world

__all__ = ["WorldMismatch", "rebuild_world", "same_world"]


class WorldMismatch(AssertionError):
    """The patched world differs from the full rebuild (a bug in the patching)."""


def rebuild_world(
    watches: Watches,
    classes: Mapping[str, int],
    queues: list[QueueInfo],
    names: frozenset[str],
    default_queue: str,
    assumed: Mapping[str, str],
    placeholders: Mapping[str, str],
    virtual: Sequence[Mapping[str, Any]] | None = None,
    gpu_type_label: str = GPU_PRODUCT_LABEL,
) -> World:
    """`virtual`: the pods standing for suspended owners when the caller keeps them
    (the source does); otherwise made here from the owners (kai_ray.k8s.suspension).
    `gpu_type_label`: the node label naming a node's GPU type."""
    items = watches.pods.items.values()
    if virtual is None:
        scheduler = virtual_scheduler(names)
        virtual = [
            p
            for (kind, _, _), obj in OwnerObjects(watches).items()
            for p in virtual_pods(kind, obj, scheduler)
        ]
    pods = [p for p in items if not is_reservation(p)] + list(virtual)
    gangs = build_gangs(
        pods,
        OwnerObjects(watches),
        classes,
        scheduler_names=names,
        default_queue=default_queue,
        gpu_type_label=gpu_type_label,
        namespaces=watches.namespace_labels(),
    )
    return build_world(
        watches.nodes.items.values(),
        pods,
        gangs,
        queues,
        scheduler_names=names,
        assumed=assumed,
        placeholders=placeholders,
        idle_holders=idle_reservations(list(items), assumed),
        gpu_type_label=gpu_type_label,
    )


def same_world(got: ClusterSnapshot, want: ClusterSnapshot) -> None:
    """Raise WorldMismatch, naming the first difference, unless the two are equal."""
    _same("node", got.nodes, want.nodes)
    _same("job", got.jobs, want.jobs)
    if got.queues != want.queues:
        raise WorldMismatch(f"queues differ: patched {got.queues!r}, rebuilt {want.queues!r}")


def _same(what: str, got: Sequence[NodeInfo | JobInfo], want: Sequence[NodeInfo | JobInfo]) -> None:
    if got == want:
        return
    got_names, want_names = [x.name for x in got], [x.name for x in want]
    if got_names != want_names:
        raise WorldMismatch(f"{what}s differ: patched {got_names}, rebuilt {want_names}")
    for a, b in zip(got, want, strict=True):
        if a != b:
            raise WorldMismatch(f"{what} {a.name} differs:\npatched {a!r}\nrebuilt {b!r}")
