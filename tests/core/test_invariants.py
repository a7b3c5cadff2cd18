"""Invariants of a cycle on random clusters (hypothesis).

The checker below is independent of the core's internals: it applies the decisions to
the input snapshot and recounts everything from the tasks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Any
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.core import (
    DEFAULT_ACTIONS,
    UNLIMITED,
    Bind,
    ClusterSnapshot,
    Evict,
    JobInfo,
    NodeAffinity,
    NodeInfo,
    Pipeline,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    TopologyConstraint,
    run_cycle,
)
from kai_ray.core.rules.policy import DEFAULT_POLICY
from kai_ray.core.session.suretofail import SureToFail
from tests.properties import examples

from .builders import ClusterBuilder, affinity, name_req, req

GI = 1024.0**3
EPS = 1e-6


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSnapshot:
    nodes = [
        NodeInfo(
            f"n{i}",
            gpus=draw(st.integers(0, 4)),
            cpu=draw(st.sampled_from([4.0, 8.0, 16.0])),
            memory=64 * GI,
            labels={"rack": f"r{i % 2}"},
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    queues = [QueueInfo("root", quota=(UNLIMITED, UNLIMITED, UNLIMITED))]
    depts = draw(st.integers(1, 2))
    leaves: list[str] = []
    for d in range(depts):
        dept_quota = float(draw(st.integers(0, 4)))
        dept_limit = draw(st.sampled_from([UNLIMITED, dept_quota, dept_quota + 2]))
        queues.append(
            QueueInfo(
                f"d{d}",
                "root",
                quota=(dept_quota, UNLIMITED, UNLIMITED),
                limit=(dept_limit, UNLIMITED, UNLIMITED),
            )
        )
        for t in range(draw(st.integers(1, 2))):
            name = f"t{d}{t}"
            leaves.append(name)
            quota = float(draw(st.integers(0, 3)))
            queues.append(
                QueueInfo(
                    name,
                    f"d{d}",
                    priority=draw(st.sampled_from([100, 100, 120])),
                    quota=(quota, UNLIMITED, UNLIMITED),
                    limit=(draw(st.sampled_from([UNLIMITED, quota, quota + 1])), UNLIMITED, UNLIMITED),
                    over_quota_weight=(float(draw(st.integers(0, 2))), 1.0, 1.0),
                )
            )
    jobs = [_job(draw, j, leaves, nodes) for j in range(draw(st.integers(1, 8)))]
    return ClusterSnapshot(nodes, queues, [j for j in jobs if j is not None])


# Required node affinities over the nodes' rack labels and names; None most often.
AFFINITIES: list[NodeAffinity | None] = [
    None,
    None,
    None,
    affinity([req("rack", "In", "r1")]),
    affinity([req("rack", "NotIn", "r1")], [name_req("In", "n2")]),
    affinity([name_req("NotIn", "n0")]),
    affinity([req("rack", "In", "r9")]),  # no node
    affinity(rack="r0"),  # a task's own nodeSelector
]


def _affinities(draw: st.DrawFn, count: int) -> list[NodeAffinity | None]:
    """One for every task, or (a gang whose tasks differ) one for each."""
    if draw(st.booleans()):
        return [draw(st.sampled_from(AFFINITIES))] * count
    return [draw(st.sampled_from(AFFINITIES)) for _ in range(count)]


def _job(draw: st.DrawFn, j: int, leaves: list[str], nodes: list[NodeInfo]) -> JobInfo | None:
    gpu = draw(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0]))
    request = Request(gpu=gpu, cpu=float(draw(st.integers(1, 4))), memory=GI)
    count = draw(st.integers(1, 4))
    priority = draw(st.sampled_from([50, 75, 100, 125]))
    min_member = draw(st.integers(1, count))
    running = draw(st.booleans())
    affinities = _affinities(draw, count)
    tasks = []
    for k in range(count):
        status, node = TaskStatus.PENDING, None
        if running and k < min_member:
            status, node = TaskStatus.RUNNING, draw(st.sampled_from(nodes)).name
        tasks.append(
            TaskInfo(
                f"j{j}-{k}",
                status,
                request,
                node,
                0 if (node and 0 < gpu < 1) else None,
                since=-float(draw(st.integers(0, 600))),
                node_affinity=affinities[k],
            )
        )
    job = JobInfo(
        f"j{j}",
        draw(st.sampled_from(leaves)),
        tasks,
        priority=priority,
        preemptible=priority < 100,
        min_member=min_member,
        created_at=float(j),
        spread=draw(st.sampled_from(["", "", "preferred", "required"])),
    )
    return _with_subgroups(draw, job) if draw(st.booleans()) else job


def _with_subgroups(draw: st.DrawFn, job: JobInfo) -> JobInfo:
    """The job's tasks split between subgroups x and y (in a drawn order), each with a
    drawn minimum of its own (up to its tasks, or one more: a gang too few are left for)."""
    names = [draw(st.sampled_from(["x", "y"])) for _ in job.tasks]
    tasks = [replace(t, subgroup=n) for t, n in zip(job.tasks, names, strict=True)]
    least = {n: draw(st.integers(0, names.count(n) + 1)) for n in sorted(set(names))}
    return replace(job, tasks=tasks, subgroups=least)


def _fits_input(snap: ClusterSnapshot) -> bool:
    """Only inputs whose running tasks fit their nodes are meaningful."""
    state = _holdings(snap, {})
    return not _overcommitted(snap, state)


@dataclass
class Placed:
    node: str
    device: int | None
    request: Request
    kind: str  # running | releasing | bound | pipelined


def _holdings(snap: ClusterSnapshot, decisions: dict[str, list[object]]) -> list[Placed]:
    out: list[Placed] = []
    for job in snap.jobs:
        for t in job.tasks:
            ds = decisions.get(t.name, [])
            evicted = any(isinstance(d, Evict) for d in ds)
            placed = [d for d in ds if isinstance(d, Bind | Pipeline)]
            if t.status in (TaskStatus.RUNNING, TaskStatus.RELEASING) and t.node:
                kind = "releasing" if evicted or t.status is TaskStatus.RELEASING else "running"
                out.append(Placed(t.node, t.gpu_group, t.request, kind))
            for d in placed:
                assert isinstance(d, Bind | Pipeline)
                out.append(
                    Placed(d.node, d.gpu_group, t.request, "bound" if isinstance(d, Bind) else "pipelined")
                )
    return out


def _overcommitted(snap: ClusterSnapshot, held: list[Placed]) -> str:
    nodes = {n.name: n for n in snap.nodes}
    # "now": what holds capacity at this instant; "later": once releasing tasks are gone.
    for moment, kinds in (
        ("now", {"running", "releasing", "bound"}),
        ("later", {"running", "bound", "pipelined"}),
    ):
        cpu: dict[str, float] = defaultdict(float)
        whole: dict[str, float] = defaultdict(float)
        devices: dict[tuple[str, int], float] = defaultdict(float)
        for p in held:
            if p.kind not in kinds:
                continue
            cpu[p.node] += p.request.cpu
            if p.request.is_fractional:
                assert p.device is not None, "a fractional task must name its device"
                devices[(p.node, p.device)] += p.request.gpu
            else:
                whole[p.node] += p.request.gpu
        for name, node in nodes.items():
            shared = sum(1 for (n, _) in devices if n == name)
            if cpu[name] > node.cpu + EPS:
                return f"{moment}: node {name} cpu {cpu[name]} > {node.cpu}"
            if whole[name] + shared > node.gpus + EPS:
                return f"{moment}: node {name} gpus {whole[name]} whole + {shared} shared > {node.gpus}"
        for (name, dev), used in devices.items():
            if used > 1 + EPS or dev >= nodes[name].gpus:
                return f"{moment}: node {name} device {dev} holds {used}"
    return ""


def _by_task(decisions: list[object]) -> dict[str, list[object]]:
    out: dict[str, list[object]] = defaultdict(list)
    for d in decisions:
        out[d.task].append(d)  # type: ignore[attr-defined]
    return out


def _queue_gpus(
    snap: ClusterSnapshot, held: list[Placed], by_task: dict[str, list[object]]
) -> dict[str, float]:
    parent = {q.name: q.parent for q in snap.queues}
    totals: dict[str, float] = defaultdict(float)
    for job in snap.jobs:
        for t in job.tasks:
            ds = by_task.get(t.name, [])
            active_after = any(isinstance(d, Bind | Pipeline) for d in ds) or (
                t.status is TaskStatus.RUNNING and not any(isinstance(d, Evict) for d in ds)
            )
            if active_after:
                q: str | None = job.queue
                while q is not None:
                    totals[q] += t.request.gpu
                    q = parent[q]
    return totals


SETTINGS = settings(
    max_examples=examples(120),
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)


@SETTINGS
@given(clusters())
def test_no_node_or_device_is_overcommitted(snap: ClusterSnapshot) -> None:
    if not _fits_input(snap):
        return
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    held = _holdings(snap, _by_task(result.decisions))
    assert _overcommitted(snap, held) == ""


def _admits(affinity: NodeAffinity | None, node: NodeInfo) -> bool:
    """Kubernetes' rule, written again for the check: the nodeSelector pairs, and any term
    all of whose requirements hold (In, NotIn, Exists, DoesNotExist; the name field)."""
    if affinity is None:
        return True
    if any(node.labels.get(k) != v for k, v in affinity.selector):
        return False

    def holds(r: Any) -> bool:
        value = node.name if r.field else node.labels.get(r.key)
        return {
            "In": value in r.values,
            "NotIn": value not in r.values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[r.operator]

    terms = affinity.terms
    return not terms or any(
        (t.expressions or t.fields) and all(map(holds, (*t.expressions, *t.fields))) for t in terms
    )


@SETTINGS
@given(clusters())
def test_no_task_is_placed_where_its_affinity_refuses(snap: ClusterSnapshot) -> None:
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    nodes = {n.name: n for n in snap.nodes}
    tasks = {t.name: t for job in snap.jobs for t in job.tasks}
    for d in result.decisions:
        if isinstance(d, Bind | Pipeline):
            assert _admits(tasks[d.task].node_affinity, nodes[d.node]), (d, tasks[d.task].node_affinity)


@SETTINGS
@given(clusters())
def test_gangs_start_whole_or_not_at_all(snap: ClusterSnapshot) -> None:
    if not _fits_input(snap):
        return
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    by_task = _by_task(result.decisions)
    for job in snap.jobs:
        if any(t.status is not TaskStatus.PENDING for t in job.tasks):
            continue  # only jobs that start from nothing
        started = [
            t for t in job.tasks if any(isinstance(d, Bind | Pipeline) for d in by_task.get(t.name, []))
        ]
        if not job.subgroups:
            assert not started or len(started) >= job.gang_size, (
                f"{job.name}: {len(started)} of {job.gang_size}"
            )
            continue
        # With subgroups: each subgroup's own minimum, surplus elsewhere does not count.
        per = Counter(t.subgroup for t in started)
        short = {n: per[n] for n, least in job.subgroups.items() if per[n] < least}
        assert not started or not short, f"{job.name}: started {dict(per)}, minimums {dict(job.subgroups)}"


@SETTINGS
@given(clusters())
def test_no_queue_goes_over_its_limit_at_any_level(snap: ClusterSnapshot) -> None:
    if not _fits_input(snap):
        return
    before = _queue_gpus(snap, [], {})
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    by_task = _by_task(result.decisions)
    after = _queue_gpus(snap, _holdings(snap, by_task), by_task)
    for q in snap.queues:
        limit = q.limit[0]
        if limit >= 0:
            assert after[q.name] <= max(limit, before[q.name]) + EPS, q.name


@SETTINGS
@given(clusters())
def test_same_input_same_decisions(snap: ClusterSnapshot) -> None:
    first = run_cycle(snap, SchedulerConfig(), 0.0)
    second = run_cycle(snap, SchedulerConfig(), 0.0)
    assert first.decisions == second.decisions
    assert first.pending_reasons == second.pending_reasons


@SETTINGS
@given(clusters())
def test_every_waiting_job_has_a_reason(snap: ClusterSnapshot) -> None:
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    placed = {d.job for d in result.decisions if isinstance(d, Bind | Pipeline)}
    for job in snap.jobs:
        if any(t.status is TaskStatus.PENDING for t in job.tasks) and job.name not in placed:
            assert result.pending_reasons.get(job.name), job.name


@SETTINGS
@given(clusters())
def test_required_spread_never_puts_two_of_a_jobs_tasks_on_one_node(snap: ClusterSnapshot) -> None:
    if not _fits_input(snap):
        return
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    by_task = _by_task(result.decisions)
    for job in snap.jobs:
        if job.spread != "required":
            continue
        decided = {t.name: by_task.get(t.name, []) for t in job.tasks}
        staying = [
            t.node
            for t in job.tasks
            if t.status is TaskStatus.RUNNING and not any(isinstance(d, Evict) for d in decided[t.name])
        ]
        placed = [d.node for ds in decided.values() for d in ds if isinstance(d, Bind | Pipeline)]
        assert len(set(placed)) == len(placed), f"{job.name}: {placed}"
        assert not set(placed) & set(staying), f"{job.name}: placed {placed} beside {staying}"


def _room_now(held: list[Placed], node: NodeInfo, request: Request) -> bool:
    """Whether `node` could take one more task of `request` at this instant."""
    here = [p for p in held if p.node == node.name and p.kind in ("running", "releasing", "bound")]
    if sum(p.request.cpu for p in here) + request.cpu > node.cpu + EPS:
        return False
    if sum(p.request.memory for p in here) + request.memory > node.memory + EPS:
        return False
    devices: dict[int | None, float] = defaultdict(float)
    for p in here:
        if p.request.is_fractional:
            devices[p.device] += p.request.gpu
    whole_free = node.gpus - len(devices) - sum(p.request.gpu for p in here if not p.request.is_fractional)
    if request.is_fractional:
        return whole_free >= 1 - EPS or any(used + request.gpu <= 1 + EPS for used in devices.values())
    return whole_free >= request.gpu - EPS


@st.composite
def spreading(draw: st.DrawFn) -> ClusterSnapshot:
    """Few nodes with uneven room (other work runs there) and jobs that prefer spreading,
    some with more tasks than nodes: where stacking would show."""
    nodes = [
        NodeInfo(f"n{i}", gpus=draw(st.integers(0, 6)), cpu=float(draw(st.integers(2, 12))), memory=64 * GI)
        for i in range(draw(st.integers(1, 4)))
    ]
    other = [
        TaskInfo(f"other-{k}", TaskStatus.RUNNING, Request(gpu=1.0, cpu=1.0), node.name)
        for k, node in enumerate(nodes)
        for _ in range(draw(st.integers(0, node.gpus)))
    ]
    jobs = [JobInfo("other", "q", other, priority=125, preemptible=False)] if other else []
    for j in range(draw(st.integers(1, 3))):
        request = Request(gpu=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])), cpu=1.0, memory=GI)
        count = draw(st.integers(1, 8))
        running = [
            TaskInfo(f"s{j}-r{k}", TaskStatus.RUNNING, request, draw(st.sampled_from(nodes)).name, None)
            for k in range(draw(st.integers(0, 2)) if not request.is_fractional else 0)
        ]
        pending = [TaskInfo(f"s{j}-{k}", TaskStatus.PENDING, request) for k in range(count)]
        min_member = len(running) or draw(st.integers(1, count))
        jobs.append(JobInfo(f"s{j}", "q", running + pending, min_member=min_member, spread="preferred"))
    queues = [QueueInfo("q", quota=(UNLIMITED, UNLIMITED, UNLIMITED))]
    return ClusterSnapshot(nodes, queues, jobs)


@SETTINGS
@given(spreading())
def test_preferred_spread_is_as_even_as_the_room_allows(snap: ClusterSnapshot) -> None:
    """A node that got one of the job's tasks holds at most one more of them than any
    node that still has room for another: each task went to a node with the fewest."""
    if not _fits_input(snap):
        return
    result = run_cycle(snap, SchedulerConfig(actions=("allocate",)), 0.0)
    by_task = _by_task(result.decisions)
    held = _holdings(snap, by_task)
    for job in snap.jobs:
        if job.spread != "preferred":
            continue
        placed = [
            d.node for t in job.tasks for d in by_task.get(t.name, []) if isinstance(d, Bind | Pipeline)
        ]
        if not placed:
            continue
        running = [t.node for t in job.tasks if t.status is TaskStatus.RUNNING and t.node]
        counts = Counter(running + placed)
        most = max(counts[n] for n in placed)
        request = job.tasks[0].request
        for node in snap.nodes:
            if counts[node.name] < most - 1 and _room_now(held, node, request):
                raise AssertionError(f"{job.name}: {dict(counts)}, yet {node.name} has room")


@st.composite
def look_alikes(draw: st.DrawFn) -> ClusterSnapshot:
    """Full nodes of low-priority work and waiting gangs that share one request and size
    but differ in one placement input (spread, topology, selector, queue, priority): the
    jobs a search key must tell apart."""
    nodes = [
        NodeInfo(
            f"n{i}", gpus=2, cpu=8.0, memory=64 * GI, labels={"rack": f"r{i % 2}", "zone": "z"} if i else {}
        )
        for i in range(draw(st.integers(1, 4)))
    ]
    queues = [QueueInfo("root", quota=(UNLIMITED,) * 3)] + [
        QueueInfo(name, "root", quota=(float(draw(st.integers(0, 4))), UNLIMITED, UNLIMITED))
        for name in ("a", "b")
    ]
    jobs = [
        JobInfo(
            f"run{i}-{k}",
            draw(st.sampled_from(["a", "b"])),
            [
                TaskInfo(
                    f"run{i}-{k}-0", TaskStatus.RUNNING, Request(gpu=1.0, cpu=1.0), node.name, since=-3600.0
                )
            ],
            priority=50,
            created_at=-1.0,
        )
        for i, node in enumerate(nodes)
        for k in range(draw(st.integers(0, 2)))
    ]
    request = Request(gpu=draw(st.sampled_from([1.0, 2.0])), cpu=1.0)
    size = draw(st.integers(1, 3))
    for j in range(draw(st.integers(2, 5))):
        priority = draw(st.sampled_from([50, 125]))
        level = draw(st.sampled_from([None, "rack", "zone", "nowhere"]))
        # Look-alikes but for their tasks' affinities (each drawn from a few).
        own = _affinities(draw, size)
        jobs.append(
            JobInfo(
                f"j{j}",
                draw(st.sampled_from(["a", "b"])),
                [
                    TaskInfo(f"j{j}-{k}", TaskStatus.PENDING, request, node_affinity=own[k])
                    for k in range(size)
                ],
                priority=priority,
                preemptible=priority < 100,
                created_at=float(j),
                spread=draw(st.sampled_from(["", "required"])),
                topology=TopologyConstraint("t", required=level) if level else None,
                node_selector=draw(st.sampled_from([{}, {"zone": "z"}])),
            )
        )
        if draw(st.booleans()):  # the same tasks split between subgroups another way
            jobs[-1] = _with_subgroups(draw, jobs[-1])
    return ClusterSnapshot(nodes, queues, jobs)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(clusters(), look_alikes()))
def test_skipping_searches_that_already_failed_changes_no_decision(snap: ClusterSnapshot) -> None:
    """The skip is only a shortcut: every search run again gives the same decisions."""
    skipping = run_cycle(snap, SchedulerConfig(), 0.0)
    searching = run_cycle(snap, SchedulerConfig(skip_failed_searches=False), 0.0)
    assert skipping.decisions == searching.decisions


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(clusters(), look_alikes()))
def test_settling_the_rest_of_allocate_at_once_changes_nothing(snap: ClusterSnapshot) -> None:
    """Once every job left in line is sure to fail, allocate gives each its reason
    without ranking the queues: the same decisions, reasons and queue order as going on
    one job at a time."""
    for actions in (("allocate",), DEFAULT_ACTIONS):
        config = SchedulerConfig(actions=actions)
        settled = run_cycle(snap, config, 0.0)
        with patch.object(SureToFail, "all_fail", lambda self: False):
            in_line = run_cycle(snap, config, 0.0)
        assert settled == in_line


def test_reclaim_settles_once_its_queue_may_not_reclaim() -> None:
    """A queue at its fair share may not reclaim. The verdict reads only what the job's
    search key holds, so the job's look-alikes are sure to fail too: reclaim stops
    ranking queues after the first of them (ranking a thousand waiting jobs each cycle was
    most of a deep queue's cycle). Reasons and decisions: as the property tests above."""
    builder = ClusterBuilder().node("n0", gpus=2).queue("q", gpu_quota=2)
    builder.job("holder", "q", gpu=2).running("n0")
    for i in range(50):
        builder.job(f"w{i}", "q").pending()
    ranked = 0

    def counting(*args: Any) -> Any:
        nonlocal ranked
        ranked += 1
        return DEFAULT_POLICY.queue_rank(*args)

    policy = replace(DEFAULT_POLICY, queue_rank=counting)
    result = run_cycle(builder.build(), SchedulerConfig(actions=("reclaim",)), 0.0, policy)
    assert ranked <= 3, ranked
    assert len(result.pending_reasons) == 50
    assert all("cannot reclaim" in text for text in result.pending_reasons.values())
