"""Fair share per queue and resource, computed top-down over the queue tree.

The top-level queues split the cluster total; every queue's children then split that
queue's fair share, level by level. At one level (one parent share S, per resource):

1. deserved = min(quota, requested, limit), quota -1 meaning S. Quotas are not scaled
   down when they add up to more than S; what is left is max(0, S - sum(deserved)).
2. The rest goes out by over-quota weight, highest queue priority first, in rounds.
3. The fractions that rounding down left over go out at most one unit per queue.

All queues of one depth are computed together with segment sums over sibling groups,
so the Python work is proportional to depth x priority tiers x rounds, not to Q.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt

from kai_ray.core.state.queues import QueueTree

__all__ = ["FairShares", "compute_fair_shares"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]
_T = TypeVar("_T", bound=np.generic)


@dataclass(frozen=True, slots=True)
class FairShares:
    """Per queue [Q, 3], columns in RESOURCES order (gpu, cpu, memory)."""

    deserved: FloatArray  # min(quota, requested, limit); quota -1 = the parent's share
    fair_share: FloatArray  # deserved + over-quota share
    allocatable: FloatArray  # max(quota, fair_share) capped by the limit (see _allocatable)


def compute_fair_shares(
    tree: QueueTree,
    total: FloatArray,
    requested: FloatArray,
    usage: FloatArray | None = None,
    k_value: float = 1.0,
) -> FairShares:
    """Fair shares for every queue of `tree`.

    `requested` is allocated + pending per queue, already summed over each subtree;
    `usage` is the normalised historical usage (0..1) that shifts only the over-quota
    split; a negative `k_value` is treated as 0, as KAI does.
    """
    n = len(tree)
    total_arr = np.asarray(total, dtype=np.float64)
    req = np.asarray(requested, dtype=np.float64)
    use = np.zeros((n, 3)) if usage is None else np.asarray(usage, dtype=np.float64)
    if total_arr.shape != (3,) or req.shape != (n, 3) or use.shape != (n, 3):
        raise ValueError(
            f"compute_fair_shares: expected total [3], requested and usage [{n}, 3]; "
            f"got {total_arr.shape}, {req.shape}, {use.shape}"
        )
    # What a queue can use at most: its request, capped by its limit.
    want = np.minimum(req, np.where(tree.limit < 0, np.inf, tree.limit))
    deserved = np.zeros((n, 3))
    fair = np.zeros((n, 3))
    k = max(0.0, float(k_value))
    for level in _levels(tree):
        share = total_arr[None, :] if level.top else fair[level.parents]
        des, fs = _divide_level(level, share, tree, want, use, k)
        deserved[level.kids] = des
        fair[level.kids] = fs
    return FairShares(deserved, fair, _allocatable(tree, fair, total_arr))


@dataclass(frozen=True, slots=True)
class _Level:
    """The queues of one depth, sorted by (parent, index) so siblings are contiguous."""

    top: bool
    kids: IntArray  # queue indices
    group: IntArray  # per kid: position of its parent in `parents` (its sibling group)
    starts: IntArray  # first kid of each group
    parents: IntArray  # queue index of each group's parent (unused at the top)
    quota: FloatArray  # the kids' rows of the tree's arrays, taken once per tree
    weight: FloatArray
    priority: npt.NDArray[np.int64]
    tiers: npt.NDArray[np.int64]  # the kids' distinct priorities, highest first

    def sum(self, x: FloatArray) -> FloatArray:
        """Per sibling group sums of a [kids, 3] array -> [groups, 3]."""
        return np.add.reduceat(x, self.starts, axis=0)

    def spread(self, x: npt.NDArray[_T]) -> npt.NDArray[_T]:
        """A per group [groups, 3] array repeated for each kid -> [kids, 3]."""
        return x[self.group]


def _levels(tree: QueueTree) -> list[_Level]:
    """The tree's levels, kept with the tree: a scheduler asks about the same tree cycle
    after cycle (a cycle cache keeps it), and a tree is never changed."""
    levels = tree.derived.get("fair-share levels")
    if levels is None:
        levels = tree.derived["fair-share levels"] = _build_levels(tree)
    return cast(list[_Level], levels)


def _build_levels(tree: QueueTree) -> list[_Level]:
    if len(tree) == 0:
        return []
    depth = np.array([len(a) - 1 for a in tree.ancestors], dtype=np.intp)
    parent = np.array(tree.parent, dtype=np.intp)
    levels = []
    for d in range(int(depth.max()) + 1):
        idx = np.flatnonzero(depth == d)
        # lexsort: the last key is the primary one; index order breaks ties (older first).
        kids = idx[np.lexsort((idx, parent[idx]))]
        par = parent[kids]
        new_group = np.r_[True, par[1:] != par[:-1]]
        starts = np.flatnonzero(new_group)
        group = np.cumsum(new_group) - 1
        priority = np.array(tree.priority, dtype=np.int64)[kids]
        level = _Level(
            d == 0,
            kids,
            group,
            starts,
            par[starts],
            tree.quota[kids],
            tree.weight[kids],
            priority,
            np.unique(priority)[::-1],
        )
        levels.append(level)
    return levels


def _divide_level(
    level: _Level,
    share: FloatArray,
    tree: QueueTree,
    want_all: FloatArray,
    usage_all: FloatArray,
    k: float,
) -> tuple[FloatArray, FloatArray]:
    """Split each group's parent share among its kids: (deserved, fair share) [kids, 3]."""
    kids = level.kids
    want = want_all[kids]
    quota = level.quota
    # Quota -1 means "all of the parent's share"; no scaling when quotas over-commit S.
    deserved = np.maximum(0.0, np.minimum(np.where(quota < 0, level.spread(share), quota), want))
    remaining = np.maximum(0.0, share - level.sum(deserved))
    fair = deserved.copy()
    weight = level.weight
    usage = usage_all[kids]
    # Higher priority tiers first; a lower tier only sees what the higher ones left.
    for p in level.tiers:
        tier = (level.priority == p)[:, None]
        frac = _over_quota_rounds(level, tier, fair, want, weight, usage, k, remaining)
        _hand_out_fractions(level, tier, frac, fair, want, remaining)
    return deserved, fair


def _over_quota_rounds(
    level: _Level,
    tier: BoolArray,
    fair: FloatArray,
    want: FloatArray,
    weight: FloatArray,
    usage: FloatArray,
    k: float,
    remaining: FloatArray,
) -> FloatArray:
    """Give `remaining` to the tier by weight, in rounds; updates `fair` and `remaining`.

    Returns per kid the fraction it was last offered but not given (offer - floor(offer)),
    which orders the hand-out of the leftovers.
    """
    frac = np.zeros_like(fair)
    live = remaining > 0  # [groups, 3]: groups that run another round
    while live.any():
        need = want - fair
        active = tier & (need > 0) & (weight > 0) & level.spread(live)
        w = np.where(active, weight, 0.0)
        w_norm = np.divide(w, level.spread(level.sum(w)), out=np.zeros_like(w), where=active)
        # Time-based fair share: shift toward queues that used less than their weight
        # share; renormalise so that the offers add up to what is being split.
        shift = np.where(active, np.maximum(0.0, w_norm + k * (w_norm - usage)), 0.0)
        shift_sum = level.spread(level.sum(shift))
        offer = np.divide(level.spread(remaining) * shift, shift_sum, out=np.zeros_like(w), where=shift > 0)
        fits = active & (need <= offer)
        floored = np.floor(offer)
        # A queue that cannot be satisfied gets whole units only (cores, devices, bytes).
        take = np.where(fits, need, np.where(active, floored, 0.0))
        fair[...] = np.where(fits, want, fair + take)  # `want` exactly: no float residue
        rounded_down = active & ~fits & (offer > floored)
        frac = np.where(fits, 0.0, np.where(rounded_down, offer - floored, frac))
        np.maximum(0.0, remaining - level.sum(take), out=remaining)
        # Another round only where a queue needed less than its offer: that surplus is
        # then re-split among the others. Each such round satisfies a queue, so it ends.
        surplus = level.sum((active & (need < offer)).astype(np.float64)) > 0
        live = surplus & (remaining > 0)
    return frac


def _hand_out_fractions(
    level: _Level,
    tier: BoolArray,
    frac: FloatArray,
    fair: FloatArray,
    want: FloatArray,
    remaining: FloatArray,
) -> None:
    """Give what rounding down left over, min(1, left) per queue, largest fraction first
    (ties: older queue), never more than a queue still wants. Updates in place."""
    need = want - fair
    for r in range(fair.shape[1]):
        ok = tier[:, 0] & (frac[:, r] > 0) & (need[:, r] > 0) & (remaining[level.group, r] > 0)
        cand = np.flatnonzero(ok)
        if cand.size == 0:
            continue
        cand = cand[np.lexsort((cand, -frac[cand, r], level.group[cand]))]
        grp = level.group[cand]
        cap = np.minimum(1.0, need[cand, r])
        # Sequential "each takes min(cap, what is left)" as a segmented prefix sum.
        before = np.cumsum(cap) - cap
        first = np.r_[True, grp[1:] != grp[:-1]]
        before -= before[first][np.cumsum(first) - 1]
        gift = np.clip(remaining[grp, r] - before, 0.0, cap)
        fair[cand, r] += gift
        given = np.bincount(grp, weights=gift, minlength=remaining.shape[0])
        np.maximum(0.0, remaining[:, r] - given, out=remaining[:, r])


def _allocatable(tree: QueueTree, fair: FloatArray, total: FloatArray) -> FloatArray:
    """KAI's allocatable share: max(quota, fair share), capped by the limit.

    It uses the queue's quota, not the clipped `deserved` (which never exceeds the fair
    share, so max(deserved, fair) would always equal the fair share): a queue asking
    for less than its quota can still grow to its quota. Quota -1: the limit, or the
    cluster total where there is no limit either.
    """
    limited = tree.limit >= 0
    alloc = np.maximum(tree.quota, fair)
    alloc = np.where(limited, np.minimum(alloc, tree.limit), alloc)
    unbounded = np.where(limited, tree.limit, total[None, :])
    return np.where(tree.quota < 0, unbounded, alloc)
