"""The actions that take capacity back from running work: reclaim (between queues),
preempt (inside one queue) and stale-gang eviction. Consolidation: consolidation.py.

Reclaim and preempt walk the jobs whose gang is incomplete in queue order. For each they
build a `VictimSearch` (whose work it may take: the policy's eligibility hooks; how long
min runtime protects it; what the state must keep once the job is placed) and hand it to
`make_room`, which searches inside the Statement: a failed search leaves no trace, not
even in the job's reason, unless what blocked it is worth saying (min runtime).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kai_ray.core.actions.consolidation import consolidate
from kai_ray.core.actions.preemptiondelay import HeldBack
from kai_ray.core.actions.reclaimrules import (
    TypedReclaim,
    may_take,
    over_share_reason,
    reclaim_valid,
    typed_reclaim,
)
from kai_ray.core.actions.solver import solve
from kai_ray.core.actions.terms import Scenario, Terms
from kai_ray.core.actions.victimpool import ActionCandidates, VictimPool
from kai_ray.core.actions.victims import Allowed, EvictReason, GivingOrder, Unit
from kai_ray.core.model.snapshot import Reason, TaskStatus
from kai_ray.core.model.subgroups import short_words
from kai_ray.core.model.words import agree, count, number
from kai_ray.core.rules.capacity import describe_amount, quota_problem
from kai_ray.core.rules.reasons import unmet_affinity
from kai_ray.core.session.context import CycleContext
from kai_ray.core.session.failedsearches import FailedSearches, FailureKey, Grounds, search_key, victim_inputs
from kai_ray.core.session.gangwalk import GangWalk
from kai_ray.core.session.settling import each_waiting_gang
from kai_ray.core.state.gputypes import usable_victim
from kai_ray.core.state.jobs import Job, Task

__all__ = ["EVICTION_ACTIONS", "VictimSearch", "make_room", "preempt", "reclaim", "stale_gang_eviction"]


@dataclass(frozen=True, slots=True)
class VictimSearch:
    """The terms of one search for victims: how one eviction action may make room for
    one job."""

    action: str
    candidates: ActionCandidates  # the action's
    victims: Callable[[], list[Unit]]  # those of the candidates it may take, in victim order
    # Whether a candidate of this queue may be taken as the queues stand, min runtime
    # aside (reclaim: the two sides' standings); None: any may.
    eligible_queue: Callable[[int], bool] | None
    min_runtime: Callable[[Unit], float]  # how long a candidate is protected after it started
    evict_reason: EvictReason
    giving: GivingOrder | None = None  # between queues: the order queues give victims in
    # The action's judgement of a scenario that placed the job (reclaim: KAI's fair-share
    # strategies and bounds on the victims actually stopped); any, by default.
    valid: Callable[[Scenario], bool] = lambda scenario: True
    # What the search decides from the queues' standings about these candidates (a search
    # that found no room with the same verdicts finds none again): none by default.
    verdicts: Callable[[list[Unit]], tuple[object, ...]] = lambda units: ()

    # Whether this candidate may be taken, beyond its queue (reclaim on GPU types: the
    # type of the GPUs it frees); None: any the queue allows.
    eligible_unit: Callable[[Unit], bool] | None = None

    def eligible(self, u: Unit) -> bool:
        if self.eligible_queue is not None and not self.eligible_queue(u.job.queue):
            return False
        return self.eligible_unit is None or self.eligible_unit(u)

    def reads_standings_as_it_evicts(self) -> bool:
        """Whether the search asks the queues' standings again after each victim (which
        victim may be taken, which queue gives next)."""
        return self.eligible_queue is not None or self.giving is not None


def make_room(
    ctx: CycleContext, job: Job, search: VictimSearch, failed: FailedSearches, held: HeldBack
) -> bool:
    """Place the job's missing gang, evicting what the search allows; all or nothing.
    A job within its preemption delay (`held`) that would evict waits instead."""
    gang = job.next_step()  # its missing gang, or once whole one more task (as KAI)
    if not gang or job.incomplete():
        return False
    key = search_key(job, gang, search.action)
    if unmet_affinity(ctx.placer, gang) is not None:
        failed.add(key, None, Grounds.NODES)  # no victim frees a node that does not exist (allocate said so)
        return False
    if failed.known(key):
        _say(ctx, job, failed.reason(key))
        return False
    if held.known(key) and (waits := held.waits(job)) is not None:
        ctx.stmt.set_reason(job.name, waits)  # a look-alike's search would evict: this one's too
        return False
    victims = search.victims()
    protected: list[Unit] = []  # candidates that only their min runtime kept
    frees_usable = usable_victim(ctx.placer.type_mask(job))

    def allowed(u: Unit) -> bool:
        # As KAI: candidates filtered by the standings as the search begins; the
        # scenario's victims then judged by search.valid.
        if not search.eligible(u) or not frees_usable(u):
            return False
        if ctx.policy.min_runtime_protects(u, search.min_runtime(u), ctx.now):
            protected.append(u)
            return False
        return True

    start, evictions = ctx.stmt.checkpoint(), ctx.stmt.evictions
    outcome = _attempt(ctx, job, gang, victims, search, allowed)
    if outcome is _PLACED:
        waits = held.waits(job) if ctx.stmt.evictions > evictions else None
        if waits is not None:  # it would evict, but waits for new nodes first
            ctx.stmt.rollback(start)
            held.add(key)
            ctx.stmt.set_reason(job.name, waits)
            return False
        failed.clear()  # room moved: an earlier failure may succeed now
        return True
    if protected:  # time may lift the protection: this failure is this cycle's alone
        reason = _min_runtime_blocks(ctx, job, gang, victims, search)
        failed.add(key, reason)
    else:
        reason = None
        failed.add_grounded(key, None, lambda: _grounds(outcome, victims, search))
    _say(ctx, job, reason)
    return False


def _grounds(outcome: str, victims: list[Unit], search: VictimSearch) -> object:
    """What a failure in which min runtime protected nothing rests on (Grounds)."""
    if outcome is _REFUSED:
        return Grounds.VICTIMS
    if not victims:
        return Grounds.NO_VICTIMS
    if not any(search.eligible(u) for u in victims):
        return Grounds.NONE_ALLOWED  # room alone decided it, while no candidate is allowed
    if outcome is _NO_ROOM and search.reads_standings_as_it_evicts():
        # Victims were tried, and whether the next one may be taken, and which, was read
        # from the standings as they moved with each: the verdicts as it began are not
        # all it rests on.
        return Grounds.VICTIMS
    return (Grounds.VERDICTS, search.verdicts(victims))


def _say(ctx: CycleContext, job: Job, reason: Reason | None) -> None:
    if reason is not None:
        ctx.stmt.set_reason(job.name, reason)


# How an attempt ended: placed; no room even with every victim it may take gone (the
# bound: its verdicts as it began decide that); no room found trying victims; refused.
_PLACED, _HOPELESS, _NO_ROOM, _REFUSED = "placed", "hopeless", "no room", "refused"


def _attempt(
    ctx: CycleContext, job: Job, gang: list[Task], victims: list[Unit], search: VictimSearch, allowed: Allowed
) -> str:
    """One try, in KAI's shape (solver.py): victims accumulated in victim order, each
    scenario simulated (victims placed again where they fit, the job placed with its
    queue's limits checked with the victims gone), then judged by the search's rule.
    The deserved quota of non-preemptible work is checked first: victims are
    preemptible and never count against it."""
    if quota_problem(ctx.state, ctx.shares, job, ctx.capacity_amount(gang)) is not None:
        return _REFUSED
    # No room even with every candidate gone (and nothing placed again): no scenario can
    # do better, moves included, so no scenario is tried.
    if not VictimPool(ctx, search.candidates.get(), victims).may_fit(gang, None):
        return _HOPELESS
    terms = Terms(
        action=search.action,
        units=victims,
        allowed=allowed,
        evict_reason=search.evict_reason,
        valid=search.valid,
        giving=search.giving,
        queue_allowed=search.eligible_queue,
    )
    if solve(ctx, job, gang, terms) is None:
        return _NO_ROOM
    if not job.pending():
        ctx.stmt.clear_reason(job.name)
    return _PLACED


# ---------------------------------------------------------------- min runtime


def _min_runtime_blocks(
    ctx: CycleContext, job: Job, gang: list[Task], victims: list[Unit], search: VictimSearch
) -> Reason | None:
    """When the search would succeed if min runtime protected nothing, that is what
    blocks the job: say so, and when the last victim it needs may be taken."""
    live_before = [u for u in victims if u.live()]
    start = ctx.stmt.checkpoint()
    if _attempt(ctx, job, gang, victims, search, search.eligible) is not _PLACED:
        return None
    protects, now = ctx.policy.min_runtime_protects, ctx.now
    needed = [u for u in live_before if not u.live() and protects(u, search.min_runtime(u), now)]
    ctx.stmt.rollback(start)
    if not needed:
        return None
    wait = max(search.min_runtime(u) - (now - u.job.running_since()) for u in needed)
    jobs = len({id(u.job) for u in needed})
    doing = "preempting" if search.action == "preempt" else "reclaiming"
    return Reason(
        "min-runtime",
        f"no free room; {doing} would make room, but {count(jobs, 'running job')} it would take "
        f"{agree(jobs, 'is', 'are')} within the minimum runtime (the last for {number(wait)}s more)",
    )


# ---------------------------------------------------------------- preempt


def preempt(ctx: CycleContext) -> None:
    """Inside one queue: lower-priority preemptible work makes room for a higher one."""
    failed = ctx.failed_searches()
    candidates = ActionCandidates(ctx)
    held = HeldBack(ctx, "preempt", failed)

    def step(job: Job) -> None:
        ctx.stmt.default_reason(job.name, functools.partial(_no_lower_priority, ctx, job))
        make_room(ctx, job, _preempt_search(ctx, job, candidates), failed, held)

    quiet = _no_reason_of_its_own(failed)
    each_waiting_gang(ctx, GangWalk("preempt", failed, step, quiet, ctx.policy.may_preempt, redoable=True))


def _no_lower_priority(ctx: CycleContext, job: Job) -> Reason:
    queue = ctx.state.tree.names[job.queue]
    text = f"no free room, and no lower-priority preemptible job in queue {queue} can make room for it"
    return Reason("no-room", text)


def _preempt_search(ctx: CycleContext, job: Job, candidates: ActionCandidates) -> VictimSearch:
    tree, may_preempt = ctx.state.tree, ctx.policy.may_preempt
    reason = f"preempted by {job.name} in {tree.names[job.queue]}"
    return VictimSearch(
        action="preempt",
        candidates=candidates,
        victims=lambda: candidates.taken_by(victim_inputs(job, "preempt"), lambda u: may_preempt(job, u.job)),
        eligible_queue=None,
        min_runtime=lambda u: tree.preempt_min_runtime[u.job.queue],
        evict_reason=lambda u: reason,
    )


# ---------------------------------------------------------------- reclaim


def reclaim(ctx: CycleContext) -> None:
    """Between queues: a queue under its fair share takes back from queues over theirs."""
    failed = ctx.failed_searches()
    candidates = ActionCandidates(ctx)
    giving = GivingOrder(ctx)
    held = HeldBack(ctx, "reclaim", failed)
    takes = _reclaimable(ctx)

    def verdicts(job: Job) -> tuple[object, ...]:
        gang = job.next_step()
        search = _reclaim_search(ctx, job, ctx.amount(gang), candidates, giving, takes)
        return search.verdicts(search.victims())

    each_waiting_gang(
        ctx,
        GangWalk(
            "reclaim",
            failed,
            lambda job: _reclaim_for(ctx, job, candidates, giving, failed, held, takes),
            _no_reason_of_its_own(failed),
            ctx.policy.may_reclaim_from,
            verdicts,
            redoable=True,  # make_room: Statement operations, then failed.clear()
        ),
    )


def _no_reason_of_its_own(failed: FailedSearches) -> Callable[[FailureKey], bool]:
    """Reclaim's and preempt's step for a job whose search key failed: a default reason
    (kept where the job has one already) and the failure's own reason (when it has one,
    such as min runtime). Nothing else: quiet once the job has a reason, unless the
    failure has its own."""

    def quiet(key: FailureKey) -> bool:
        return failed.reason(key) is None

    return quiet


def _reclaim_for(
    ctx: CycleContext,
    job: Job,
    candidates: ActionCandidates,
    giving: GivingOrder,
    failed: FailedSearches,
    held: HeldBack,
    takes: Callable[[Unit], bool],
) -> bool:
    state, shares, policy = ctx.state, ctx.shares, ctx.policy
    gang = job.next_step()
    if not gang:
        return False
    amount = ctx.amount(gang)
    typed = typed_reclaim(ctx, job)
    if typed is not None:
        return _typed_reclaim_for(
            ctx,
            job,
            amount,
            typed,
            _reclaim_search(ctx, job, amount, candidates, giving, takes),
            failed,
            held,
        )
    if not policy.may_reclaim(state, shares, job, amount):
        ctx.stmt.default_reason(job.name, functools.partial(over_share_reason, ctx, job, amount))
        # The verdict reads the job's queue, amount and preemptibility, all in its search
        # key: a job with the same key is turned away too until room moves, so the rest
        # of the line can settle (settling.py) instead of being ranked job by job.
        failed.add(search_key(job, gang, "reclaim"), None, Grounds.SHARE)
        return False

    return make_room(ctx, job, _reclaim_search(ctx, job, amount, candidates, giving, takes), failed, held)


def _typed_reclaim_for(
    ctx: CycleContext,
    job: Job,
    amount: np.ndarray,
    typed: TypedReclaim,
    search: VictimSearch,
    failed: FailedSearches,
    held: HeldBack,
) -> bool:
    """Reclaim judged on the GPU types the job may take (reclaimrules.TypedReclaim)
    rather than on the plain gpu total: the same search, other judgements."""
    passing = typed.passing(amount)
    if not passing:
        ctx.stmt.default_reason(job.name, lambda: typed.refused(amount))
        failed.add(search_key(job, job.next_step(), "reclaim"), None, Grounds.SHARE)
        return False
    allowed = typed.unit_allowed(passing)
    search = dataclasses.replace(
        search,
        eligible_queue=None,
        eligible_unit=allowed,
        valid=typed.valid,
        verdicts=lambda units: (tuple(map(allowed, units)), typed.standings()),
    )
    return make_room(ctx, job, search, failed, held)


def _reclaim_search(
    ctx: CycleContext,
    job: Job,
    amount: np.ndarray,
    candidates: ActionCandidates,
    giving: GivingOrder,
    takes: Callable[[Unit], bool],
) -> VictimSearch:
    state, shares, tree, policy = ctx.state, ctx.shares, ctx.state.tree, ctx.policy
    # My side is judged as it stood before this job's tasks were placed.
    mine_before = {q: state.usage.allocated_row(q) for q in tree.ancestors[job.queue]}
    before = np.array(state.usage.allocated)  # every queue, as the search begins
    sides: dict[int, tuple[int, int]] = {}  # a victim's queue: (my side, their side)
    # A side's verdict reads its allocated figures alone (the rest is fixed for the
    # search): kept per side with the figures it was made on.
    side_verdicts: dict[int, tuple[list[float], bool]] = {}

    def eligible(victim_queue: int) -> bool:
        side = sides.get(victim_queue)
        if side is None:
            lca = tree.lowest_common_ancestor(job.queue, victim_queue)
            mine_side, their_side = tree.child_toward(lca, job.queue), tree.child_toward(lca, victim_queue)
            side = sides[victim_queue] = (mine_side, their_side)
        mine, theirs = side
        row = state.usage.allocated[theirs]
        known = side_verdicts.get(theirs)
        if known is not None and known[0] == row:
            return known[1]
        verdict = may_take(ctx, mine, theirs, mine_before[mine] + amount, amount)
        side_verdicts[theirs] = (list(row), verdict)
        return verdict

    q = job.queue

    @functools.cache
    def reason() -> str:  # made at the first eviction: most searches evict nothing
        return (
            f"reclaimed by queue {tree.names[q]} (fair share "
            f"{describe_amount(shares.fair_share[q])}, allocated {describe_amount(mine_before[q])})"
        )

    return VictimSearch(
        action="reclaim",
        candidates=candidates,
        victims=lambda: candidates.taken_by(
            victim_inputs(job, "reclaim"), lambda u: takes(u) and policy.may_reclaim_from(job, u.job)
        ),
        eligible_queue=eligible,
        min_runtime=lambda u: tree.reclaim_min_runtime_for(job.queue, u.job.queue),
        evict_reason=lambda u: reason(),
        giving=giving,
        valid=functools.partial(reclaim_valid, ctx, job, amount, before),
        verdicts=lambda units: (
            tuple(eligible(u.job.queue) for u in units),
            giving.signature([u.job.queue for u in units]),
        ),
    )


# ---------------------------------------------------------------- stale gangs


def stale_gang_eviction(ctx: CycleContext) -> None:
    """A gang that kept fewer than minMember active tasks (with subgroups: any subgroup
    below its minimum) for the grace period is evicted whole: holding part of a gang
    blocks others and cannot make progress."""
    grace = ctx.config.stale_gang_grace_period
    if grace < 0:
        return
    for job in ctx.state.jobs:
        active = job.active_count
        if active == 0 or job.is_whole():  # with subgroups: stale when any is below its minimum
            continue
        if any(t.status is TaskStatus.SUCCEEDED for t in job.tasks):
            continue
        since = _stale_since(ctx, job)
        if ctx.now - since < grace:
            continue
        reason = f"{_below(job)} for {ctx.now - since:g}s"
        for t in job.running():
            ctx.stmt.evict(t, "stalegangeviction", reason)


def _below(job: Job) -> str:
    if not job.info.subgroups:
        return f"gang below minMember ({job.active_count} of {count(job.gang, 'task')})"
    return (
        f"gang below its subgroups' minimums ({short_words(job.info, job.short(), job.active_by_subgroup())})"
    )


def _stale_since(ctx: CycleContext, job: Job) -> float:
    if job.info.stale_since is not None:
        return job.info.stale_since
    inactive = [t.since for t in job.tasks if not t.status.is_active]
    return max(inactive) if inactive else ctx.now


EVICTION_ACTIONS = {
    "consolidation": consolidate,
    "reclaim": reclaim,
    "preempt": preempt,
    "stalegangeviction": stale_gang_eviction,
}


# Past this many jobs placed earlier in the cycle, reclaim takes only what ran before it.
RECLAIM_PLACED_UP_TO = 64


def _reclaimable(ctx: CycleContext) -> Callable[[Unit], bool]:
    """What reclaim may take, by how the cycle went so far. As KAI: running work and the
    cycle's own placements (a job of another queue that allocate just placed is reclaimed
    in the same cycle, rather than started and stopped a cycle later). But after an
    allocate that placed more than RECLAIM_PLACED_UP_TO jobs, only what ran before the
    cycle: each waiting job's search would play a scenario per just-placed victim,
    nearly all of which give their room straight back (a burst of thousands of jobs
    across many queues took minutes a cycle); the reclaimer waits one cycle instead."""
    placed_jobs = (j for j in ctx.stmt.touched_jobs if any(_placed_now(t) for t in j.tasks))
    # Counted up to one past the bound: how far past does not matter.
    placed = sum(1 for _ in itertools.islice(placed_jobs, RECLAIM_PLACED_UP_TO + 1))
    if placed <= RECLAIM_PLACED_UP_TO:
        return lambda u: True
    return lambda u: not any(_placed_now(t) for t in u.tasks)


def _placed_now(t: Task) -> bool:
    return t.status is not TaskStatus.RUNNING and t.takeable
