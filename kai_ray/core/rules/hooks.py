"""The data the policy hooks take: shared by the actions (which fill it) and the policy
(which reads it), so neither has to import the other (a victim `Unit` is working state:
cluster.py). The hooks themselves, and the
contract they keep (what search keys and job keys must hold): `Policy` in policy.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kai_ray.core.rules.fairshare import FairShares
from kai_ray.core.state.nodes import FloatArray

__all__ = ["NO_SHARE_BASE", "ReclaimSides", "ShareRows"]

# A resource the queue has no allocatable share of: its dominant share is what it holds
# times 1000 (KAI's GetDominantResourceShare, noFairShareDrfMultiplier), not a share of
# the cluster, so any use of it outweighs every resource the queue has a share of.
NO_SHARE_BASE = 1e-3


@dataclass(frozen=True, slots=True)
class ShareRows:
    """Fair shares as plain floats: ranking runs once per job and tiny numpy calls cost
    more than the arithmetic."""

    deserved: list[list[float]]
    fair_share: list[list[float]]
    allocatable: list[list[float]]
    total: list[float]
    # Per queue, what a dominant share divides by: the allocatable share, or
    # NO_SHARE_BASE where that is 0 (KAI's proportion plugin: allocated x 1000).
    share_base: list[list[float]]
    # Per pair of queues (by index), whether the first wins a full tie (policy.TieBreak).
    tie_order: dict[tuple[int, int], bool] = field(default_factory=dict, compare=False)

    @staticmethod
    def of(shares: FairShares, total: FloatArray) -> ShareRows:
        allocatable = shares.allocatable.tolist()
        totals = total.tolist()
        base = [[a if a > 1e-9 else NO_SHARE_BASE for a in row] for row in allocatable]
        return ShareRows(shares.deserved.tolist(), shares.fair_share.tolist(), allocatable, totals, base)


@dataclass(frozen=True, slots=True)
class ReclaimSides:
    """The two sides of a reclaim where the queues' ancestry diverges ([gpu, cpu, memory])."""

    my_after: Sequence[float]  # the reclaimer's side with the job added
    my_deserved: Sequence[float]
    their_allocated: Sequence[float]  # the victim's side, before this victim is taken
    their_deserved: Sequence[float]
    their_allocatable: Sequence[float]
    asked: Sequence[float] = ()  # what the reclaimer's job asks (its resources: those > 0)
