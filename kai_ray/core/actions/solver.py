"""KAI's job solver (as KAI-Scheduler v0.17): how consolidation, reclaim and preempt find
room for a job by taking running work, pure over the cycle's Statement.

For the job's tasks (its missing gang) each scenario generator (scenarios.py) in turn
finds the most tasks it can place, 1, 2, 4, ... then halving the gap, recording the
victims of each count it solves and starting the next count from them; then all the
tasks from the last victims recorded. A generator proposes scenarios: sets of candidate
units to take beside the recorded victims. Each is *simulated*: its victims evicted,
then the next allocate played over the job and its victims in allocate's own line
(walkline.py), each checked against its queue's limits:

- a victim job places again what allocate would place of it (its gang, or one task);
  a task that lands where it ran was no victim (KAI un-evicts it): the scenario is
  played again without evicting it, so it keeps its room. This is what keeps a state
  from swinging between two queues: the victim's queue, first in line, takes its room
  straight back, and the job does not fit;
- a task that lands elsewhere is moved (Releasing where it was, Pipelined where it
  goes), not stopped;
- the job's tasks are all placed (on free room, or pipelined on room being released).

A scenario that places the job is judged by the action's `valid` rule (reclaim: KAI's
fair-share rules on the victims actually stopped; consolidation: every victim moved,
none stopped). The first valid scenario is kept, a scenario is never played twice for
the same tasks and victims, and a search that finds none leaves no trace.

Two bounds spare plays whose end is known, without changing what is decided: a search
whose job its queue's limits refuse even with every candidate gone plays no scenario
(KAI plays them all, and each fails at the job's turn), and a scenario whose victims leave
the job's queue over its limit ends before the line is walked. In a line of gangs whose
department is at its limit, that is nearly every search.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kai_ray.core.actions.livecandidates import groups_with_takeable
from kai_ray.core.actions.scenarios import GENERATORS, REACH
from kai_ray.core.actions.terms import Generator, Scenario, Terms
from kai_ray.core.actions.victimpool import fractions_may_fit, room_holds
from kai_ray.core.actions.victims import Unit
from kai_ray.core.model.snapshot import TaskStatus
from kai_ray.core.rules.capacity import capacity_problem, refused_with_all_gone
from kai_ray.core.rules.typedqueues import rank_column
from kai_ray.core.session.candidates import ROOM_SLACK, frees_at_most, tasks_per_node
from kai_ray.core.session.context import CycleContext
from kai_ray.core.session.jobqueues import JobQueues
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import EPS
from kai_ray.core.state.statement import Statement

if TYPE_CHECKING:
    pass

__all__ = ["SIMULATIONS_PER_SEARCH", "solve"]

# How many scenarios one job's search may simulate, all counts and generators together
# (KAI bounds its searches too, by time: maxJobSearchDuration; a count keeps the cycle
# pure). A search through hundreds of victims that each take their room straight back
# (placements of the same cycle, in a cycle that placed thousands) would otherwise play
# a scenario per victim; the job waits for the next cycle instead.
SIMULATIONS_PER_SEARCH = 64


def solve(ctx: CycleContext, job: Job, tasks: list[Task], terms: Terms) -> Scenario | None:
    """Place `tasks` of `job`, taking victims as the terms allow; all or nothing. On
    success the Statement holds the evictions, the moves and the placements.

    As KAI-Scheduler v0.17: each generator in turn (scenarios.GENERATORS), from no
    recorded victims. It finds the most tasks it can place (1, 2, 4, ... then halving
    the gap), recording the victims of each count it solves, then solves all of them
    from the last victims recorded. Scenarios already simulated for the same tasks and
    victims are not simulated twice."""
    stmt = ctx.stmt
    if terms.check_capacity and refused_with_all_gone(
        ctx.state, ctx.shares, job, ctx.capacity_amount(tasks), _takeable(terms.units)
    ):
        return None  # every scenario would end at the job's turn, refused by its queue
    start = stmt.checkpoint()
    failed: set[tuple[int, frozenset[int], frozenset[int]]] = set()
    budget = [SIMULATIONS_PER_SEARCH]
    for generate in GENERATORS:
        recorded: list[Unit] = []
        whole: Scenario | None = None  # all the tasks solved by a probe, kept as it left the state

        def probe(k: int, generate: Generator = generate) -> bool:
            nonlocal recorded, whole
            found = _solve_partial(ctx, job, tasks[:k], recorded, terms, generate, failed, budget)
            if found is not None and k == len(tasks):
                whole = found  # KAI solves all of them again from these victims: the same
                return True
            stmt.rollback(start)
            if found is None:
                return False
            recorded = found.taken
            return True

        if _most_solvable(len(tasks), probe) == 0:
            continue
        found = whole or _solve_partial(ctx, job, tasks, recorded, terms, generate, failed, budget)
        if found is not None:
            if any(t.status is TaskStatus.PIPELINED for t in tasks):
                stmt.pipeline_job(job)
            return found
        stmt.rollback(start)
    return None


def _takeable(units: Sequence[Unit]) -> Iterator[Task]:
    return (t for u in units for t in u.tasks if t.takeable)


def _most_solvable(n: int, probe: Callable[[int], bool]) -> int:
    """The largest k in 1..n that `probe` solves, found as KAI finds it: doubling from 1
    until a count fails, then halving the gap (0: not even one)."""
    lo, hi, k = 0, 0, 1
    while True:
        if not probe(k):
            hi = k
            break
        lo = k
        if k == n:
            return n
        k = min(2 * k, n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _solve_partial(
    ctx: CycleContext,
    job: Job,
    tasks: list[Task],
    recorded: list[Unit],
    terms: Terms,
    generate: Generator,
    failed: set[tuple[int, frozenset[int], frozenset[int]]],
    budget: list[int],
) -> Scenario | None:
    rec = frozenset(id(u) for u in recorded)
    bound = _RoomBound(ctx, tasks, recorded)
    reach = REACH.get(generate)
    # Groups whose candidates are all gone free what no victim frees: as the empty one.
    if reach is not None and not any(
        bound.enough(extra)
        for extra in itertools.chain([[]], groups_with_takeable(ctx.stmt, terms.units, reach(terms.units)))
    ):
        return None  # no scenario of this generator could make room: none is played
    for extra in generate(ctx, terms, recorded, tasks):
        victims = [*recorded, *(u for u in extra if id(u) not in rec)]
        if not victims:
            continue  # a scenario takes at least one victim
        key = (len(tasks), rec, frozenset(id(u) for u in victims))
        if key in failed:
            continue
        if not bound.enough(victims):  # the simulation could not place them
            failed.add(key)
            continue
        if budget[0] <= 0:
            return None  # the job's search budget is spent: it waits for the next cycle
        budget[0] -= 1
        found = _simulate(ctx, job, tasks, victims, terms)
        if found is not None:
            return found
        failed.add(key)
    return None


class _RoomBound:
    """Whether the tasks might fit the free and releasing room with a scenario's victims
    gone (victimpool.room_holds): where they cannot, no simulation of those victims
    places them (a victim placed again only takes room), and none is played. A search
    through thousands of small victims for a gang of whole nodes proposes many scenarios
    that free a node or two: for tasks that ask alike, what the room holds with the
    recorded victims gone is counted once per node, and each scenario recounts only the
    nodes of its own victims. The state stands still while a bound is used (each
    scenario is rolled back)."""

    def __init__(self, ctx: CycleContext, tasks: list[Task], recorded: Sequence[Unit]) -> None:
        self.ctx, self.tasks = ctx, tasks
        self.recorded = {id(u) for u in recorded}
        nodes = ctx.state.nodes
        self.room = nodes.idle + nodes.releasing
        for node, more in _freed(recorded).items():
            self.room[node] += more
        job, first = tasks[0].job, tasks[0].demand
        self.any_fraction = any(t.fraction_request for t in tasks)
        self.alike = not job.per_task and all(t.demand is first for t in tasks)
        if self.alike and not self.any_fraction:
            self.mask = ctx.placer.job_mask(job)
            self.per_node = tasks_per_node(self.room, first)
            self.total = int(self.per_node[self.mask].sum())
            self.asks = [(int(c), float(first[c])) for c in np.flatnonzero(first)]

    def enough(self, victims: list[Unit]) -> bool:
        if self.any_fraction:
            return True
        freed = _freed([u for u in victims if id(u) not in self.recorded])
        if not self.alike:
            room = self.room.copy()
            for node, more in freed.items():
                room[node] += more
            return room_holds(self.ctx, self.tasks, room)
        total = self.total
        for node, more in freed.items():
            if self.mask[node]:
                total += self._holds(self.room[node] + more) - int(self.per_node[node])
        return total >= len(self.tasks)

    def _holds(self, row: np.ndarray) -> int:
        """tasks_per_node for one node, in plain numbers (a handful of nodes per call)."""
        if not self.asks:
            return int(self.per_node[0])  # asks for nothing counted: plenty
        room: list[float] = row.tolist()
        return max(0, min(math.floor((room[c] + EPS) * (1 + ROOM_SLACK) / need) for c, need in self.asks))


def _freed(units: Sequence[Unit]) -> dict[int, np.ndarray]:
    """Per node, what the units' tasks that may be taken free there at most."""
    freed: dict[int, np.ndarray] = {}
    for u in units:
        for t in u.tasks:
            if t.takeable:
                got = freed.get(t.node)
                frees = frees_at_most(t)
                freed[t.node] = frees.copy() if got is None else got + frees
    return freed


def _simulate(
    ctx: CycleContext, job: Job, tasks: list[Task], victims: list[Unit], terms: Terms
) -> Scenario | None:
    """Evict the victims, then play the next allocate over the job and its victims
    (_allocate_over); the scenario when the job's tasks are placed and the action finds
    it valid, the Statement left as the scenario ends (else as it began).

    A victim task that allocate puts back where it ran was no victim: as KAI un-evicts
    it, the scenario is played again without evicting it (it keeps its room, which may
    leave none for the job), each victim job placing again only what it placed the
    first time."""
    stmt = ctx.stmt
    mark = stmt.checkpoint()
    kept: set[int] = set()  # victim tasks that came back where they ran
    steps: dict[int, list[list[Task]]] | None = None  # per victim job, what allocate places again
    while True:
        evicted: dict[int, list[Task]] = {}
        for u in victims:
            for t in u.tasks:
                if id(t) not in kept and t.takeable:
                    stmt.evict(t, terms.action, terms.evict_reason(u))
                    evicted.setdefault(id(u.job), []).append(t)
        if steps is None:
            steps = {k: _steps(ts, terms.action) for k, ts in evicted.items()}
        if _over_capacity(ctx, job, tasks, terms):
            stmt.rollback(mark)
            return None
        back = _allocate_over(ctx, job, tasks, evicted, steps, terms)
        if back is None:
            stmt.rollback(mark)
            return None
        if not back:
            break
        stmt.rollback(mark)
        kept |= back
        steps = {k: _without(cs, back) for k, cs in steps.items()}
    _stop_growth(stmt, steps or {})
    scenario = _scenario(victims, kept)
    if terms.valid(scenario):
        return scenario
    stmt.rollback(mark)
    return None


def _over_capacity(ctx: CycleContext, job: Job, tasks: list[Task], terms: Terms) -> bool:
    """Whether the job's queue limits refuse its tasks with every victim gone: the play
    would end the same at the job's turn (a victim placed again before it only adds to
    what its queue holds, and a limit refuses more as a queue holds more), so it is not
    walked. In a line of jobs over their queue's limit, most scenarios end here."""
    return (
        terms.check_capacity
        and capacity_problem(ctx.state, ctx.shares, job, ctx.capacity_amount(tasks)) is not None
    )


def _without(chunks: list[list[Task]], back: set[int]) -> list[list[Task]]:
    kept = ([t for t in chunk if id(t) not in back] for chunk in chunks)
    return [chunk for chunk in kept if chunk]


def _steps(evicted: list[Task], action: str) -> list[list[Task]]:
    """What allocate would place again of a victim job, step by step: its missing gang
    (KAI's tasks to allocate, among its evicted tasks), then, for reclaim and preempt, as
    allocate grows an elastic job, one more task a step. (KAI's simulation stops after
    the first step; the next cycle's allocate does not, and would give an elastic victim
    its room back: where a step lands where the task ran, the task is kept. Where it
    lands elsewhere, _stop_growth stops the task, as KAI reports it. Consolidation, which
    must move every victim, is judged on the first step alone, as KAI judges it.)"""
    job = evicted[0].job
    n = max(0, job.gang - job.active_count) or 1
    ordered = sorted(evicted, key=lambda t: t.index)
    if action == "consolidation":
        return [ordered[:n]]
    return [ordered[:n], *([t] for t in ordered[n:])]


def _stop_growth(stmt: Statement, steps: dict[int, list[list[Task]]]) -> None:
    """The victims' tasks that only the growth steps placed again, elsewhere than they
    ran: stopped, as KAI's one-step simulation leaves them (the next cycle's allocate
    grows the job again where there is room). The play still counted the room they took:
    a victim that would take its room back before the job keeps it."""
    for chunks in steps.values():
        for chunk in chunks[1:]:
            for t in chunk:
                if t.status is TaskStatus.PIPELINED and t.evict_reason is not None:
                    stmt.evict(t, *t.evict_reason)


def _scenario(victims: list[Unit], kept: set[int]) -> Scenario:
    """Each victim unit split into what the scenario stopped and what it moved (placed
    again elsewhere); what came back where it ran is neither."""
    stopped: list[Unit] = []
    moved: list[Unit] = []
    taken: list[Unit] = []
    for u in victims:
        gone = [t for t in u.tasks if id(t) not in kept and t.status is TaskStatus.RELEASING]
        went = [t for t in u.tasks if id(t) not in kept and t.status is TaskStatus.PIPELINED]
        if gone:
            stopped.append(u if len(gone) == len(u.tasks) else Unit(u.job, tuple(gone), u.surplus))
        if went:
            moved.append(u if len(went) == len(u.tasks) else Unit(u.job, tuple(went), u.surplus))
        if gone or went:
            taken.append(u)
    return Scenario(stopped, moved, taken)


def _allocate_over(
    ctx: CycleContext,
    job: Job,
    tasks: list[Task],
    evicted: dict[int, list[Task]],
    steps: dict[int, list[list[Task]]],
    terms: Terms,
) -> set[int] | None:
    """The next allocate played over the job and its victims' jobs: None when the job
    does not fit; else the victim tasks placed back where they ran.

    As in KAI, the walk is allocate's own line: every waiting job, the victims' jobs and
    the job, queue by queue. Only the job and its victims act; the others are passed
    over, but while one heads its queue the queue is ranked with it, so where a victim
    stands against the job is where allocate would put it (a queue whose head asks for
    little may come first, and its victim takes its room back)."""
    victim_jobs = {k: ts[0].job for k, ts in evicted.items()}
    acting = {id(job), *victim_jobs}
    mine = [job, *victim_jobs.values()]
    for j in mine:
        ctx.forget(j)  # their next tasks changed with the evictions
    # A victim job asks for what it would place again (its tasks are releasing, not
    # pending); every other job as allocate ranks it.
    todo = {k: list(cs) for k, cs in steps.items()}
    asks = {k: ctx.amount(cs[0]).tolist() for k, cs in todo.items() if cs}
    typed = ctx.state.usage.typed
    if typed is not None:  # the type each victim's GPUs count on (policy's typed rank)
        for k, ask in asks.items():
            ask.append(rank_column(typed, victim_jobs[k], ctx.placer.first_type(victim_jobs[k])))
    rows, policy = ctx.rows, ctx.policy
    assert rows is not None

    # A queue's rank reads the state and what its head asks: while jobs are only passed
    # over the state stands, so a rank is looked up by the ask (a few distinct ones in a
    # long line) until an acting job changes the state.
    ranks: dict[tuple[int, tuple[float, ...]], object] = {}

    def rank(q: int, j: Job) -> object:
        amount = asks.get(id(j))
        if amount is None:
            amount = ctx.next_amount(j)
        key = (q, tuple(amount))
        got = ranks.get(key)
        if got is None:
            got = ranks[key] = policy.queue_rank(ctx.state, rows, q, amount)
        return got

    def forget(j: Job) -> None:  # a job passed over keeps its tasks, and what it asks
        if id(j) in acting:
            ctx.forget(j)

    lines = ctx.walk_line().lines(ctx.stmt, mine, lambda j: j.pending_count > 0)
    order = JobQueues(ctx.state, rank, lines, policy.job_order, forget)
    back: set[int] = set()
    left = len(acting)
    waits = True  # the job is still to come
    ctx.placer.all_room = ctx.stmt.idle_as_kai()
    try:
        while left and (turn := order.next_job()) is not None:
            if id(turn) in acting:
                left -= 1
                ranks.clear()  # it may place, and the state moves
                if turn is job:
                    if not _place(ctx, job, tasks, terms):
                        return None
                    waits = False
                else:
                    chunks = todo.get(id(turn), [])
                    placed, came_back = _place_again(ctx, chunks.pop(0) if chunks else [], terms.action)
                    back |= came_back
                    if placed and waits and not _may_still_fit(ctx, tasks):
                        return None  # the victim took its room back (or other room) first
                    if placed and chunks:  # an elastic job goes back in line for its next task
                        asks[id(turn)] = ctx.amount(chunks[0]).tolist()
                        left += 1
                        order.push_back(turn)
                        continue
            order.done(turn)
    finally:
        ctx.placer.all_room = None
        for j in mine:
            ctx.forget(j)
    return back


def _may_still_fit(ctx: CycleContext, tasks: list[Task]) -> bool:
    """Whether the job's tasks might still fit the room left once a victim took its
    own back (an upper bound, victimpool.room_holds): in a reclaim after an allocate that
    placed many jobs, the victim's queue usually comes first in the play and takes its
    room straight back; the play then ends there rather than walk on to the job."""
    if any(t.fraction_request for t in tasks):
        return fractions_may_fit(ctx, tasks)
    nodes = ctx.state.nodes
    return room_holds(ctx, tasks, nodes.idle + nodes.releasing)


def _place(ctx: CycleContext, job: Job, tasks: list[Task], terms: Terms) -> bool:
    """The job's tasks, its queue's limits checked first. Tasks whose affinities differ
    are tried again with the most constrained first when task order fails: a task that
    may use any node should not take the one node another task may use."""
    if _over_capacity(ctx, job, tasks, terms):
        return False
    placer = ctx.placer
    if placer.place_gang(ctx.stmt, job, tasks, terms.action):
        return True
    if not job.per_task or len(tasks) < 2:
        return False
    base = placer.job_mask(job)
    tight = sorted(tasks, key=lambda t: int(placer.task_mask(t, base).sum()))
    return tight != tasks and placer.place_gang(ctx.stmt, job, tight, terms.action)


def _place_again(ctx: CycleContext, tasks: list[Task], action: str) -> tuple[bool, set[int]]:
    """Place a victim job's evicted tasks again, pipelined (each starts once it stopped),
    all or none, on any node the job may use, within its queue's limits as allocate
    would: whether they were placed, and those that landed back where they ran (on the
    same device, for a share of one): they need not stop at all."""
    if not tasks:
        return False, set()
    job = tasks[0].job
    if capacity_problem(ctx.state, ctx.shares, job, ctx.capacity_amount(tasks)) is not None:
        return False, set()
    stmt = ctx.stmt
    mark = stmt.checkpoint()
    was = {id(t): (t.node, t.device) for t in tasks}
    # On one GPU type, as any placement of the job (Placer.type_choices); one mask where
    # the cluster has one type.
    for mask in ctx.placer.type_choices(job, ctx.placer.job_mask(job), tasks):
        for nodes in ctx.placer.topology_masks(job, tasks, mask):  # its domains, as any placement
            if _spots(ctx, tasks, nodes, action):
                return True, {id(t) for t in tasks if _here(t) == _where(was[id(t)], t)}
            stmt.rollback(mark)
    return False, set()


def _spots(ctx: CycleContext, tasks: list[Task], mask: np.ndarray, action: str) -> bool:
    """Each task on the best node of `mask` for it, pipelined; False at the first that
    finds none (the caller rolls back)."""
    for t in tasks:
        spot = ctx.placer.spot(t, mask, allow_pipeline=True)
        if spot is None:
            return False
        ctx.stmt.place(t, spot[0], spot[1], True, action)
    return True


def _here(t: Task) -> tuple[int, int]:
    return t.node, t.device if t.fraction_request else -1


def _where(was: tuple[int, int], t: Task) -> tuple[int, int]:
    return was[0], was[1] if t.fraction_request else -1
