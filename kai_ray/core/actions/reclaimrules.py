"""Reclaim's judgements: which candidates a reclaim may look at, whether a scenario it
found holds, and why a queue may not reclaim; with GPU types named by queues, the same
judgements on the type's own fair share (docs/gpu-types.md, "Queues per type").

KAI's rules themselves are policy hooks (policy.py: reclaim_may_take_from,
reclaim_allows, reclaim_keeps_bounds); these read the cycle's figures for them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kai_ray.core.actions.terms import Scenario
from kai_ray.core.model.snapshot import Reason
from kai_ray.core.model.words import number
from kai_ray.core.rules.capacity import format_resource
from kai_ray.core.rules.hooks import ReclaimSides
from kai_ray.core.rules.typedqueues import over_share
from kai_ray.core.session.context import CycleContext
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.gputypes import gpus_of
from kai_ray.core.state.jobs import Job, Unit
from kai_ray.core.state.nodes import EPS
from kai_ray.core.state.typedusage import TypedUsage

__all__ = ["TypedReclaim", "may_take", "over_share_reason", "reclaim_valid", "typed_reclaim"]


def reclaim_valid(
    ctx: CycleContext, job: Job, asked: np.ndarray, before: np.ndarray, scenario: Scenario
) -> bool:
    """KAI's judgement of a reclaim scenario, on the victims it actually stops (a victim
    placed again elsewhere gives nothing): each in turn must be one the reclaim
    strategies allow where the two queues' ancestry diverges, with what that side keeps
    after the victims before it (policy.reclaim_allows); then the reclaimer's path must
    stay within KAI's bound (policy.reclaim_keeps_bounds), read off the state with the
    scenario applied."""
    state, shares, tree, policy = ctx.state, ctx.shares, ctx.state.tree, ctx.policy
    left: dict[int, np.ndarray] = {}
    for u in sorted(scenario.stopped, key=lambda u: u.job.queue):
        common = tree.lowest_common_ancestor(job.queue, u.job.queue)
        mine, theirs = tree.child_toward(common, job.queue), tree.child_toward(common, u.job.queue)
        held = left.setdefault(theirs, before[theirs].copy())
        sides = ReclaimSides(
            my_after=(before[mine] + asked).tolist(),
            my_deserved=shares.deserved[mine].tolist(),
            their_allocated=held.tolist(),
            their_deserved=shares.deserved[theirs].tolist(),
            their_allocatable=shares.allocatable[theirs].tolist(),
        )
        if not policy.reclaim_allows(sides):
            return False
        held -= ctx.amount(list(u.tasks))
    return policy.reclaim_keeps_bounds(state, shares, job, asked, _gave(state, before, job.queue))


def _gave(state: ClusterState, before: np.ndarray, reclaimer: int) -> dict[int, np.ndarray]:
    """What each queue off the reclaimer's path lost to this search's victims."""
    lost = before - np.array(state.usage.allocated)
    path = set(state.tree.ancestors[reclaimer])
    return {q: lost[q] for q in np.flatnonzero((lost > EPS).any(axis=1)).tolist() if q not in path}


def over_share_reason(ctx: CycleContext, job: Job, amount: np.ndarray) -> Reason:
    """Names the resource that would go over (the first of gpu, cpu, memory)."""
    q = job.queue
    cannot = f"no free room, and queue {ctx.state.tree.names[q]} cannot reclaim"
    held = ctx.state.usage.allocated[q]
    share = ctx.shares.fair_share[q]
    over = [r for r in range(3) if held[r] + amount[r] > share[r] + EPS]
    if not over:  # what failed was the deserved quota of non-preemptible work
        return Reason("queue-quota", f"{cannot}: its non-preemptible jobs would go over its deserved quota")
    r = over[0]
    return Reason(
        "fair-share",
        f"{cannot}: it would go over its fair share of {format_resource(r, float(share[r]))} "
        f"(it holds {format_resource(r, held[r])}, this job asks for {format_resource(r, float(amount[r]))})",
    )


def may_take(ctx: CycleContext, mine: int, theirs: int, my_after: np.ndarray, asked: np.ndarray) -> bool:
    shares = ctx.shares
    return ctx.policy.reclaim_may_take_from(
        ReclaimSides(
            my_after=my_after.tolist(),
            my_deserved=shares.deserved[mine].tolist(),
            their_allocated=list(ctx.state.usage.allocated[theirs]),
            their_deserved=shares.deserved[theirs].tolist(),
            their_allocatable=shares.allocatable[theirs].tolist(),
            asked=asked.tolist(),
        )
    )


# ---------------------------------------------------------------- per GPU type


class TypedReclaim:
    """A reclaim judged on GPU types (the job's every candidate type is named by some
    queue): DRF with each type a resource of its own. The reclaimer's path must stay
    within its fair share of the type it takes; a victim's side must hold more than its
    fair share of the type of the GPUs it frees; cpu and memory are judged as before."""

    def __init__(self, ctx: CycleContext, job: Job, typed: TypedUsage, type_ids: list[int]) -> None:
        self.ctx, self.job, self.typed, self.type_ids = ctx, job, typed, type_ids
        self.gpus = gpus_of(job.next_step())

    def passing(self, amount: np.ndarray) -> list[int]:
        """The candidate types the reclaimer's path stays within its fair share of with
        the job (and within cpu and memory shares, as any reclaim)."""
        state, shares, q = self.ctx.state, self.ctx.shares, self.job.queue
        after = np.array(state.usage.allocated[q]) + amount
        if (after[1:] > shares.fair_share[q][1:] + EPS).any():
            return []
        path = state.tree.ancestors[q]
        return [t for t in self.type_ids if not any(over_share(self.typed, p, t, self.gpus) for p in path)]

    def unit_allowed(self, types: list[int]) -> Callable[[Unit], bool]:
        """A candidate may be taken when its GPUs are of a passing type whose fair share
        its side (below the common ancestor) is over, and the reclaimer's side stays within."""
        tree, ids, typed = self.ctx.state.tree, self.typed.types.ids, self.typed

        def allowed(u: Unit) -> bool:
            common = tree.lowest_common_ancestor(self.job.queue, u.job.queue)
            mine, theirs = tree.child_toward(common, self.job.queue), tree.child_toward(common, u.job.queue)
            on = {int(ids[t.node]) for t in u.tasks if t.node >= 0} & set(types)
            return any(over_share(typed, theirs, t) and not over_share(typed, mine, t, self.gpus) for t in on)

        return allowed

    def valid(self, scenario: Scenario) -> bool:
        """With the scenario applied: the reclaimer's path within its fair share of every
        type it holds now."""
        typed, path = self.typed, self.ctx.state.tree.ancestors[self.job.queue]
        return not any(over_share(typed, p, t) for p in path for t in self.type_ids)

    def standings(self) -> tuple[float, ...]:
        """The per-type figures its judgements read (a failed search's verdicts)."""
        return tuple(x for row in self.typed.allocated for x in row)

    def refused(self, amount: np.ndarray) -> Reason:
        q, typed = self.job.queue, self.typed
        name = self.ctx.state.tree.names[q]
        c = int(typed.column[self.type_ids[0]])
        return Reason(
            "fair-share",
            f"no free room, and queue {name} cannot reclaim: it would go over its fair share of "
            f"{number(typed.fair_share[q, c])} {typed.names[c]} GPUs "
            f"(it holds {number(typed.allocated[q][c])}, this job asks for {number(self.gpus)})",
        )


def typed_reclaim(ctx: CycleContext, job: Job) -> TypedReclaim | None:
    """The per-type judgement for this job, or None where the classic one applies: no
    queue names types, the gang may span types or asks for no GPU, or some type it may
    take is named by no queue."""
    typed, types = ctx.state.usage.typed, ctx.placer.gpu_types
    if typed is None or job.info.mixed_gpu_types or not types.asks_gpu(job):
        return None
    candidates = ctx.placer.type_candidates(job)
    if not candidates or any(typed.column[t] < 0 for t in candidates):
        return None
    return TypedReclaim(ctx, job, typed, candidates)
