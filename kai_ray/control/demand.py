"""Which waiting work should make a cluster grow.

An autoscaler (Kubernetes' cluster-autoscaler or Karpenter, Ray's autoscaler) adds nodes
for work that waits for room. Work that kai-ray holds back on purpose (its queue is at
its limit or over its quota or fair share, or it cannot be considered at all) would wait
just the same on a bigger cluster: buying nodes for it wastes money and, worse, the new
nodes are then taken by exactly the work the queues were meant to hold back. The core's
reason code says which is which; every backend asks here and says it its own way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kai_ray.control.snapshot import ACCELERATOR_PREFIX
from kai_ray.control.workload import HOLDING, State, Workload
from kai_ray.core import DEFAULT_GPU_TYPE, REASON_CODES, NodeInfo, Reason

__all__ = ["CAPACITY_CODES", "HELD_CODES", "autoscaler_bundles", "room_would_help", "wants_capacity"]

# More or other nodes would let the work start. A gang waiting out its preemption delay
# waits for exactly that: new nodes, before it takes running work's room.
CAPACITY_CODES = frozenset(
    {
        "gang-too-big",
        "gpu-type",  # it accepts only GPU types the cluster lacks: a node of one helps
        "node-selector",
        "node-affinity",
        "topology",
        "spread",
        "no-room",
        "min-runtime",
        "preemption-delay",
        "reserved",
    }
)
# What a bundle asks of the accelerator-type resource: a token, as Ray's own
# `accelerator_type=` option asks (a node of the type has 1 of it).
ACCELERATOR_TOKEN = 0.001
# Held back by policy, or not startable at all: no node would help.
HELD_CODES = frozenset(REASON_CODES) - CAPACITY_CODES


def room_would_help(code: str) -> bool:
    """Whether work waiting with this reason code waits for room a new node could give it
    (the rule every backend's autoscaler demand follows)."""
    return code in CAPACITY_CODES


def wants_capacity(reason: Reason) -> bool:
    """True when the work waits for room that a new node could give it."""
    return room_would_help(reason.code)


def autoscaler_bundles(
    workloads: Iterable[Workload], nodes: Mapping[str, NodeInfo] | None = None
) -> list[dict[str, float]]:
    """What to ask an autoscaler that sizes the cluster to hold a set of bundles (Ray's
    `request_resources`, which counts work already running against the request, so the
    request is the whole: every bundle kai-ray's workloads hold, plus the gangs waiting
    for room). Empty when nothing waits for room: the request is withdrawn, and work held
    back by its queue never asks for a node.

    GPU types (docs/gpu-types.md) in Ray's words (`accelerator_type:<T>`, a token amount,
    as Ray's own `accelerator_type=` asks): a waiting gang asks for its most preferred
    type, so that the autoscaler starts a node of a type it can run on; a held bundle for
    the type of the node it is on (`nodes`: by node id), so that it is counted there."""
    waiting: list[dict[str, float]] = []
    held: list[dict[str, float]] = []
    for w in workloads:
        bundle = {k: float(v) for k, v in w.spec.resources_per_worker.items() if float(v) > 0}
        if w.state is State.QUEUED and room_would_help(w.reason_code):
            wanted = _of_type(bundle, w.spec.accelerator_type[0] if w.spec.accelerator_type else None)
            waiting += [dict(wanted) for _ in range(w.spec.gang)]
        elif w.state in HOLDING:  # handed-off jobs too: their slots stay accounted as theirs
            held += [_of_type(bundle, _type_of(nodes, s.node)) for s in w.slots.values()]
    return held + waiting if waiting else []


def _type_of(nodes: Mapping[str, NodeInfo] | None, node: str) -> str | None:
    info = nodes.get(node) if nodes is not None else None
    return info.gpu_type if info is not None and info.gpu_type != DEFAULT_GPU_TYPE else None


def _of_type(bundle: dict[str, float], gpu_type: str | None) -> dict[str, float]:
    """The bundle, kept to nodes of a GPU type when it asks for GPUs and has one."""
    asks_gpu = bundle.get("GPU", 0.0) > 0 or bundle.get("gpu_memory", 0.0) > 0
    if gpu_type is None or not asks_gpu or any(k.startswith(ACCELERATOR_PREFIX) for k in bundle):
        return dict(bundle)
    return {**bundle, f"{ACCELERATOR_PREFIX}{gpu_type}": ACCELERATOR_TOKEN}
