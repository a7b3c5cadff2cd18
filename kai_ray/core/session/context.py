"""What every action works on during one cycle (kept small on purpose: no god object)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from kai_ray.core.model.gpushare import device_share
from kai_ray.core.model.snapshot import Reserved, SchedulerConfig
from kai_ray.core.rules.capacity import capped
from kai_ray.core.rules.fairshare import FairShares
from kai_ray.core.rules.hooks import ShareRows
from kai_ray.core.rules.placement import Placer
from kai_ray.core.rules.policy import DEFAULT_POLICY, Policy, QueueRank, allocate_count, tasks_to_allocate
from kai_ray.core.rules.typedqueues import rank_column
from kai_ray.core.session.candidates import Candidates, victim_units
from kai_ray.core.session.failedsearches import FailedSearches
from kai_ray.core.session.gangwalk import GangWalk
from kai_ray.core.session.jobqueues import JobQueues, line_entries
from kai_ray.core.session.waitingline import WaitingLine
from kai_ray.core.session.walkline import WalkLine
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import FloatArray
from kai_ray.core.state.statement import Statement

__all__ = ["CycleContext", "KeptResults", "KeptVictims", "later_session"]


class KeptVictims(Protocol):
    def candidates(self, ctx: CycleContext) -> Candidates | None:
        """The policy's victims kept from the cycles before, when they still hold."""


class KeptResults(Protocol):
    """What a cycle cache keeps between cycles for the actions that evict, as the session
    reaches it (incremental/gangs.py: KeptGangs). Declared here so that the session
    knows the cache only by what it asks of it."""

    @property
    def victims(self) -> KeptVictims: ...

    def each_waiting_gang(self, ctx: CycleContext, walk: GangWalk) -> None:
        """settling.each_waiting_gang, from the kept lines and failures."""


@dataclass(slots=True)
class CycleContext:
    state: ClusterState
    shares: FairShares
    config: SchedulerConfig
    now: float
    total: FloatArray  # cluster capacity per queue resource [gpu, cpu, memory]
    placer: Placer
    stmt: Statement  # every change of the cycle, why each job waits included
    policy: Policy = DEFAULT_POLICY
    rows: ShareRows | None = None
    # The jobs waiting as the cycle began, in line (incremental/waitingline.py): a cycle
    # cache's, or made when first asked for while the cycle has changed nothing yet.
    line: WaitingLine | None = None
    # Seconds a job that would evict others waits first for new nodes: the config's
    # preemption delay where the snapshot says the cluster can grow, else 0.
    preemption_delay: float = 0.0
    # A cycle cache's lines and failures for the actions that evict (incremental/gangs.py).
    kept: KeptResults | None = None
    # The policy's victims, with Statement.running_mark when built (victimpool.py).
    victims: tuple[int, Candidates] | None = None
    # The reservations allocate made this cycle, by gang (reservations.py).
    reserved: dict[str, Reserved] = field(default_factory=dict)
    # Allocate's line in runs, as the solver's simulations walk it (walkline.py).
    walk: WalkLine | None = None
    # The waiting jobs the actions that evict look at; None: every one (the cycle's last
    # step gives the jobs held to their first GPU type their later types: cycle.py).
    only: list[Job] | None = None
    # A job's next request, while it waits in a JobQueues (its tasks do not change there).
    _next_amount: dict[int, list[float]] = field(default_factory=dict)
    # n times a shared per-task amount, by (id of that amount, n): read-only arrays.
    _multiples: dict[tuple[int, int], FloatArray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rows = ShareRows.of(self.shares, self.total)

    def job_queues(self, jobs: list[Job]) -> JobQueues:
        """The jobs in policy order, queue by queue."""
        lines = line_entries(jobs, self.policy.job_order)
        return JobQueues(self.state, self.rank, lines, self.policy.job_order, self.forget)

    def waiting_line(self) -> WaitingLine:
        """The jobs with pending tasks now, in line. While the cycle has changed nothing,
        the line it began with (kept for the cycle's end); afterwards one made now."""
        if self.stmt.touched_jobs or self.line is None:
            state = self.state
            jobs = [j for j in state.maybe_pending() if j.pending_count]
            line = WaitingLine(jobs, self.policy.job_order, lambda job: capped(state, job))
            if self.stmt.touched_jobs:
                return line
            self.line = line
        return self.line

    def waiting_gangs(self) -> JobQueues:
        """Jobs with tasks waiting, in policy order (the actions that evict): a gang still
        incomplete, or, as KAI's reclaim and preempt try it, an elastic job for one more task."""
        jobs = self.state.maybe_pending() if self.only is None else self.only
        return self.job_queues([j for j in jobs if j.pending_count])

    def walk_line(self) -> WalkLine:
        """Allocate's line in runs (walkline.py), made again once many jobs changed."""
        touched = self.stmt.touched_jobs
        if self.walk is None or self.walk.stale(touched):
            jobs = [j for j in self.state.maybe_pending() if j.pending_count and j not in touched]
            self.walk = WalkLine.made(
                touched, jobs=jobs, job_key=self.policy.job_order, asks=self.next_amount
            )
        return self.walk

    def failed_searches(self) -> FailedSearches:
        """A new memo of an action's failed searches (failedsearches.py), off where the
        config turns the memos off, keeping the grounds of its failures where a cycle
        cache will keep them."""
        return FailedSearches(self.config.skip_failed_searches, keeps_grounds=self.kept is not None)

    def victim_candidates(self) -> Candidates:
        """The policy's victims as the state stands; the last built while the same state
        stands (a placement makes a candidate too: Task.takeable); with a cycle cache,
        before the cycle evicts, those it keeps between cycles (incremental/candidates.py)."""
        mark = self.stmt.state_mark
        if self.victims is not None and self.victims[0] == mark:
            return self.victims[1]
        policy = self.policy
        candidates = None if self.kept is None else self.kept.victims.candidates(self)
        if candidates is None:
            # A job with no active task has none running (most of a deep line): not asked.
            jobs = [j for j in self.state.jobs if j.active_count and policy.may_be_victim(j)]
            candidates = Candidates(victim_units(jobs, policy.victim_order), self.state.nodes.idle.shape[1])
        self.victims = (mark, candidates)
        return candidates

    def forget(self, job: Job) -> None:
        self._next_amount.pop(id(job), None)

    def amount(self, tasks: list[Task]) -> FloatArray:
        """What these tasks of one job count against their queue (on their node, once
        placed). Read-only: the common answer is shared."""
        if not tasks:
            return np.zeros(3)
        head = tasks[0]
        first = head.amount
        if first is not None and (head.job.uniform or all(t.amount is first for t in tasks)):
            key = (id(first), len(tasks))  # amounts live as long as the cycle's tasks
            total = self._multiples.get(key)
            if total is None:
                total = self._multiples[key] = first * len(tasks)
                total.setflags(write=False)
            return total
        total = np.zeros(3)
        for t in tasks:
            total += self.state.queue_amount(t, t.node)
        return total

    def capacity_amount(self, tasks: list[Task]) -> FloatArray:
        """What a queue's limit and quota checks count for these tasks: their `amount`,
        but a memory slice not placed yet at its share of the largest device, its smallest
        possible share (KAI's capacity policy: if even that goes over, the job does; where
        it lands decides what it then holds). Fair share sizes it on the smallest device."""
        total = self.amount(tasks)
        slices = [t for t in tasks if t.node < 0 and t.info.request.gpu_memory > 0]
        if not slices:
            return total
        state = self.state
        total = total.copy()
        for t in slices:
            req = t.info.request
            smallest = device_share(req, state.max_device_memory)
            total[0] += smallest - device_share(req, state.min_device_memory)
        return total

    def rank(self, q: int, job: Job) -> QueueRank:
        assert self.rows is not None
        return self.policy.queue_rank(self.state, self.rows, q, self.next_amount(job))

    def next_amount(self, job: Job) -> list[float]:
        """What the job's next tasks ask of its queue (all a queue's rank reads of it)."""
        amount = self._next_amount.get(id(job))
        if amount is None:
            # A uniform job's next tasks ask what any as many of its tasks ask: no need
            # to find which ones are pending.
            tasks = job.tasks[: allocate_count(job)] if job.uniform else tasks_to_allocate(job)
            amount = self.amount(tasks).tolist()
            typed = self.state.usage.typed
            if typed is not None:  # the type its GPUs count on (policy's typed rank)
                amount.append(rank_column(typed, job, self.placer.first_type(job)))
            self._next_amount[id(job)] = amount
        return amount

    def same_rank(self, a: Job, b: Job) -> bool:
        """Whether a queue ranks the same with either job next (the state unchanged)."""
        return self.next_amount(a) == self.next_amount(b)


def later_session(ctx: CycleContext, jobs: list[Job]) -> CycleContext:
    """A session for the cycle's last step (cycle.take_later_types): the same state,
    statement and memos of the cycle, for `jobs` alone, without a cycle cache's lines
    and failures (they are of the first pass)."""
    return replace(ctx, kept=None, line=None, only=jobs)
