"""Which victims a scenario of KAI's job solver (solver.py) takes: the candidates in the
order the search accumulates them, and KAI's two scenario generators over them.

The search accumulates *potential* victims one unit at a time (an elastic job's surplus
task, or a whole gang), in victim order; between queues from the queue that gives
first, as the queues would stand with the units already taken gone. Victims recorded
by an earlier count of the job's tasks (solver.py) are not offered again. From the
accumulated units each generator proposes scenarios, each a set of units to take
beside the recorded ones:

- node-local (KAI's `nodelocalgreedy`): with each new unit, for each node its job runs
  on (by name), the accumulated units of every job that has one there. The cheapest fix
  first: room on one node.
- multi-node (KAI's `multinodegang`): with each new unit, the nodes the accumulated
  units run on, ordered by the GPUs each would offer (its free and releasing GPUs, what
  the recorded victims free there, and the units there), smallest first; then the
  units on the first k of them, from the smallest k whose GPUs with the free room
  elsewhere cover the tasks, growing k by 1, 2, 4, ... up to all of them. For gangs
  that need room on several nodes at once.

Each scenario is simulated by the solver; generators only propose.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from kai_ray.core.actions.livecandidates import first_maybe_live
from kai_ray.core.actions.terms import Terms
from kai_ray.core.actions.victims import GivingTree, Unit
from kai_ray.core.session.candidates import SharedUnits
from kai_ray.core.session.context import CycleContext
from kai_ray.core.state.jobs import Task
from kai_ray.core.state.nodes import EPS, FloatArray
from kai_ray.core.state.statement import Statement

__all__ = ["GENERATORS", "VictimOrder", "fits_greedily", "free_gpus", "gpus_of"]


# Per Statement, free_gpus as the state stood at a state mark (each scenario is rolled
# back, so a search reads the same figures again and again).
_FREE: weakref.WeakKeyDictionary[Statement, tuple[int, FloatArray]] = weakref.WeakKeyDictionary()


def free_gpus(ctx: CycleContext) -> FloatArray:
    """Each node's GPUs free or being released, as KAI sums them for its solver's checks
    (GetSumOfIdleGPUs plus GetSumOfReleasingGPUs): whole devices, and the free and
    releasing parts of the devices that shares use. Read-only: copy to change it."""
    stmt, mark = ctx.stmt, ctx.stmt.state_mark
    got = _FREE.get(stmt)
    if got is not None and got[0] == mark:
        return got[1]
    nodes = ctx.state.nodes
    free = nodes.idle[:, 0] + nodes.releasing[:, 0] if len(nodes) else np.zeros(0)
    free = np.array(free, dtype=np.float64)
    for node in np.flatnonzero(nodes.frac_future > EPS).tolist():  # a device with room
        free[node] += sum(d.idle + d.releasing for d in nodes.devices[node].values())
    free.flags.writeable = False
    _FREE[stmt] = (mark, free)
    return free


def gpus_of(ctx: CycleContext, t: Task) -> float:
    """The GPUs a task asks for: whole devices, or its share of one."""
    whole = float(t.demand[0])
    if not t.fraction_request:
        return whole
    node = t.node if t.node >= 0 else 0
    return whole + (t.fraction_on(ctx.state.nodes, node) if len(ctx.state.nodes) else 0.0)


class VictimOrder:
    """The candidates in the order the search accumulates them, skipping the recorded:
    in victim order, or between queues from the queue that gives first (GivingOrder), as
    KAI's victim queue ranks it: each queue with what it has given so far counted gone,
    and, as KAI counts it, a job given in pieces counts what was left of it each time.

    The state stands still while an order lives (each scenario simulated between two
    steps is rolled back, and the search ends at the first that holds), so whether a
    candidate may be taken is asked once, when its turn first comes: each queue's line
    is walked once, not once per step, which keeps a search through thousands of
    candidates linear."""

    def __init__(self, ctx: CycleContext, terms: Terms, recorded: Sequence[Unit]) -> None:
        self.ctx, self.terms = ctx, terms
        # The recorded stay in line: as KAI's fresh victim queue, the search passes over
        # each when its turn comes, counting it as given then.
        self.recorded = {id(u) for u in recorded}
        self.units = terms.units
        self.accumulated: list[Unit] = []
        self._given: set[int] = set()  # ids of the tasks given so far
        self.gone: dict[int, np.ndarray] = {}  # per leaf queue, what it has given (as KAI counts)
        self._taken: set[int] = set()  # places (in units) accumulated or passed over
        self._ok: dict[int, bool] = {}  # place -> may be taken (asked once)
        # Made when first needed: per queue its candidates' places in victim order and
        # how far its line was walked (-1: the line of all queues); per job, its
        # candidates' places.
        self._lines: dict[int, list[int]] | None = None
        self._heads: dict[int, int] = {}
        self._by_job: dict[int, list[int]] | None = None
        self._line: list[int] | None = None  # every candidate's place (victim order alone)
        # The accumulated, indexed: per job its units (with when each came), per node
        # the jobs with an accumulated unit there.
        self._job_units: dict[int, list[tuple[int, Unit]]] = {}
        self._node_jobs: dict[int, set[int]] = {}
        # Ranking kept while the state stands still: per queue how often it gave, what a
        # candidate's queue counts as gone with it next (by that count), and the picks.
        self._versions: dict[int, int] = {}
        self._gone_with: dict[tuple[int, int], list[float]] = {}
        self._tree: GivingTree | None = None

    def grow(self) -> Unit | None:
        """Accumulate the next unit (None when no candidate is left)."""
        while True:
            found = self._next_in_order() if self.terms.giving is None else self._giving_first()
            if found is None:
                return None
            i, unit = found
            if id(unit) in self.recorded:
                # KAI pops the job and, finding a recorded victim in it, puts back the
                # rest of it: one pop passes over every recorded unit of the job.
                self._give_recorded(unit)
                continue
            self._taken.add(i)
            self._give(unit, [unit])
            self._accumulate(unit)
            return unit

    def _accumulate(self, unit: Unit) -> None:
        at, job = len(self.accumulated), id(unit.job)
        self.accumulated.append(unit)
        self._job_units.setdefault(job, []).append((at, unit))
        for node in _nodes(unit):
            self._node_jobs.setdefault(node, set()).add(job)

    def around(self, node: int) -> list[Unit]:
        """The accumulated units of every job with an accumulated unit on `node`, in the
        order they were accumulated."""
        jobs = self._node_jobs.get(node, ())
        return [u for _, u in sorted(p for j in jobs for p in self._job_units[j])] if jobs else []

    def remainder(self, u: Unit) -> np.ndarray:
        """What KAI counts a unit's job as giving when it pops it: the job's running tasks
        (and those placed this cycle) not given yet (the whole job at its first unit)."""
        left = [t for t in u.job.tasks if t.takeable and id(t) not in self._given]
        return self.ctx.amount(left) if left else np.zeros(3)

    def _give(self, u: Unit, units: Sequence[Unit]) -> None:
        """One pop of u's job, giving `units` of it (u first): counted as KAI counts it."""
        q = u.job.queue
        self._versions[q] = self._versions.get(q, 0) + 1
        if self._tree is not None:
            self._tree.changed(q)
        self.gone[q] = self.gone.get(q, np.zeros(3)) + self.remainder(u)
        self._given.update(id(t) for g in units for t in g.tasks)

    def _give_recorded(self, unit: Unit) -> None:
        if self._by_job is None:
            self._by_job = {}
            for k, u in enumerate(self.units):
                self._by_job.setdefault(id(u.job), []).append(k)
        units, recorded = self.units, self.recorded
        mine = [k for k in self._by_job[id(unit.job)] if k not in self._taken and id(units[k]) in recorded]
        self._taken.update(mine)
        self._give(unit, [units[k] for k in mine])

    def _may_take(self, k: int) -> bool:
        ok = self._ok.get(k)
        if ok is None:
            u = self.units[k]
            ok = self._ok[k] = u.live() and self.terms.allowed(u)
        return ok

    def _head(self, q: int, line: list[int]) -> int | None:
        """The place of the first candidate of a queue's line still to be taken."""
        at, taken = self._heads.get(q, -1), self._taken
        if at < 0:  # this search's first look: past the candidates gone before it began
            at = first_maybe_live(self.ctx.stmt, self.units, line) if q >= 0 else 0
        while at < len(line) and (line[at] in taken or not self._may_take(line[at])):
            at += 1
        self._heads[q] = at
        return line[at] if at < len(line) else None

    def _queue_lines(self) -> dict[int, list[int]]:
        """Per queue Terms.queue_allowed does not refuse, its candidates' places."""
        if self._lines is None:
            lines = _by_queue(self.units)
            ok = self.terms.queue_allowed
            self._lines = {q: line for q, line in lines.items() if ok is None or ok(q)}
        return self._lines

    def _next_in_order(self) -> tuple[int, Unit] | None:
        """Victim order alone: the first candidate still to be taken, any queue."""
        if self._line is None:
            ok = self.terms.queue_allowed
            self._line = [k for k, u in enumerate(self.units) if ok is None or ok(u.job.queue)]
        k = self._head(-1, self._line)
        return None if k is None else (k, self.units[k])

    def _giving_first(self) -> tuple[int, Unit] | None:
        """The first allowed candidate of each queue, then the one whose queue gives first
        (GivingOrder.first, kept between steps: GivingTree)."""
        if self._tree is None:
            giving = self.terms.giving
            assert giving is not None
            lines = self._queue_lines()

            def head(q: int) -> tuple[int, Unit] | None:
                k = self._head(q, lines[q])
                return None if k is None else (k, self.units[k])

            self._tree = GivingTree(giving, lines, head, self._victims)
        return self._tree.first()

    def done(self) -> None:
        """The search is over: the giving tree let go. It calls back into this order, and
        the loop of references would otherwise keep each search's order, terms and
        closures alive until the garbage collector's next full pass (a thousand
        searches a cycle in a deep backlog)."""
        self._tree = None

    def _victims(self, u: Unit) -> list[float]:
        """What the unit's queue counts as gone when it is ranked with the unit next
        (kept while its queue gives nothing more: only that moves it)."""
        q = u.job.queue
        key = (id(u), self._versions.get(q, 0))
        known = self._gone_with.get(key)
        if known is None:
            gone = self.gone.get(q, np.zeros(3)) + self.remainder(u)
            known = self._gone_with[key] = [float(x) for x in gone]
        return known


class IdleGpus:
    """KAI's first check of an accumulated scenario (its AccumulatedIdleGpus filter):
    each node's idle and releasing GPUs (free_gpus), plus the GPUs of the victims on it,
    and the tasks' GPUs, largest first, fitted greedily into the nodes with the most, as
    many nodes as there are tasks. A scenario it turns away is not simulated, and the search
    goes on to the next candidate (so it decides which scenarios come first)."""

    def __init__(self, ctx: CycleContext, tasks: Sequence[Task]) -> None:
        self.ctx = ctx
        self.free = free_gpus(ctx).copy()
        self.asks = sorted((gpus_of(ctx, t) for t in tasks), reverse=True)
        self.counted: set[int] = set()

    def add(self, units: Sequence[Unit]) -> None:
        for u in units:
            for t in u.tasks:
                if id(t) not in self.counted and t.node >= 0:
                    self.counted.add(id(t))
                    self.free[t.node] += gpus_of(self.ctx, t)

    def valid(self) -> bool:
        return fits_greedily(self.free, self.asks)


def fits_greedily(free: FloatArray, asks: Sequence[float]) -> bool:
    """KAI's greedy fit of IdleGpus: the asks (largest first) each to the first of the
    len(asks) nodes with the most free GPUs that has room left for it; False once an ask
    meets a node that holds less than it (the rest hold less still) or finds none."""
    top: list[float] = np.sort(free)[::-1][: len(asks)].tolist()  # (a partition is slower: many nodes alike)
    taken = [0.0] * len(top)
    start, last = 0, -1.0
    for ask in asks:
        if ask <= EPS:
            return True
        if ask != last:  # a smaller ask may fit where the last did not: from the top
            start, last = 0, ask
        # Nodes before `start` turned this very ask away, and hold no less now: a gang of
        # many alike tasks is fitted in one pass over the nodes, not one per task.
        start = _first_with_room(top, taken, start, ask)
        if start < 0:
            return False
        taken[start] += ask
    return True


def _first_with_room(top: list[float], taken: list[float], start: int, ask: float) -> int:
    """The first node from `start` (nodes by free GPUs, most first) with room left for
    `ask`; -1 when none has, or a node that holds less than `ask` comes first (the rest
    hold less still)."""
    for i in range(start, len(top)):
        cap = top[i]
        if cap < ask - EPS:
            return -1
        if cap - taken[i] >= ask - EPS:
            return i
    return -1


def _by_queue(units: Sequence[Unit]) -> dict[int, list[int]]:
    """Per queue, its candidates' places in `units` (read-only; made once per shared
    list of candidates, victimpool.SharedUnits)."""
    derived = units.derived if isinstance(units, SharedUnits) else {}
    made = derived.get("by_queue")
    if made is None:
        lines: dict[int, list[int]] = {}
        for k, u in enumerate(units):
            lines.setdefault(u.job.queue, []).append(k)
        made = derived["by_queue"] = lines
    return made  # type: ignore[return-value]


def _nodes(u: Unit) -> tuple[int, ...]:
    return tuple(dict.fromkeys(t.node for t in u.tasks))


def _accumulations(
    ctx: CycleContext, terms: Terms, recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[tuple[VictimOrder, Unit | None]]:
    """The accumulations that pass KAI's first check (IdleGpus): the recorded victims
    alone (None), then the accumulated units after each new one."""
    order = VictimOrder(ctx, terms, recorded)
    try:
        idle = IdleGpus(ctx, tasks)
        idle.add(recorded)
        if idle.valid():
            yield order, None
        while (unit := order.grow()) is not None:
            idle.add([unit])
            if idle.valid():
                yield order, unit
    finally:
        order.done()


def node_local(
    ctx: CycleContext, terms: Terms, recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[list[Unit]]:
    names = ctx.state.nodes.names
    for order, unit in _accumulations(ctx, terms, recorded, tasks):
        if unit is None:
            if recorded:
                yield []  # the recorded victims alone
            continue
        seen: set[frozenset[int]] = set()
        # The nodes of the newest unit's job, all its tasks (KAI: its latest victim job).
        nodes = {t.node for t in unit.job.tasks if t.node >= 0}
        for node in sorted(nodes, key=lambda n: names[n]):
            here = order.around(node)
            key = frozenset(id(u) for u in here)
            if key not in seen:
                seen.add(key)
                yield here


def multi_node(
    ctx: CycleContext, terms: Terms, recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[list[Unit]]:
    for order, unit in _accumulations(ctx, terms, recorded, tasks):
        if unit is None:
            yield []  # the recorded victims alone (none: nothing to simulate)
        else:
            yield from _node_subsets(ctx, order.accumulated, recorded, tasks)


def _node_subsets(
    ctx: CycleContext, units: list[Unit], recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[list[Unit]]:
    free = free_gpus(ctx)
    freed: dict[int, float] = {}
    for u in recorded:
        for t in u.tasks:
            freed[t.node] = freed.get(t.node, 0.0) + gpus_of(ctx, t)
    on_node: dict[int, list[int]] = {}  # node -> units there, in accumulation order
    cap: dict[int, float] = {}
    first_seen: dict[int, int] = {}
    seen_at = 0
    for i, u in enumerate(units):
        for t in u.tasks:
            first_seen.setdefault(t.node, seen_at)
            seen_at += 1
            if i not in on_node.setdefault(t.node, []):
                on_node[t.node].append(i)
            cap[t.node] = cap.get(t.node, 0.0) + gpus_of(ctx, t)
    for node in cap:
        cap[node] += float(free[node]) + freed.get(node, 0.0)
    asks = [gpus_of(ctx, t) for t in tasks]
    smallest = min(asks) if asks else 0.0
    candidates = sorted(
        (n for n in on_node if not (smallest > 0 and cap[n] < smallest)),
        key=lambda n: (cap[n], first_seen[n]),
    )
    job_nodes = np.flatnonzero(ctx.placer.job_mask(tasks[0].job)).tolist() if tasks else []
    baseline = sum(float(free[n]) + freed.get(n, 0.0) for n in job_nodes if n not in on_node)
    remaining = max(0.0, sum(asks) - baseline)
    k = _smallest_k_covering([cap[n] for n in candidates], remaining)
    step = 1
    while k <= len(candidates):
        picked = sorted({i for n in candidates[:k] for i in on_node[n]})
        yield [units[i] for i in picked]
        if k >= len(candidates):
            break
        k, step = min(k + step, len(candidates)), step * 2


def _smallest_k_covering(caps: list[float], demand: float) -> int:
    if demand <= 0:
        return 0
    total = 0.0
    for i, c in enumerate(caps):
        total += c
        if total >= demand:
            return i + 1
    return len(caps) + 1


# In KAI's order: the node-local generator first, then the multi-node one.
def node_local_reach(units: Sequence[Unit]) -> list[list[Unit]]:
    """Sets of candidates that hold every scenario node_local can propose beside the
    recorded victims: per node, every candidate of the jobs with one there (a scenario
    takes some of the accumulated units of the jobs on one node). solver.py plays no
    node-local scenario when none of these could make room. Made once per shared list
    of candidates (victimpool.SharedUnits)."""
    derived = units.derived if isinstance(units, SharedUnits) else {}
    made = derived.get("node_local_reach")
    if made is None:
        on_node: dict[int, set[int]] = {}
        by_job: dict[int, list[Unit]] = {}
        for u in units:
            by_job.setdefault(id(u.job), []).append(u)
            for node in _nodes(u):
                on_node.setdefault(node, set()).add(id(u.job))
        made = derived["node_local_reach"] = [
            [u for j in jobs for u in by_job[j]] for jobs in on_node.values()
        ]
    return made  # type: ignore[return-value]


GENERATORS = (node_local, multi_node)
# Per generator, where every scenario it can propose lies (see node_local_reach).
REACH: dict[Callable[..., Iterator[list[Unit]]], Callable[[Sequence[Unit]], list[list[Unit]]]] = {
    node_local: node_local_reach
}
