"""Reservations with backfill: a gang that has waited long keeps the room it is expected
to start on, and other work may use that room only if it ends first.

Without them a gang of 64 GPUs behind a stream of 1-GPU jobs can wait for ever: each GPU
that frees is taken by the next small job, which fits. With
SchedulerConfig.reserve_after_s > 0, before allocate walks its line, the gangs that have
waited that long (since they last started waiting, policy.waiting_since), longest first,
at most SchedulerConfig.max_reservations, each get a reservation:

- its expected start: the earliest expected end of running work after which the gang
  fits (now, if it fits now), found by running the ends forward (each running job's end
  by the one rule of runtimes.py; work whose run time is not known never gives its room
  back: when only that room would do, there is no reservation);
- its nodes: where it would be placed then (binpacked or spread as configured; among
  equals, the nodes with the least room free now, where a hold keeps least idle); a
  later reservation plans around the nodes of earlier ones;
- what is held: on each of those nodes, the part of the free room the gang will need
  that no expected end gives back by then. Held room is taken for every other job of
  the cycle, whatever its place in line, except:
- the gang itself, work of a higher priority, and backfill: a job expected to end (now
  plus its expected run time) no later than the expected start, which gives the room
  back in time. Whatever they take of the held room is taken off the hold.

Nothing is kept between cycles: reservations are made afresh from the snapshot and the
clock. The holds last the cycle: the actions that evict (reclaim, preempt,
consolidation) see the held room as taken and may still evict the work that ran on
reserved nodes before the cycle, but not what allocate placed on held room in it (the
gang, higher-priority work, backfill): taking that would give the held room to work the
reservation refused (docs/semantics.md, "Reservations and backfill").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kai_ray.core.model.runtimes import estimate_runtime, expected_end
from kai_ray.core.model.snapshot import Reason, Reserved, TaskStatus
from kai_ray.core.model.words import count, listed
from kai_ray.core.rules.capacity import capacity_problem, capped
from kai_ray.core.rules.policy import waiting_since
from kai_ray.core.session.context import CycleContext
from kai_ray.core.session.failedsearches import search_key
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import EPS, BoolArray, FloatArray

__all__ = ["Reservation", "Reservations"]

_NAMED = 3  # nodes named in a reason; the rest are counted
_TIE = 1e6  # a node's room then outweighs its room now, which only breaks ties


@dataclass(slots=True)
class Reservation:
    job: Job
    start: float  # when the gang is expected to start
    held: dict[int, tuple[FloatArray, FloatArray]] = field(default_factory=dict)  # node -> (idle, releasing)


@dataclass(slots=True)
class _Ends:
    """Running work's expected ends, as (when, node, demand), unsorted."""

    at: list[float] = field(default_factory=list)
    node: list[int] = field(default_factory=list)
    demand: list[FloatArray] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)  # id() of the tasks counted
    counted: bool = False  # every job's running tasks are; later, only the cycle's placements


class Reservations:
    """The reservations of one allocate action; every hold is a Statement operation."""

    def __init__(self, ctx: CycleContext) -> None:
        self.ctx = ctx
        self.active: list[Reservation] = []
        self.lifted: tuple[int, ...] = ()  # the reservations the job being placed may backfill
        self._placing: list[Task] = []  # its tasks that waited before it was given held room
        self._ends = _Ends()
        self._no_start: set[tuple[object, ...]] = set()  # gangs no end lets start, by search key
        self._reserved = np.zeros(len(ctx.state.nodes), dtype=bool)

    # ------------------------------------------------------------ making them

    @classmethod
    def made(cls, ctx: CycleContext) -> Reservations:
        """This cycle's reservations, made before allocate walks its line."""
        reservations = cls(ctx)
        reservations.make()
        return reservations

    def make(self) -> None:
        """Before allocate walks its line: the gangs that have waited longest, up to
        max_reservations, each reserve the room they are expected to start on."""
        waited = []
        for job in self.ctx.state.maybe_pending():
            may = self._may_reserve(job)
            if may is not None:
                waited.append((may[0], job.order, job, may[1]))
        waited.sort(key=lambda entry: entry[:2])
        for _, _, job, gang in waited:
            if len(self.active) >= self.ctx.config.max_reservations:
                return
            # One that fits now reserves too (its start is now): the line would let work
            # ahead of it take that room first.
            key = search_key(job, gang, "allocate")
            if key not in self._no_start:
                self._reserve(job, gang, key)

    def _may_reserve(self, job: Job) -> tuple[float, list[Task]] | None:
        """When the gang began to wait and its missing tasks, when it may reserve."""
        ctx = self.ctx
        if not job.pending_count or job.is_whole() or job.incomplete() or job.info.topology is not None:
            return None  # a domain's room is not planned here: it waits as before
        since = waiting_since(job)
        if ctx.now - since < ctx.config.reserve_after_s:
            return None
        gang = job.missing()
        if any(t.fraction_request for t in gang):
            return None
        # A gang its queue's limit holds back waits for that, not for room.
        if (
            capped(ctx.state, job)
            and capacity_problem(ctx.state, ctx.shares, job, ctx.capacity_amount(gang)) is not None
        ):
            return None
        return since, gang

    def _reserve(self, job: Job, gang: Sequence[Task], key: tuple[object, ...]) -> None:
        plan = self._plan(job, gang)
        if plan is None:  # only room held by work of unknown run time would do
            self._no_start.add(key)
            return
        start, placed, freed = plan
        reservation = Reservation(job, start)
        for node, need in placed.items():
            reservation.held[node] = self._hold(node, np.maximum(need - freed.get(node, 0.0), 0.0))
            self._reserved[node] = True
        self.active.append(reservation)
        names = self.ctx.state.nodes.names
        self.ctx.reserved[job.name] = Reserved(start, tuple(names[n] for n in sorted(placed)))

    def reason_for(self, job: Job, why: Reason) -> Reason:
        """A gang's reason, naming its reservation when it holds one (ctx.reserved is
        this cycle's: a gang is in it only once it holds a reservation)."""
        reserved = self.ctx.reserved.get(job.name)
        if reserved is None:
            return why
        where = f"{count(len(reserved.nodes), 'node')} ({listed(reserved.nodes, _NAMED)})"
        return Reason(why.code, f"{why.text}; room is reserved for it on {where} as running work ends")

    def _plan(
        self, job: Job, gang: Sequence[Task]
    ) -> tuple[float, dict[int, FloatArray], dict[int, FloatArray]] | None:
        """When and where the gang is expected to fit, and what each of its nodes gets
        back by then: the fewest expected ends after which it fits (more ends never
        take room away, so the search halves)."""
        at, where, amount = self._sorted_ends()
        free = self.ctx.state.nodes.idle + np.maximum(self.ctx.state.nodes.releasing, 0.0)
        mask = self.ctx.placer.base_mask(job) & ~self._reserved
        # Ends at one time come together: cut only between different times.
        cuts = [0, *(i + 1 for i in range(len(at)) if i + 1 == len(at) or at[i + 1] > at[i])]
        lo, hi = 0, len(cuts) - 1
        if self._fit(free, where, amount, cuts[hi], mask, gang) is None:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if self._fit(free, where, amount, cuts[mid], mask, gang) is not None:
                hi = mid
            else:
                lo = mid + 1
        k = cuts[lo]
        placed = self._fit(free, where, amount, k, mask, gang)
        assert placed is not None, "the search ends on a fit"
        freed: dict[int, FloatArray] = {}
        for i in range(k):
            node = int(where[i])
            freed[node] = freed.get(node, 0.0) + amount[i]
        start = float(at[k - 1]) if k else self.ctx.now
        return start, placed, freed

    def _fit(
        self,
        free: FloatArray,
        where: np.ndarray,
        amount: FloatArray,
        k: int,
        mask: BoolArray,
        gang: Sequence[Task],
    ) -> dict[int, FloatArray] | None:
        """The gang placed on the room free once the first k ends are past: what each
        node gets, or None when it does not fit."""
        room = free.copy()
        if k:
            np.add.at(room, where[:k], amount[:k])
        spread_gpu = self.ctx.config.gpu_placement == "spread"
        spread_cpu = self.ctx.config.cpu_placement == "spread"
        one_per_node = gang[0].job.info.spread == "required"
        taken = np.zeros(len(room), dtype=bool)
        placed: dict[int, FloatArray] = {}
        for task in sorted(gang, key=lambda t: -float(t.demand[0])):
            ok = self.ctx.placer.task_mask(task, mask) & (room >= task.demand - EPS).all(axis=1)
            if one_per_node:
                ok &= ~taken
            if not ok.any():
                return None
            column = 0 if task.demand[0] > 0 else 1
            spread = spread_gpu if column == 0 else spread_cpu
            # Binpacked (or spread) by the room then; among equals, the node with the
            # least room free now: a hold there keeps the least room idle meanwhile.
            score = (-room[:, column] if spread else room[:, column]) * _TIE + free[:, column]
            node = int(np.argmin(np.where(ok, score, np.inf)))
            room[node] -= task.demand
            taken[node] = True
            placed[node] = placed.get(node, 0.0) + task.demand
        return placed

    def _sorted_ends(self) -> tuple[np.ndarray, np.ndarray, FloatArray]:
        """Every expected end of running work (that placed this cycle too), soonest first."""
        self._count_ends()
        ends = self._ends
        if not ends.at:
            return np.zeros(0), np.zeros(0, dtype=int), np.zeros((0, self.ctx.state.nodes.idle.shape[1]))
        at = np.array(ends.at)
        order = np.argsort(at, kind="stable")
        return at[order], np.array(ends.node)[order], np.array(ends.demand)[order]

    def _count_ends(self) -> None:
        """Add the tasks not counted yet: at first every job's, later those placed since."""
        ctx, ends = self.ctx, self._ends
        jobs = list(ctx.stmt.touched_jobs) if ends.counted else ctx.state.jobs
        ends.counted = True
        for job in jobs:
            end = None
            for t in job.tasks:
                if not (t.status.is_active and t.node >= 0) or id(t) in ends.seen:
                    continue
                ends.seen.add(id(t))
                end = self.end_of(job) if end is None else end
                if end is not None:
                    ends.at.append(end)
                    ends.node.append(t.node)
                    ends.demand.append(t.demand)

    def end_of(self, job: Job) -> float | None:
        """When a job is expected to end if it runs from now on (its running tasks from
        their start); None when its run time is not known."""
        ctx = self.ctx
        defaults = ctx.state.tree.runtime_defaults
        queue_expected, queue_max = defaults[job.queue] if defaults else (None, None)
        seconds, _ = estimate_runtime(job.info, None, queue_expected, queue_max)
        running = [t.since for t in job.tasks if t.status is TaskStatus.RUNNING]
        return expected_end(min(running, default=ctx.now), job.info.ran, seconds, ctx.now)

    def _hold(self, node: int, amount: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Hold `amount` of a node's free room, its idle part first."""
        nodes = self.ctx.state.nodes
        from_idle = np.minimum(amount, np.maximum(nodes.idle[node], 0.0))
        from_releasing = np.minimum(amount - from_idle, np.maximum(nodes.releasing[node], 0.0))
        if from_idle.any() or from_releasing.any():
            self.ctx.stmt.hold(node, from_idle, from_releasing)
        return from_idle, from_releasing

    def _give_back(self, node: int, held: tuple[FloatArray, FloatArray]) -> None:
        if held[0].any() or held[1].any():
            self.ctx.stmt.hold(node, -held[0], -held[1])

    # ------------------------------------------------------------ backfill

    def lift(self, job: Job) -> list[tuple[Reservation, dict[int, FloatArray]]]:
        """Give the job the held room it may use, with each node's free room then: its
        own reservation's, that of a gang of lower priority, and that of one it may
        backfill (it is expected to end by its start)."""
        self.lifted = ()
        if not self.active:
            return []
        self._placing = [t for t in job.tasks if t.status is TaskStatus.PENDING]
        end = self.end_of(job)
        end = math.inf if end is None else end
        nodes = self.ctx.state.nodes
        lifted = []
        for i, r in enumerate(self.active):
            if not (r.job is job or job.info.priority > r.job.info.priority or end <= r.start):
                continue
            for node, held in r.held.items():
                self._give_back(node, held)
            lifted.append((r, {n: nodes.idle[n] + nodes.releasing[n] for n in r.held}))
            self.lifted += (i,)
        return lifted

    def restore(self, lifted: list[tuple[Reservation, dict[int, FloatArray]]]) -> None:
        """Hold again what backfill left of each lifted reservation's room; what the job
        placed on that room is kept from the cycle's evictions (keep_placed)."""
        nodes = self.ctx.state.nodes
        used_on: set[int] = set()
        for r, before in lifted:
            for node, (idle, releasing) in r.held.items():
                used = np.maximum(before[node] - (nodes.idle[node] + nodes.releasing[node]), 0.0)
                if (used > EPS).any():
                    used_on.add(node)
                r.held[node] = self._hold(node, np.maximum(idle + releasing - used, 0.0))
        self.lifted = ()
        self._keep_placed(used_on)

    def _keep_placed(self, nodes: set[int]) -> None:
        """The job's tasks just placed on held room, kept from this cycle's evictions
        (Task.on_reservation). The reservation chose, before the line, who may use that
        room this cycle: the gang, work of a higher priority and backfill. Reclaim,
        preempt or consolidation taking such a task would hand the room to work it
        refused (in the sim, reclaim took the gang itself as it started on its
        reservation, cycle after cycle, and the room held for it went to the reclaimer).
        From the next cycle on it runs, and is taken as any running work."""
        placed = (TaskStatus.BINDING, TaskStatus.PIPELINED)
        kept = [t for t in self._placing if t.status in placed and t.node in nodes]
        self._placing = []
        self.ctx.stmt.keep_on_reservation(kept)

    def scoped(self, key: tuple[object, ...]) -> tuple[object, ...]:
        """A failed search's key for the room the job sees: with reservations, the same
        gang sees more of it when it may backfill some."""
        return (*key, ("backfills", self.lifted)) if self.active else key

    def blocking(self, job: Job, gang: Sequence[Task], action: str) -> Reason | None:
        """Why a gang that found no room waits, when the room it fits in is held for a
        reservation it may not backfill: tried with every hold given back, then undone."""
        held = [r for i, r in enumerate(self.active) if i not in self.lifted]
        if not held:
            return None
        stmt = self.ctx.stmt
        start = stmt.checkpoint()
        for r in held:
            for node, amounts in r.held.items():
                self._give_back(node, amounts)
        fits = self.ctx.placer.place_gang(stmt, job, list(gang), action)
        stmt.rollback(start)
        if not fits:
            return None
        first = held[0].job.name
        return Reason(
            "reserved",
            f"the room it fits in is reserved for gang {first}, which has waited long and is "
            "expected to start before this job would end; only work expected to end by then "
            "may use it (backfill; work with no expected run time never does)",
        )
