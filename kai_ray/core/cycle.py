"""One scheduling cycle: fair shares, then the actions in order, then the decisions."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Collection, Iterator

import numpy as np

from kai_ray.core.actions.allocate import allocate, allocate_gangs
from kai_ray.core.actions.evictions import EVICTION_ACTIONS
from kai_ray.core.incremental import CycleCache
from kai_ray.core.incremental.gangs import KeptGangs
from kai_ray.core.model.snapshot import (
    Bind,
    ClusterSnapshot,
    CycleResult,
    Decision,
    Evict,
    Pipeline,
    QueueStatus,
    Reason,
    SchedulerConfig,
    TakeBack,
    TaskStatus,
)
from kai_ray.core.rules.fairshare import FairShares, compute_fair_shares
from kai_ray.core.rules.placement import Placer
from kai_ray.core.rules.policy import DEFAULT_POLICY, Policy
from kai_ray.core.rules.typedqueues import typed_queues
from kai_ray.core.session.context import CycleContext, later_session
from kai_ray.core.state.build import build_state
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job
from kai_ray.core.state.nodes import FloatArray, cluster_total
from kai_ray.core.state.queues import build_queue_tree, fungibility_modes
from kai_ray.core.state.statement import Statement

__all__ = [
    "ACTIONS",
    "UnknownActionError",
    "finish_cycle",
    "paused_collection",
    "prepare_cycle",
    "run_action",
    "run_cycle",
]

Action = Callable[[CycleContext], None]
ACTIONS: dict[str, Action] = {"allocate": allocate, **EVICTION_ACTIONS}


class UnknownActionError(ValueError):
    pass


def run_cycle(
    snapshot: ClusterSnapshot,
    config: SchedulerConfig,
    now: float,
    policy: Policy = DEFAULT_POLICY,
    *,
    pause_gc: bool = False,
    cache: CycleCache | None = None,
    changed: Collection[str] = (),
) -> CycleResult:
    """Decide one cycle. Pure: the snapshot is not modified; same input, same output.
    `policy` swaps the ordering and eligibility rules without touching the actions.
    `pause_gc`: pause Python's cyclic garbage collector for the cycle (paused_collection);
    it is process state, so only the caller may choose it.
    `cache`: keep the working state for the next cycle and patch it with what changed
    (incremental/): the same result at the cost of what changed. `changed` names the
    jobs whose JobInfo was modified in place (a new JobInfo object needs no naming)."""
    with paused_collection() if pause_gc else contextlib.nullcontext():
        ctx = prepare_cycle(snapshot, config, now, policy, cache=cache, changed=changed)
        for name in config.actions:
            run_action(ctx, name)
        result = finish_cycle(ctx)
        if cache is not None:
            cache.restore(ctx.stmt)
        return result


@contextlib.contextmanager
def paused_collection() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the length of one cycle.

    A cycle allocates hundreds of thousands of small objects (heap entries, undo closures)
    while tens of thousands of tasks are alive, and every full collection those
    allocations trigger walks all of them: about 15% of allocate at 10,000 nodes. The
    cycle itself makes little cyclic garbage (the previous cycle's state is freed by the
    caller), so collection may wait until the cycle is decided, then resume on the
    collector's usual schedule. Reference counting frees everything else as usual.

    The collector's switch is the whole process's: a caller that runs other threads (an
    actor serving requests) decides whether they may go without collection meanwhile, so
    run_cycle pauses it only when asked (pause_gc=True); the benchmarks do."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def prepare_cycle(
    snapshot: ClusterSnapshot,
    config: SchedulerConfig,
    now: float,
    policy: Policy = DEFAULT_POLICY,
    *,
    cache: CycleCache | None = None,
    changed: Collection[str] = (),
) -> CycleContext:
    """The cycle's working state and fair shares (the steps of run_cycle, for timing).
    With a `cache`, the caller hands the context's statement back: cache.restore(ctx.stmt)."""
    for name in config.actions:
        if name not in ACTIONS:
            known = ", ".join(sorted(ACTIONS))
            raise UnknownActionError(f"scheduler config: unknown action {name!r}; use one of {known}")
    if cache is None:
        state = build_state(snapshot, build_queue_tree(snapshot.queues), config.closed_queues)
        total, placer = cluster_total(state.nodes), Placer(state, config)
    else:
        state, placer, total = cache.prepare(snapshot, config, policy, changed)
    shares = compute_fair_shares(
        state.tree, total, state.usage.requested, _usage_array(snapshot, state), config.k_value
    )
    state.usage.typed = typed_queues(snapshot.queues, state, placer.gpu_types, config.k_value)
    return CycleContext(
        state=state,
        shares=shares,
        config=config,
        now=now,
        total=total,
        placer=placer,
        stmt=Statement(state, undoable_cycle=cache is not None),
        policy=policy,
        line=None if cache is None else cache.line,
        kept=_kept(cache, config),
        preemption_delay=config.preemption_delay_s if snapshot.can_grow else 0.0,
    )


def _kept(cache: CycleCache | None, config: SchedulerConfig) -> KeptGangs | None:
    """The cache's failures of the actions that evict, kept between cycles; none with
    reservations, whose holds change with the clock alone (the line is still begun)."""
    if cache is None:
        return None
    kept = cache.kept(config.actions)
    return None if config.reserve_after_s > 0 else kept


def run_action(ctx: CycleContext, name: str) -> None:
    ACTIONS[name](ctx)
    ctx.stmt.commit()


def take_later_types(ctx: CycleContext) -> None:
    """The cycle's last step (docs/gpu-types.md, "Fungibility"): the gangs held to their
    first GPU type (whenCanPreempt Preempt) that still wait, every action done, try their
    later types as Kueue tries the next flavor: their free room first, then the actions
    that evict again, for these jobs alone. A cycle cache's lines and failures are of the
    first pass: this pass runs in a session of its own, without them."""
    if not fungibility_modes(ctx.state.tree)[1]:
        return
    held = [j for j in ctx.state.maybe_pending() if j.first_type_only and _waits(j)]
    if not held or not ctx.placer.gpu_types.several:
        return
    with ctx.placer.taking_later_types(), _asked_again(ctx, held):
        allocate_gangs(later_session(ctx, held), held)
        ctx.stmt.commit()
        for name in ctx.config.actions:
            waiting = [j for j in held if _waits(j)]
            if waiting and name in EVICTION_ACTIONS and name != "stalegangeviction":
                run_action(later_session(ctx, waiting), name)


@contextlib.contextmanager
def _asked_again(ctx: CycleContext, jobs: list[Job]) -> Iterator[None]:
    """What these jobs ask of their queue's rank was read on their first type: read
    again while they may take their later types, and after."""
    for job in jobs:
        ctx.forget(job)
    try:
        yield
    finally:
        for job in jobs:
            ctx.forget(job)


def _waits(job: Job) -> bool:
    return job.pending_count > 0 and not job.is_whole()


def finish_cycle(ctx: CycleContext) -> CycleResult:
    take_later_types(ctx)  # after every action: it gives what eviction did not
    state = ctx.state
    waiting = _waiting(ctx)
    return CycleResult(
        decisions=_decisions(state, ctx.stmt.touched_jobs),
        pending_reasons={job: reason.text for job, reason in waiting.items()},
        queues=_queue_status(state, ctx.shares),
        invalid=dict(state.invalid),
        refused=dict(state.refused),
        queue_order=_queue_order(ctx),
        waiting=waiting,
        reservations={job: r for job, r in ctx.reserved.items() if job in waiting},
    )


def _usage_array(snapshot: ClusterSnapshot, state: ClusterState) -> FloatArray | None:
    if not snapshot.usage:
        return None
    usage = np.zeros((len(state.tree), 3))
    for name, values in snapshot.usage.items():
        q = state.tree.index.get(name)
        if q is not None:
            usage[q] = values
    return usage


def _decisions(state: ClusterState, touched: set[Job]) -> list[Decision]:
    """Read off the tasks, in job order: only the jobs the statement touched can have
    any (inputs that are Binding become Running when the state is built)."""
    names = state.nodes.names
    out: list[Decision] = []
    for job in sorted(touched, key=lambda j: j.order):
        for t in job.tasks:
            if t.evicted_from is not None and t.evict_reason is not None:
                node = names[t.evicted_from[0]]
                if not t.taken_back:
                    out.append(Evict(job.name, t.info.name, node, *t.evict_reason))
                elif t.status is TaskStatus.RELEASING:  # placed again: only placed
                    out.append(TakeBack(job.name, t.info.name, node, *t.evict_reason))
            device = t.device if t.device >= 0 else None
            if t.status is TaskStatus.BINDING:
                out.append(Bind(job.name, t.info.name, names[t.node], device))
            elif t.status is TaskStatus.PIPELINED and t.placed_by:
                out.append(Pipeline(job.name, t.info.name, names[t.node], device))
    return out


def _waiting(ctx: CycleContext) -> dict[str, Reason]:
    """Every job left with pending tasks (and every invalid job) -> why it waits."""
    said = ctx.stmt.reasons.get
    untried = Reason("not-tried", "not tried this cycle" if ctx.config.actions else "no actions configured")
    jobs = ctx.state.maybe_pending()
    reasons = {job.info.name: said(job.info.name, untried) for job in jobs if job.pending_count}
    for job in ctx.stmt.touched_jobs:  # only a job the cycle placed can have been taken back
        taken = _taken_back(job)
        if taken is not None:
            reasons[job.info.name] = taken
    for name, text in ctx.state.invalid.items():
        reasons[name] = Reason("invalid", text)
    for name in ctx.state.refused_waiting:  # its queue takes none of its waiting tasks
        reasons[name] = ctx.state.refused[name]
    return reasons


def _taken_back(job: Job) -> Reason | None:
    """Why a job waits whose tasks were placed this cycle and then taken as victims
    (Statement.evict): they start no sooner than the next cycle."""
    for t in job.tasks:
        if t.taken_back and t.status is TaskStatus.RELEASING and t.evict_reason is not None:
            action, why = t.evict_reason
            return Reason("taken-back", f"placed this cycle, then taken back by {action} ({why})")
    return None


def _queue_order(ctx: CycleContext) -> dict[str, tuple[str, ...]]:
    """Per leaf queue, its jobs with pending tasks in the order allocate would serve them
    next: the policy's job order on the state the cycle ends with (ties keep the
    snapshot's order, as in JobQueues)."""
    line = ctx.line if ctx.line is not None else ctx.waiting_line()
    return line.queue_order(ctx.state, ctx.stmt.touched_jobs)


def _queue_status(state: ClusterState, shares: FairShares) -> dict[str, QueueStatus]:
    # Rows as plain lists first: one conversion per array, not per figure.
    deserved, fair_share = shares.deserved.tolist(), shares.fair_share.tolist()
    allocated, requested = state.usage.allocated, state.usage.requested.tolist()
    typed = state.usage.typed
    return {
        name: QueueStatus(
            deserved=_triple(deserved[q]),
            fair_share=_triple(fair_share[q]),
            allocated=_triple(allocated[q]),
            requested=_triple(requested[q]),
            gpu_types={} if typed is None else typed.figures(q),
        )
        for q, name in enumerate(state.tree.names)
    }


def _triple(row: list[float]) -> tuple[float, float, float]:
    return (float(row[0]), float(row[1]), float(row[2]))
