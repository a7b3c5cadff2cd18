"""The incremental cycle (a CycleCache kept between cycles) against the full rebuild:
random sequences of changes (jobs submitted and finished, decisions carried out, nodes
and queues changed, jobs changed in place), the same results and the same state bits."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.core import (
    DEFAULT_ACTIONS,
    UNLIMITED,
    Bind,
    ClusterSnapshot,
    CycleCache,
    CycleResult,
    Evict,
    JobInfo,
    NodeAffinity,
    NodeInfo,
    NodeRequirement,
    NodeSelectorTerm,
    Pipeline,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    run_cycle,
)
from kai_ray.core.cycle import finish_cycle, prepare_cycle, run_action
from kai_ray.core.rules.nodeindex import GpuBuckets
from kai_ray.core.state.cluster import ClusterState
from tests.properties import examples

GI = 1024.0**3
# Non-dyadic cpu amounts on purpose: sums in another order would differ in the last bit.
REQUESTS = [
    Request(gpu=1, cpu=1, memory=GI),
    Request(gpu=2, cpu=0.1, memory=3 * GI),
    Request(gpu=0.5, cpu=0.3),
    Request(gpu=0.25, cpu=0.7),
    Request(gpu=0.75, cpu=0.1),
    Request(gpu_memory=20 * GI, cpu=0.1),
    Request(cpu=0.7, memory=3 * GI),
    Request(gpu=1, cpu=0.2, extended=(("foo", 1.0),)),
]
FOO = len(REQUESTS) - 1  # the request with an extended resource
LEAVES = ["a", "b", "c"]


def _affinity(mode: object, k: int) -> NodeAffinity | None:
    """A task's affinity for a submit's `selector` mode: False/True (none: True is the
    job's node selector), "job" (every task the same, made afresh each time: equal, not
    the same object), "task" (the first task none, the others off node n0 or on rack r9)."""
    if mode == "job":
        return NodeAffinity((NodeSelectorTerm((NodeRequirement("rack", "In", ("r1",)),)),))
    if mode == "task" and k:
        off_n0 = NodeRequirement("metadata.name", "NotIn", ("n0",), field=True)
        r9 = NodeRequirement("rack", "In", ("r9",))
        return NodeAffinity((NodeSelectorTerm(fields=(off_n0,)),) if k == 1 else (NodeSelectorTerm((r9,)),))
    return None


def node(i: int, gpus: int, cpu: float, extended: bool = False, unschedulable: bool = False) -> NodeInfo:
    return NodeInfo(
        f"n{i}",
        gpus=gpus,
        cpu=cpu,
        memory=64 * GI,
        gpu_memory=(40 if i % 2 else 80) * GI,
        labels={"rack": f"r{i % 2}"},
        unschedulable=unschedulable,
        extended=(("foo", 2.0),) if extended else (),
    )


def queues(weight_a: float = 1.0, limit_b: float = UNLIMITED) -> list[QueueInfo]:
    return [
        QueueInfo("dept", quota=(2, UNLIMITED, UNLIMITED)),
        QueueInfo("a", parent="dept", quota=(1, UNLIMITED, UNLIMITED), over_quota_weight=(weight_a, 1, 1)),
        QueueInfo("b", parent="dept", limit=(limit_b, UNLIMITED, UNLIMITED)),
        QueueInfo("c", quota=(2, UNLIMITED, UNLIMITED), over_quota_weight=(2, 1, 1)),
    ]


class World:
    """A backend's view of the cluster, changed copy-on-write (a new JobInfo for every
    job that changes) except where a test changes a job in place and says so."""

    def __init__(self, nodes: list[NodeInfo], config: SchedulerConfig) -> None:
        self.nodes = nodes
        self.queues = queues()
        self.jobs: list[JobInfo] = []
        self.config = config
        self.now = 0.0
        self.serial = 0
        self.in_place: set[str] = set()  # jobs changed in place since the last cycle
        self.sitting: list[tuple[int, JobInfo]] = []  # (place, job) out of the list for now

    def snapshot(self) -> ClusterSnapshot:
        can_grow = self.config.preemption_delay_s > 0
        return ClusterSnapshot(list(self.nodes), list(self.queues), list(self.jobs), can_grow=can_grow)

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "submit":
            _, request, count, queue, priority, elastic, spread, selector, running = op
            self.serial += 1
            name = f"j{self.serial}"
            req = REQUESTS[request]
            # An equal request that is not the same object, every other job.
            req = dataclasses.replace(req) if self.serial % 2 else req
            status = TaskStatus.RUNNING if running else TaskStatus.PENDING
            at = self.nodes[self.serial % len(self.nodes)].name if running else None
            tasks = [
                TaskInfo(
                    f"{name}-{k}", status, req, node=at, since=self.now, node_affinity=_affinity(selector, k)
                )
                for k in range(count)
            ]
            subgroups = {}
            if elastic == "subgroups":  # a cpu-only head, then workers in groups w0, w1 of min 1
                head = TaskInfo(f"{name}-h", status, REQUESTS[6], node=at, since=self.now, subgroup="h")
                tasks = [head, *(dataclasses.replace(t, subgroup=f"w{k % 2}") for k, t in enumerate(tasks))]
                subgroups = {"h": 1, **{f"w{k % 2}": 1 for k in range(count)}}
            self.jobs.append(
                JobInfo(
                    name,
                    queue,
                    tasks,
                    priority=priority,
                    preemptible=priority < 100,
                    min_member=1 if elastic == "elastic" else 0,
                    created_at=self.now,
                    spread=spread,
                    node_selector={"rack": "r0"} if selector is True else {},
                    subgroups=subgroups,
                )
            )
        elif kind == "finish" and self.jobs:
            del self.jobs[op[1] % len(self.jobs)]
        elif kind == "sit-out" and self.jobs:
            # Out of the list for a while (a backend's retry back-off), then back in its
            # place: new to the cache's line, between its old neighbours.
            i = op[1] % len(self.jobs)
            self.sitting.append((i, self.jobs.pop(i)))
        elif kind == "back" and self.sitting:
            i, job = self.sitting.pop(0)
            self.jobs.insert(min(i, len(self.jobs)), job)
        elif kind == "move" and len(self.jobs) > 1:
            self.jobs.append(self.jobs.pop(op[1] % len(self.jobs)))  # kept jobs reordered
        elif kind == "node":
            i = op[1] % len(self.nodes)
            self.nodes[i] = dataclasses.replace(self.nodes[i], unschedulable=not self.nodes[i].unschedulable)
        elif kind == "add-node":
            self.nodes.append(node(len(self.nodes) + 100 * op[1], gpus=4, cpu=8))
        elif kind == "remove-node" and len(self.nodes) > 1:
            del self.nodes[op[1] % len(self.nodes)]
        elif kind == "queue":
            self.queues = queues(weight_a=op[1], limit_b=op[2])
        elif kind == "touch" and self.jobs:
            # An equal job in a new object (a backend that rebuilds it): made again, its
            # tasks charged after the others on their nodes, in snapshot order all the same.
            i = op[1] % len(self.jobs)
            self.jobs[i] = dataclasses.replace(self.jobs[i], tasks=list(self.jobs[i].tasks))
        elif kind == "in-place" and self.jobs:
            # Changed in place (what the core derives from it is stale): must be named.
            job = self.jobs[op[1] % len(self.jobs)]
            job.queue = LEAVES[(LEAVES.index(job.queue) + 1) % 3] if job.queue in LEAVES else "a"
            for t in job.tasks:
                t.status, t.node, t.gpu_group = TaskStatus.PENDING, None, None
            self.in_place.add(job.name)

    def carry_out(self, result: CycleResult) -> None:
        """Decisions done (binds run, evictions released, pipelined tasks wait again),
        finished tasks leave their jobs; the clock moves on."""
        self.now += 1.0
        by_job: dict[str, list[Bind | Pipeline | Evict]] = {}
        for d in result.decisions:
            by_job.setdefault(d.job, []).append(d)
        jobs = []
        for job in self.jobs:
            decisions = by_job.get(job.name)
            releasing = any(t.status is TaskStatus.RELEASING for t in job.tasks)
            if decisions or releasing:
                job = dataclasses.replace(job, tasks=[self._task(t, decisions or []) for t in job.tasks])
            jobs.append(job)
        self.jobs = jobs
        self.in_place = set()

    def _task(self, t: TaskInfo, decisions: Sequence[Bind | Pipeline | Evict]) -> TaskInfo:
        mine = [d for d in decisions if d.task == t.name]
        own = t.node_affinity
        if t.status is TaskStatus.RELEASING:  # released since: back in line
            return TaskInfo(
                t.name, TaskStatus.PENDING, t.request, since=self.now, subgroup=t.subgroup, node_affinity=own
            )
        for d in mine:
            if isinstance(d, Bind):
                return TaskInfo(
                    t.name,
                    TaskStatus.RUNNING,
                    t.request,
                    d.node,
                    d.gpu_group,
                    self.now,
                    subgroup=t.subgroup,
                    node_affinity=own,
                )
        for d in mine:
            if isinstance(d, Evict):
                return dataclasses.replace(t, status=TaskStatus.RELEASING, since=self.now)
        if mine:  # pipelined: placed again by a later cycle
            return TaskInfo(
                t.name, TaskStatus.PENDING, t.request, since=t.since, subgroup=t.subgroup, node_affinity=own
            )
        return t


submits = st.tuples(
    st.just("submit"),
    st.integers(0, len(REQUESTS) - 1),
    st.integers(1, 3),
    st.sampled_from([*LEAVES, *LEAVES, *LEAVES, "dept", "nope"]),
    st.sampled_from([50, 75, 100, 125]),
    st.sampled_from(["", "elastic", "subgroups"]),
    st.sampled_from(["", "", "", "preferred", "required"]),
    st.sampled_from([False, False, True, "job", "task"]),
    st.booleans(),
)
ops = st.one_of(
    submits,
    submits,
    submits,
    st.tuples(st.just("finish"), st.integers(0, 50)),
    st.tuples(st.just("sit-out"), st.integers(0, 50)),
    st.tuples(
        st.just("back"),
    ),
    st.tuples(st.just("move"), st.integers(0, 50)),
    st.tuples(st.just("node"), st.integers(0, 10)),
    st.tuples(st.just("add-node"), st.integers(1, 3)),
    st.tuples(st.just("remove-node"), st.integers(0, 10)),
    st.tuples(st.just("queue"), st.sampled_from([0.0, 1.0, 3.0]), st.sampled_from([UNLIMITED, 1.0, 4.0])),
    st.tuples(st.just("in-place"), st.integers(0, 50)),
    st.tuples(st.just("touch"), st.integers(0, 50)),
    st.tuples(st.just("touch"), st.integers(0, 50)),
)
worlds = st.tuples(
    st.lists(
        st.tuples(st.sampled_from([0, 4, 8, 8]), st.sampled_from([4.0, 6.5, 16.0]), st.booleans()),
        min_size=2,
        max_size=5,
    ),
    st.sampled_from(["binpack", "spread"]),
    st.sampled_from([0.0, 60.0]),
    # A preemption delay on a cluster that can grow: held-back searches, and delays that
    # end with the clock alone (it moves 1 s per step carried out).
    st.sampled_from([0.0, 0.0, 2.0]),
)


def assert_same_state(a: ClusterState, b: ClusterState) -> None:
    """Bit for bit: the arrays, the devices, the queue figures, the jobs and tasks."""
    for field in ("idle", "releasing", "frac_future"):
        assert np.array_equal(getattr(a.nodes, field), getattr(b.nodes, field)), field
    assert [{i: (d.idle, d.releasing) for i, d in x.items()} for x in a.nodes.devices] == [
        {i: (d.idle, d.releasing) for i, d in x.items()} for x in b.nodes.devices
    ]
    assert a.usage.allocated == b.usage.allocated
    assert a.usage.allocated_nonpreemptible == b.usage.allocated_nonpreemptible
    assert np.array_equal(a.usage.requested, b.usage.requested)
    assert a.invalid == b.invalid
    assert a.refused == b.refused and a.refused_waiting == b.refused_waiting
    assert [(j.name, j.active_count, j.pending_count, j.uniform) for j in a.jobs] == [
        (j.name, j.active_count, j.pending_count, j.uniform) for j in b.jobs
    ]
    for state in (a, b):  # orders are compared only: strictly increasing in snapshot order
        orders = [j.order for j in state.jobs]
        assert orders == sorted(set(orders))
    assert [j.name for j in a.maybe_pending()] == [j.name for j in b.maybe_pending()]
    for ja, jb in zip(a.jobs, b.jobs, strict=True):
        assert [(t.status, t.node, t.device, t.since) for t in ja.tasks] == [
            (t.status, t.node, t.device, t.since) for t in jb.tasks
        ]
        assert all(np.array_equal(x.demand, y.demand) for x, y in zip(ja.tasks, jb.tasks, strict=True))


def both(world: World, cache: CycleCache) -> tuple[CycleResult, CycleResult]:
    """One cycle each way, the states compared before the actions run."""
    snap, config, now = world.snapshot(), world.config, world.now
    inc = prepare_cycle(snap, config, now, cache=cache, changed=world.in_place)
    full = prepare_cycle(snap, config, now)
    assert_same_state(inc.state, full.state)
    for name in config.actions:
        run_action(inc, name)
        run_action(full, name)
    inc_result, full_result = finish_cycle(inc), finish_cycle(full)
    cache.restore(inc.stmt)
    # The GPU index the cache keeps must follow every node it changed.
    buckets = inc.placer._buckets
    if buckets is not None:
        fresh = GpuBuckets(cache.state.nodes) if cache.state is not None else None
        assert fresh is not None and buckets.level == fresh.level
    return inc_result, full_result


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds, st.lists(st.tuples(st.lists(ops, max_size=5), st.booleans()), min_size=2, max_size=16))
def test_the_incremental_cycle_decides_as_the_full_rebuild(
    world_spec: tuple[list[tuple[int, float, bool]], str, float, float],
    steps: list[tuple[list[tuple[Any, ...]], bool]],
) -> None:
    run_both_ways(world_spec, steps)


def run_both_ways(
    world_spec: tuple[list[tuple[int, float, bool]], str, float, float],
    steps: list[tuple[list[tuple[Any, ...]], bool]],
    world_class: type[World] = World,
) -> None:
    shapes, placement, grace, delay = world_spec
    nodes = [node(i, gpus, cpu, extended=ext) for i, (gpus, cpu, ext) in enumerate(shapes)]
    config = SchedulerConfig(
        actions=DEFAULT_ACTIONS,
        gpu_placement=placement,
        stale_gang_grace_period=grace,
        preemption_delay_s=delay,
    )
    cache = CycleCache()
    run_steps(world_class(nodes, config), cache, steps, both)
    assert cache.patches + cache.rebuilds == len(steps)


def run_steps(
    world: World,
    cache: CycleCache,
    steps: list[tuple[list[tuple[Any, ...]], bool]],
    each_way: Callable[[World, CycleCache], tuple[CycleResult, CycleResult]],
) -> None:
    """Each step's changes, then one cycle each way (`each_way`): the same results."""
    for step, carried_out in steps:
        for op in step:
            world.apply(op)
        inc, full = each_way(world, cache)
        assert inc == full
        if carried_out:  # else the backend did nothing yet: the same snapshot again
            world.carry_out(full)


# Only the jobs change (no node, queue or extended column): every cycle after the first is
# patched, except after a "move" (kept jobs out of order: rebuilt), so the line's diff, its
# orders and the queues' members are what is tested.
job_ops = st.one_of(
    submits.filter(lambda op: op[1] != FOO),
    st.tuples(st.just("finish"), st.integers(0, 50)),
    st.tuples(st.just("sit-out"), st.integers(0, 50)),
    st.tuples(st.just("back")),
    st.tuples(st.just("touch"), st.integers(0, 50)),
    st.tuples(st.just("move"), st.integers(0, 50)),
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds, st.lists(st.tuples(st.lists(job_ops, max_size=6), st.booleans()), min_size=2, max_size=20))
def test_a_patched_line_of_jobs_decides_as_the_full_rebuild(
    world_spec: tuple[list[tuple[int, float, bool]], str, float, float],
    steps: list[tuple[list[tuple[Any, ...]], bool]],
) -> None:
    run_both_ways(world_spec, steps)


def test_a_steady_sequence_patches_and_never_rebuilds() -> None:
    world = World([node(i, 8, 16.0) for i in range(4)], SchedulerConfig())
    cache = CycleCache()
    for i in range(12):
        world.apply(("submit", i % FOO, 1 + i % 3, LEAVES[i % 3], 50, i % 2 == 0, "", False, False))
        if i % 4 == 3:
            world.apply(("finish", i))
        inc = run_cycle(world.snapshot(), world.config, world.now, cache=cache)
        assert inc == run_cycle(world.snapshot(), world.config, world.now)
        world.carry_out(inc)
    assert (cache.rebuilds, cache.patches) == (1, 11)


def test_an_idle_cycle_reuses_the_state_and_still_sees_a_job_named_as_changed() -> None:
    world = World([node(i, 8, 16.0) for i in range(2)], SchedulerConfig())
    cache = CycleCache()
    world.apply(("submit", 0, 2, "a", 50, False, "", False, False))
    world.apply(("submit", 1, 8, "b", 50, False, "", False, False))  # too big: waits
    world.carry_out(cycle_both(world, cache))
    for _ in range(2):  # the same job objects in the same order: nothing to patch
        assert cycle_both(world, cache).pending_reasons.keys() == {world.jobs[1].name}
    world.apply(("in-place", 1))  # the same list again, one job changed in place and named
    assert cycle_both(world, cache).queues["c"].requested[0] > 0  # moved from b to c
    assert (cache.rebuilds, cache.patches) == (1, 3)


def test_what_cannot_be_patched_is_rebuilt() -> None:
    world = World([node(i, 8, 16.0) for i in range(2)], SchedulerConfig())
    cache = CycleCache()
    world.apply(("submit", 0, 2, "a", 50, False, "", False, False))
    run_cycle(world.snapshot(), world.config, world.now, cache=cache)
    world.apply(("node", 0))  # a changed node
    run_cycle(world.snapshot(), world.config, world.now, cache=cache)
    world.apply(("queue", 2.0, UNLIMITED))  # changed queues
    run_cycle(world.snapshot(), world.config, world.now, cache=cache)
    world.apply(("submit", FOO, 1, "a", 50, False, "", False, False))  # a new extended column
    run_cycle(world.snapshot(), world.config, world.now, cache=cache)
    assert (cache.rebuilds, cache.patches) == (4, 0)
    world.apply(("submit", 0, 1, "b", 50, False, "", False, False))
    run_cycle(world.snapshot(), world.config, world.now, cache=cache)
    assert (cache.rebuilds, cache.patches) == (4, 1)


def cycle_both(world: World, cache: CycleCache) -> CycleResult:
    inc, full = both(world, cache)
    assert inc == full
    return full


def test_the_cycles_changes_are_taken_back_to_the_last_bit() -> None:
    # 4 cores less 0.1 is 3.9; taking 0.7 and giving it back gives 3.9000000000000004.
    world = World([node(0, gpus=0, cpu=4.0)], SchedulerConfig())
    world.apply(("submit", 6, 1, "a", 50, False, "", False, False))  # 0.7 cpu, pending
    world.jobs.insert(0, JobInfo("run", "a", [TaskInfo("run-0", TaskStatus.RUNNING, Request(cpu=0.1), "n0")]))
    cache = CycleCache()
    result = cycle_both(world, cache)
    assert [type(d) for d in result.decisions] == [Bind]
    cycle_both(world, cache)  # not carried out yet: the same snapshot, the state as built


def test_tasks_on_a_node_count_in_snapshot_order() -> None:
    # Shared devices are charged task by task: 0.5 then 0.75 need two devices, and which
    # task has which depends on the order. A job made again must not go last.
    world = World([node(0, gpus=2, cpu=16.0)], SchedulerConfig())
    for request in (2, 4):  # 0.5 GPU, then 0.75 GPU, both running on n0
        world.apply(("submit", request, 1, "a", 50, False, "", False, True))
    cache = CycleCache()
    cycle_both(world, cache)
    world.apply(("touch", 0))
    cycle_both(world, cache)


def test_the_gpu_index_follows_the_nodes_a_patch_changes() -> None:
    world = World([node(0, gpus=8, cpu=16.0), node(1, gpus=8, cpu=16.0)], SchedulerConfig())
    whole = Request(gpu=8, cpu=1)
    world.jobs.append(JobInfo("r", "a", [TaskInfo("r-0", TaskStatus.RUNNING, whole, "n0")]))
    world.apply(("submit", 0, 1, "a", 50, False, "", False, False))  # 1 GPU: to n1
    cache = CycleCache()
    world.carry_out(cycle_both(world, cache))
    world.apply(("finish", 0))  # r ends: n0 is empty again
    world.jobs.append(JobInfo("big", "a", [TaskInfo("big-0", TaskStatus.PENDING, whole)]))
    result = cycle_both(world, cache)
    assert [(d.job, d.node) for d in result.decisions] == [("big", "n0")]
