"""The cycle cache: the working state kept from one cycle to the next, patched.

`run_cycle(snapshot, config, now, cache=cache)` decides exactly what the full rebuild
decides (`run_cycle` without a cache): the same decisions, reasons, queue figures. The
cache keeps the ClusterState, the queue tree and the Placer (with its node indexes) of
the last cycle, and patches them with what differs in the new snapshot:

- **How a change is found.** By identity, or equality: a job whose JobInfo is the very
  object of the last cycle (`is`), or an equal one, is taken as unchanged. A caller
  that builds a new JobInfo for every job that changed (the Controller does) needs to
  say nothing more; one that changes a JobInfo or its tasks in place names those jobs
  in `changed`. The job list is diffed against the last one at C speed (jobdiff.py):
  runs of the same jobs are kept as they are, and only the jobs that appeared or
  disappeared are looked at. When kept jobs changed places, or jobs are named in
  `changed`, every job is looked at (still without rebuilding the unchanged ones). The
  node list is compared the same way: any node not equal rebuilds everything.
- **What a changed job costs.** Its Job and Task objects are made again, and only the
  nodes its tasks hold (before and after) and its queue are recomputed: a node's idle,
  releasing and devices from its tasks in snapshot order, a leaf queue's figures from
  its jobs in snapshot order: the same arithmetic in the same order as the full build
  (build.py), counting the same tasks (accounting.py), so every figure has the same
  bits. Orders are spaced apart (jobline.py), so a job that appears between two others
  takes a value between theirs and nobody else's changes; only their comparison matters.
- **After the cycle.** The cycle's Statement keeps every undo step (committed ones too);
  `restore` takes the whole cycle back, then recomputes the nodes the cycle touched. The
  state is then again the one the snapshot describes, ready for the next patch.
- **What rebuilds everything** (as the full path does): the first cycle; a node list
  that is not the same (or equal) nodes in the same order (nodes change rarely: any node added,
  removed or changed rebuilds); another queue list, config or policy; a job that
  changes the set of extended-resource columns; a job name used twice; kept jobs that
  changed places; no order left between two neighbours (after many jobs appeared at one
  place); more distinct requests than `max_requests` (their arrays are shared by
  identity); a cycle that raised before it was restored.

The full rebuild stays the reference: tests/core/test_incremental.py drives both on
random sequences of changes and compares every result.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections import Counter
from collections.abc import Collection, Sequence

import numpy as np

from kai_ray.core.incremental.candidates import KeptCandidates
from kai_ray.core.incremental.gangs import KeptGangs
from kai_ray.core.incremental.jobdiff import JobDiff, as_list
from kai_ray.core.incremental.jobline import Entry, JobLine
from kai_ray.core.incremental.outcomes import SearchOutcomes
from kai_ray.core.model.snapshot import (
    ClusterSnapshot,
    JobInfo,
    NodeInfo,
    QueueInfo,
    SchedulerConfig,
    TaskStatus,
)
from kai_ray.core.rules.capacity import capped
from kai_ray.core.rules.placement import Placer
from kai_ray.core.rules.policy import Policy
from kai_ray.core.session.waitingline import WaitingLine
from kai_ray.core.state.accounting import constrain, count_tasks, make_task
from kai_ray.core.state.build import build_state_and_leaves, job_as_taken, job_problem
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.leafsums import LeafSums
from kai_ray.core.state.nodes import FloatArray, RequestCache, charge_device, cluster_total, per_request
from kai_ray.core.state.queues import build_queue_tree, first_type_only
from kai_ray.core.state.statement import Statement

__all__ = ["CycleCache"]

_RELEASING, _RUNNING = TaskStatus.RELEASING, TaskStatus.RUNNING
_WALK_GANGS = ("consolidation", "reclaim", "preempt")  # the actions that walk incomplete gangs


class CycleCache:
    """The working state between cycles (see the module docstring). One cache serves
    one caller's sequence of cycles; it is not shared between threads."""

    def __init__(self, max_requests: int = 4096) -> None:
        self.max_requests = max_requests
        self.rebuilds = 0  # full builds, for tests and benchmarks
        self.patches = 0
        self.state: ClusterState | None = None
        self.placer: Placer | None = None
        self.total = np.zeros(3)
        self.line = WaitingLine((), _no_key, _never)  # the jobs waiting at the snapshot
        self.outcomes = SearchOutcomes()  # failed victim searches, kept while they hold
        self.victims = KeptCandidates()  # the policy's candidate victims, as the snapshot has them
        self._config: SchedulerConfig | None = None
        self._policy: Policy | None = None
        self._nodes: list[NodeInfo] = []
        self._queues: list[QueueInfo] = []
        self._node_extended: frozenset[str] = frozenset()
        self._entries: dict[str, Entry] = {}
        self._line = JobLine()  # the last snapshot's jobs, in its order
        self._members: dict[int, dict[int, Job]] = {}  # leaf queue -> its jobs, by id
        self._node_tasks: list[list[Task]] = []  # per node: the tasks holding it
        self._leaves: list[FloatArray] = []  # leaf queues' own allocated, non-preemptible, requested
        self._sums = LeafSums(0)
        self._requests: RequestCache = {}
        self._extended: Counter[str] = Counter()  # per extended resource: jobs asking for it
        self._in_use = False  # a cycle runs on the state (not restored yet)

    # ------------------------------------------------------------ the cycle's ends

    def prepare(
        self, snapshot: ClusterSnapshot, config: SchedulerConfig, policy: Policy, changed: Collection[str]
    ) -> tuple[ClusterState, Placer, FloatArray]:
        """The state for this snapshot: patched, or built afresh when it must be."""
        if self._must_rebuild(snapshot, config, policy) or not self._patch(snapshot, changed):
            self._rebuild(snapshot, config, policy)
        else:
            self.patches += 1
        assert self.state is not None and self.placer is not None
        self._in_use = True
        return self.state, self.placer, self.total

    def kept(self, actions: Sequence[str]) -> KeptGangs:
        """The actions that evict: their lines, keyed as the snapshot has the jobs (so,
        before the cycle changes any), and the failures kept for them."""
        self.line.begin_cycle()
        for action in actions:
            if action in _WALK_GANGS:
                self.line.gang_keys(action)
        assert self.state is not None and self._policy is not None
        self.victims.start(self._policy.victim_order, self.state.nodes.idle.shape[1])  # O(1): made when asked
        return KeptGangs(self.line, self.outcomes, self.victims)

    def restore(self, stmt: Statement) -> None:
        """Take the cycle back (its decisions are read already): the state is again the
        snapshot's, for the next patch."""
        stmt.undo_cycle()
        for node in stmt.touched_nodes:
            self._rebuild_node(node)
        self._in_use = False

    # ------------------------------------------------------------ full build

    def _must_rebuild(self, snapshot: ClusterSnapshot, config: SchedulerConfig, policy: Policy) -> bool:
        if self.state is None or self._in_use or config != self._config or policy is not self._policy:
            return True
        old = self._nodes  # equal nodes build the same state: list equality, C-level
        if len(old) != len(snapshot.nodes) or old != as_list(snapshot.nodes):
            return True
        return snapshot.queues != self._queues

    def _rebuild(self, snapshot: ClusterSnapshot, config: SchedulerConfig, policy: Policy) -> None:
        self.rebuilds += 1
        self.outcomes.forget()
        self.victims.forget()
        self._requests = {}
        state, self._leaves, self._sums = build_state_and_leaves(
            snapshot, build_queue_tree(snapshot.queues), self._requests, config.closed_queues
        )
        self.state, self.placer = state, Placer(state, config)
        self._config, self._policy = config, policy
        self._nodes, self._queues = list(snapshot.nodes), list(snapshot.queues)
        self._node_extended = frozenset(k for n in snapshot.nodes for k, _ in n.extended)
        self.total = cluster_total(state.nodes)  # the same sums, in the same order, as the full path
        self._node_tasks = [[] for _ in range(len(state.nodes))]
        for job in state.jobs:
            for t in job.tasks:
                if t.node >= 0:
                    self._node_tasks[t.node].append(t)
        self._extended = Counter()
        self._entries = {}
        line: list[Entry] = []
        for info in snapshot.jobs:
            extended = _extended_of(info)
            self._extended.update(extended)
            built = state.job_index.get(info.name)
            # A job its queue does not take is built from what it holds (a copy).
            ours = built is not None and (built.info is info or info.name in state.refused)
            valid = built if ours else None
            line.append(Entry(info, valid, extended))
            self._entries[info.name] = line[-1]
        if len(self._entries) != len(snapshot.jobs):
            self._config = None  # a name used twice: the next cycle is built afresh too
        self._line.number(line)
        self._members = {}
        for job in state.jobs:
            self._members.setdefault(job.queue, {})[id(job)] = job
        state.waiting = self._line.waiting()
        self._line_up()

    def _line_up(self) -> None:
        """The waiting line afresh, from the state's waiting jobs: after a build, or after
        the jobs were numbered again."""
        state, policy = self.state, self._policy
        assert state is not None and state.waiting is not None and policy is not None
        self.line = WaitingLine(state.waiting, policy.job_order, lambda job: capped(state, job))

    # ------------------------------------------------------------ patching

    def _patch(self, snapshot: ClusterSnapshot, changed: Collection[str]) -> bool:
        """Apply the snapshot's differences; False when only a full build will do (the
        state may then be half patched: the caller rebuilds it)."""
        state = self.state
        assert state is not None
        infos, line = snapshot.jobs, self._line
        if not changed and line.same(infos):
            state.usage.set_leaves(*self._leaves)  # nothing changed: the state is the last one's
            return True
        diff = None if changed else line.diff(infos, self._entries)
        nodes: set[int] = set()
        queues: set[int] = set()
        if diff is None:  # jobs changed in place, or moved: look at each
            patched = self._patch_every_job(infos, changed, nodes, queues)
        else:
            patched = self._patch_by_diff(infos, diff, nodes, queues)
        if not patched or len(self._requests) > self.max_requests:
            return False
        for node in nodes:
            self._rebuild_node(node)
        self._rebuild_queues(queues)
        state.usage.set_leaves(*self._leaves)  # the last cycle's placements changed its figures
        return True

    def _patch_by_diff(
        self, infos: Sequence[JobInfo], diff: JobDiff, nodes: set[int], queues: set[int]
    ) -> bool:
        """Only what the diff names: the jobs gone, then the new ones (a changed job is
        both: its old object gone, its new one in its place)."""
        state = self.state
        assert state is not None and state.waiting is not None
        entries, line = self._entries, self._line.entries
        columns_may_change = False
        for position in diff.removed:
            entry = line[position]
            self._drop(entry, nodes, queues)
            if entry.job is not None:
                _take_out(state.jobs, entry.job)
                if entry.job.pending_count:
                    _take_out(state.waiting, entry.job)
            if entries.get(entry.info.name) is entry:
                del entries[entry.info.name]
            columns_may_change = columns_may_change or bool(entry.extended)
        made: dict[int, Entry] = {}
        for piece in diff.pieces:
            if isinstance(piece, int):
                info = infos[piece]
                if info.name in entries:
                    return False  # a name used twice
                entries[info.name] = made[piece] = self._make(info, nodes, queues)
                columns_may_change = columns_may_change or bool(made[piece].extended)
        if columns_may_change and not self._same_columns():
            return False
        if not self._line.apply(infos, diff, made):
            return False
        for entry in made.values():  # in line once their orders are set
            if entry.job is not None:
                _put_in(state.jobs, entry.job)
                if entry.job.pending_count:
                    _put_in(state.waiting, entry.job)
                    self.line.add(entry.job)
        return True

    def _patch_every_job(
        self, infos: Sequence[JobInfo], changed: Collection[str], nodes: set[int], queues: set[int]
    ) -> bool:
        """Every job looked at: the ones changed in place (named in `changed`), new or
        changed objects; the line numbered afresh."""
        self.victims.forget()  # victim order reads job orders, numbered afresh here
        old, new = self._entries, {}
        columns_may_change = False
        found = 0  # snapshot jobs whose name was known: fewer than before means removals
        line: list[Entry] = []
        last_order: float = -math.inf  # kept jobs must keep their order: their nodes' sums run in it
        for info in infos:
            name = info.name
            entry = old.get(name)
            if entry is not None:
                found += 1
            if entry is not None and entry.info is info and name not in changed and entry.job is not None:
                if entry.job.order < last_order:
                    return False
                last_order = entry.job.order
            if entry is None or entry.info is not info or name in changed:
                if name in new:
                    return False  # a name used twice
                if entry is not None:
                    self._drop(entry, nodes, queues)
                entry = self._make(info, nodes, queues)
                columns_may_change = columns_may_change or bool(entry.extended)
            new[name] = entry
            line.append(entry)
        if len(new) != len(infos):
            return False
        if found < len(old):
            for name, entry in old.items():
                if name not in new:
                    self._drop(entry, nodes, queues)
                    columns_may_change = columns_may_change or bool(entry.extended)
        self._entries = new
        if columns_may_change and not self._same_columns():
            return False
        self._line.number(line)
        state = self.state
        assert state is not None
        state.jobs, state.waiting = self._line.jobs(), self._line.waiting()
        self._line_up()
        return True

    def _make(self, info: JobInfo, nodes: set[int], queues: set[int]) -> Entry:
        state = self.state
        assert state is not None
        extended = _extended_of(info)
        self._extended.update(extended)
        problem = job_problem(info, state.tree)
        if problem:
            state.invalid[info.name] = problem
            return Entry(info, None, extended)
        taken = job_as_taken(info, state)
        if taken is None:
            return Entry(info, None, extended)
        job = _make_job(taken, state, self._requests)
        state.job_index[info.name] = job
        self._members.setdefault(job.queue, {})[id(job)] = job
        self._sums.add(job, 1)
        if self._may_be_taken(job):
            self.outcomes.victims_changed(job, came=True)
            self.victims.came(job)
        for t in job.tasks:
            if t.node >= 0:
                self._node_tasks[t.node].append(t)
                nodes.add(t.node)
        queues.add(job.queue)
        return Entry(info, job, extended)

    def _drop(self, entry: Entry, nodes: set[int], queues: set[int]) -> None:
        state = self.state
        assert state is not None
        self._extended.subtract(entry.extended)
        name, job = entry.info.name, entry.job
        state.refused.pop(name, None)
        state.refused_waiting.discard(name)
        if job is None:
            state.invalid.pop(name, None)
            return
        if state.job_index.get(name) is job:
            del state.job_index[name]
        if job in self.line:
            self.line.remove(job)
        self._members[job.queue].pop(id(job), None)
        self._sums.add(job, -1)
        if self._may_be_taken(job):
            self.outcomes.victims_changed(job, came=False)
            self.victims.left(job)
        for t in job.tasks:
            if t.node >= 0:
                self._node_tasks[t.node].remove(t)
                nodes.add(t.node)
        queues.add(job.queue)

    def _may_be_taken(self, job: Job) -> bool:
        """A candidate victim: running somewhere, and the policy may take it."""
        policy = self._policy
        assert policy is not None
        return policy.may_be_victim(job) and any(t.status is _RUNNING and t.node >= 0 for t in job.tasks)

    def _same_columns(self) -> bool:
        assert self.state is not None
        asked = {k for k, n in self._extended.items() if n > 0}
        return sorted(self._node_extended | asked) == list(self.state.nodes.columns[3:])

    # ------------------------------------------------------------ recomputing, as the full build does

    def _rebuild_node(self, node: int) -> None:
        """A node's idle, releasing and devices from its tasks, in the full build's order:
        devices charged task by task, then every task's demand taken, then releases."""
        state = self.state
        assert state is not None
        nodes = state.nodes
        nodes.idle[node] = nodes.base_idle[node]
        nodes.releasing[node] = 0.0
        nodes.devices[node] = {}
        tasks = sorted(self._node_tasks[node], key=lambda t: (t.job.order, t.index))
        for t in tasks:
            if t.fraction_request:
                fraction = t.fraction_on(nodes, node)
                t.device = charge_device(nodes, node, t.info.gpu_group, fraction, t.status is _RELEASING)
        row, releasing = nodes.idle[node], nodes.releasing[node]
        for t in tasks:
            row -= t.demand
        for t in tasks:
            if t.status is _RELEASING:
                releasing += t.demand
        nodes.refresh_fractions(node)
        nodes.changed(node)

    def _rebuild_queues(self, queues: set[int]) -> None:
        """Each changed leaf queue's figures from its jobs in snapshot order."""
        state = self.state
        assert state is not None
        allocated, nonpreemptible, requested = self._leaves
        sums = self._sums
        for q in queues:
            members = self._members.get(q, {}).values()
            if not sums.counted[q]:
                sums.count(q, members)
            in_order = functools.partial(sorted, members, key=_by_order)
            allocated[q], nonpreemptible[q], requested[q] = sums.figures(q, state, in_order)


def _take_out(jobs: list[Job], job: Job) -> None:
    """Remove the job from a list in job order (the state's), moving pointers only."""
    at = bisect.bisect_left(jobs, job.order, key=_by_order)
    assert jobs[at] is job, "the state's job lists are in job order"
    del jobs[at]


def _put_in(jobs: list[Job], job: Job) -> None:
    jobs.insert(bisect.bisect_left(jobs, job.order, key=_by_order), job)


def _no_key(job: Job) -> tuple[()]:
    return ()


def _never(job: Job) -> bool:
    return False


def _by_order(job: Job) -> int:
    return job.order


def _extended_of(info: JobInfo) -> frozenset[str]:
    return frozenset(k for t in info.tasks for k, _ in t.request.extended)


def _make_job(info: JobInfo, state: ClusterState, requests: RequestCache) -> Job:
    """A Job with its tasks as the full build makes them, nothing charged yet."""
    nodes = state.nodes
    job = Job(info=info, queue=state.tree.index[info.queue], order=0)
    job.first_type_only = first_type_only(state.tree, job.queue, info)
    job.limits_by_type = state.tree.names_gpu_types
    if info.node_selector:
        job.selector = tuple(sorted(info.node_selector.items()))
    constrain(job)
    for i, t in enumerate(info.tasks):
        req = t.request
        cached = requests.get(req)
        if cached is None:
            cached = requests[req] = per_request(req, nodes.columns)
        job.tasks.append(make_task(job, i, t, cached, nodes))
    count_tasks(job)
    return job
