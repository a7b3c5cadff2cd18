"""Queues per GPU type (docs/gpu-types.md, "Queues per type"): the rules that read a
queue's figures of each type (typedusage.py): its limit, its quota for non-preemptible
work, whether it borrows, whether it holds over its fair share, the type a job's rank
counts on; and the fair shares per type. Fair share is DRF with each type a resource of
its own, level by level down the tree (fairshare.py, once per type). The figures are
made once per cycle (`typed_queues`) and kept in step by the Statement through QueueUsage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from kai_ray.core.model.snapshot import UNLIMITED, QueueInfo, Reason
from kai_ray.core.model.words import number
from kai_ray.core.rules.fairshare import compute_fair_shares
from kai_ray.core.rules.hooks import NO_SHARE_BASE
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.gputypes import GpuTypes
from kai_ray.core.state.jobs import Job
from kai_ray.core.state.nodes import FloatArray, Nodes
from kai_ray.core.state.typedusage import TypedUsage

__all__ = ["blocked", "borrows", "over_share", "rank_column", "typed_queues"]

EPS = 1e-9


def typed_queues(
    queues: Sequence[QueueInfo], state: ClusterState, types: GpuTypes, k_value: float
) -> TypedUsage | None:
    """The cycle's per-type figures, or None where no queue names a type the cluster has
    (then every rule reads the plain gpu figures alone, as before)."""
    named = [s.gpu_type for q in queues for s in q.gpu_types if s.gpu_type in types.index]
    if not named:
        return None
    typed = TypedUsage(queues, state.tree, state.jobs, state.queue_amount, types, list(dict.fromkeys(named)))
    _fair_shares(typed, state.nodes, k_value)
    return typed


def blocked(typed: TypedUsage, job: Job, type_id: int, gpus: float) -> Reason | None:
    """Why `gpus` more of this type would take the job's queue, or one above it, over
    its limit of the type ("queue-limit"), or, for a non-preemptible job, over its
    quota of it ("queue-quota", as capacity.py says it without types); None when they
    may. Reads the job's queue and preemptibility: both in allocate's search key
    (failedsearches._free_room)."""
    c = typed.columns_of_types[type_id]
    if c < 0 or not (
        typed.limited_path[job.queue][c] or (typed.quota_path[job.queue][c] and not job.info.preemptible)
    ):
        return None  # no limit of the type on the queue's path, nor a quota that binds the job
    name, tree = typed.names[c], typed.tree
    for q in tree.ancestors[job.queue]:
        held, limit = typed.allocated[q][c], typed.limit_rows[q][c]
        if limit != UNLIMITED and held + gpus > limit + EPS:
            return Reason(
                "queue-limit",
                f"queue {tree.names[q]} is at its {name} limit of {number(limit)} (holds {number(held)})",
            )
        quota = typed.quota_rows[q][c]
        if (
            not job.info.preemptible
            and quota != UNLIMITED
            and typed.nonpreemptible[q][c] + gpus > quota + EPS
        ):
            return Reason(
                "queue-quota",
                f"queue {tree.names[q]} would go over its {name} quota of {number(quota)} with "
                f"non-preemptible work (holds {number(typed.nonpreemptible[q][c])})",
            )
    return None


def borrows(typed: TypedUsage, queue: int, type_id: int, gpus: float) -> bool:
    """Whether `gpus` more of the type take the queue over its own quota of it (a type
    it does not name: a quota of none), as whenCanBorrow reads it."""
    c = typed.columns_of_types[type_id]
    if c < 0:
        return True
    quota = typed.quota_rows[queue][c]
    return quota != UNLIMITED and typed.allocated[queue][c] + gpus > quota + EPS


def over_share(typed: TypedUsage, queue: int, type_id: int, more: float = 0.0) -> bool:
    """Whether the queue holds (with `more`) over its fair share of the type."""
    c = int(typed.column[type_id])
    return c >= 0 and typed.allocated[queue][c] + more > typed.fair_share[queue, c] + EPS


def rank_column(typed: TypedUsage, job: Job, first: int | None = None) -> int:
    """The type column its GPUs count on when its queue is ranked for it: the type its
    gang holds, else the type it is held to (`first`, Placer.first_type: ranked as
    the same job accepting that type alone, named by a queue or not), else the first
    named type it accepts; -1: any (policy ranks it)."""
    held = typed.types.held_by(job) if job.active_count else None
    if held is not None:
        return typed.columns_of_types[held]
    if first is not None:
        return typed.columns_of_types[first]
    for name in job.info.gpu_types:
        c = typed.column_of(name)
        if c >= 0:
            return c
    return -1


def _fair_shares(typed: TypedUsage, nodes: Nodes, k: float) -> None:
    """Each type's fair share, level by level; its deserved share and what a dominant
    share divides by are kept too (rows). compute_fair_shares splits each of its three
    resources on its own (element by element, sums per column), so three types go
    through one call as its three columns: the very figures of one call per type."""
    tree, t = typed.tree, len(typed.names)
    capacity = np.array(
        [
            float(nodes.capacity[(typed.types.ids == typed.types.index[name]) & nodes.schedulable, 0].sum())
            for name in typed.names
        ]
    )
    requested, weight = typed.requested, typed.weight
    out, deserved, allocatable = (
        np.zeros_like(requested),
        np.zeros_like(requested),
        np.zeros_like(requested),
    )
    for first in range(0, t, 3):
        cols = slice(first, min(first + 3, t))
        per_type = replace(
            tree,
            quota=_three(typed.quota[:, cols]),
            limit=_three(typed.limit[:, cols], UNLIMITED),
            weight=_three(weight[:, cols]),
            derived={},
        )
        total = _three(capacity[None, cols])[0]
        shares = compute_fair_shares(per_type, total, _three(requested[:, cols]), None, k)
        width = cols.stop - first
        out[:, cols], deserved[:, cols] = shares.fair_share[:, :width], shares.deserved[:, :width]
        allocatable[:, cols] = shares.allocatable[:, :width]
    base = np.where(allocatable > EPS, allocatable, NO_SHARE_BASE)
    # Per queue, for its rank: the held GPUs above which it is over its fair share, and
    # past its deserved share (each share plus EPS, added once here), and what a
    # dominant share divides by.
    typed.rank_rows = list(zip((out + EPS).tolist(), (deserved + EPS).tolist(), base.tolist(), strict=True))
    typed.fair_share = out


def _three(columns: FloatArray, rest: float = 0.0) -> FloatArray:
    """Up to three columns as compute_fair_shares' three, the rest filled with `rest`."""
    out = np.full((len(columns), 3), rest)
    out[:, : columns.shape[1]] = columns
    return out


def _nothing() -> None:
    pass
