"""Which waiting work should make a cluster grow.

An autoscaler (Kubernetes' cluster-autoscaler or Karpenter, Ray's autoscaler) adds nodes
for work that waits for room. Work that kai-ray holds back on purpose (its queue is at
its limit or over its quota or fair share, or it cannot be considered at all) would wait
just the same on a bigger cluster: buying nodes for it wastes money and, worse, the new
nodes are then taken by exactly the work the queues were meant to hold back. The core's
reason code says which is which; every backend asks here and says it its own way.
"""

from __future__ import annotations

from collections.abc import Iterable

from kai_ray.control.workload import HOLDING, State, Workload
from kai_ray.core import REASON_CODES, Reason

__all__ = ["CAPACITY_CODES", "HELD_CODES", "autoscaler_bundles", "room_would_help", "wants_capacity"]

# More or other nodes would let the work start. A gang waiting out its preemption delay
# waits for exactly that: new nodes, before it takes running work's room.
CAPACITY_CODES = frozenset(
    {
        "gang-too-big",
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
# Held back by policy, or not startable at all: no node would help.
HELD_CODES = frozenset(REASON_CODES) - CAPACITY_CODES


def room_would_help(code: str) -> bool:
    """Whether work waiting with this reason code waits for room a new node could give it
    (the rule every backend's autoscaler demand follows)."""
    return code in CAPACITY_CODES


def wants_capacity(reason: Reason) -> bool:
    """True when the work waits for room that a new node could give it."""
    return room_would_help(reason.code)


def autoscaler_bundles(workloads: Iterable[Workload]) -> list[dict[str, float]]:
    """What to ask an autoscaler that sizes the cluster to hold a set of bundles (Ray's
    `request_resources`, which counts work already running against the request, so the
    request is the whole: every bundle kai-ray's workloads hold, plus the gangs waiting
    for room). Empty when nothing waits for room: the request is withdrawn, and work held
    back by its queue never asks for a node."""
    waiting: list[dict[str, float]] = []
    held: list[dict[str, float]] = []
    for w in workloads:
        bundle = {k: float(v) for k, v in w.spec.resources_per_worker.items() if float(v) > 0}
        if w.state is State.QUEUED and room_would_help(w.reason_code):
            waiting += [dict(bundle) for _ in range(w.spec.gang)]
        elif w.state in HOLDING:  # handed-off jobs too: their slots stay accounted as theirs
            held += [dict(bundle) for _ in w.slots]
    return held + waiting if waiting else []
