"""Reservations with backfill (core/actions/reservations.py): named cases of one cycle, then
cycles played forward with exact run times, where backfill must never delay a reserved
gang past the start its reservation expected."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.core import (
    Bind,
    ClusterSnapshot,
    JobInfo,
    NodeInfo,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    run_cycle,
)
from kai_ray.core.incremental import CycleCache
from kai_ray.core.model.words import count
from tests.properties import examples

from .builders import ClusterBuilder, cycle, outcome
from .test_invariants import clusters, look_alikes

H = 3600.0
NOW = 1000.0  # the gangs below started waiting at 0
RESERVE = {"reserve_after_s": 600.0, "now": NOW}


def _two_nodes(a: int = 8, b: int = 4, per_task: int = 8, tasks: int = 2) -> ClusterBuilder:
    """Two 8-GPU nodes: `a` GPUs held on n0 until 1h, `b` on n1 until 2h; a gang of
    `tasks` x `per_task` GPUs waiting since 0."""
    return (
        ClusterBuilder()
        .nodes_(2, gpus=8)
        .job("a", "default", gpu=a)
        .running("n0", since=0)
        .runtime(expected=H)
        .job("b", "default", gpu=b)
        .running("n1", since=0)
        .runtime(expected=2 * H)
        .job("big", "default", gpu=per_task, created_at=-1)
        .pending(tasks)
    )


@dataclass
class Case:
    name: str
    cluster: ClusterBuilder
    bound: set[str]  # jobs bound this cycle
    codes: dict[str, str] = field(default_factory=dict)  # waiting job -> reason code
    reserved: dict[str, tuple[float, tuple[str, ...]]] = field(default_factory=dict)
    config: dict[str, object] = field(default_factory=lambda: dict(RESERVE))


CASES = [
    Case(
        "off: a small job takes the room a big gang waits for",
        _two_nodes().job("small", "default").pending(),
        {"small"},
        {"big": "no-room"},
        config={"now": NOW},
    ),
    Case(
        "a gang that has not waited long enough reserves nothing",
        _two_nodes().job("small", "default").pending(),
        {"small"},
        {"big": "no-room"},
        config={"reserve_after_s": 2 * NOW, "now": NOW},
    ),
    Case(
        "a gang that waited long holds its room from a job with no run time",
        _two_nodes().job("small", "default").pending(),
        set(),
        {"big": "no-room", "small": "reserved"},
        {"big": (2 * H, ("n0", "n1"))},
    ),
    Case(
        "backfill: a job that ends before the expected start runs in the held room",
        _two_nodes().job("small", "default").pending().runtime(expected=1800),
        {"small"},
        {"big": "no-room"},
        {"big": (2 * H, ("n0", "n1"))},
    ),
    Case(
        "a job that would end after the expected start waits",
        _two_nodes().job("small", "default").pending().runtime(expected=3 * H),
        set(),
        {"small": "reserved"},
    ),
    Case(
        "backfill is taken off the hold: what is left stays held",
        _two_nodes()
        .job("s1", "default", gpu=2)
        .pending()
        .runtime(expected=1800)
        .job("s2", "default")
        .pending()
        .runtime(expected=3 * H),
        {"s1"},
        {"s2": "reserved"},
    ),
    Case(
        "room the gang does not need stays free for anyone",
        _two_nodes(a=6, b=7, per_task=7, tasks=1).job("small", "default").pending(2),
        {"small"},
        {"big": "no-room"},
        {"big": (H, ("n0",))},
    ),
    Case(
        "only what no end gives back is held: the ends free 6 of 6 on each node",
        _two_nodes(a=6, b=6, per_task=6).job("small", "default", gpu=2).pending(),
        {"small"},
        {"big": "no-room"},
        {"big": (2 * H, ("n0", "n1"))},
    ),
    Case(
        "work of a higher priority is not held back",
        _two_nodes().job("urgent", "default", priority="inference").pending(),
        {"urgent"},
        {"big": "no-room"},
    ),
    Case(
        "work of its priority ahead of it in line is held back too",
        _two_nodes().job("older", "default", created_at=-5).pending(),
        set(),
        {"big": "no-room", "older": "reserved"},
        {"big": (2 * H, ("n0", "n1"))},
    ),
    Case(
        "a gang that fits now keeps its room from older work ahead of it in line",
        _two_nodes(a=0, b=0).job("older", "default", gpu=8, created_at=-5).pending(),
        {"big"},
        {"older": "reserved"},
    ),
    Case(
        "a gang its queue's limit holds back reserves nothing",
        _two_nodes().queue("default", gpu_limit=14).job("small", "default").pending(),
        {"small"},
        {"big": "queue-limit"},
    ),
    Case(
        "no start can be expected while the room is held by work of unknown run time",
        ClusterBuilder()
        .nodes_(2, gpus=8)
        .job("a", "default", gpu=8)
        .running("n0", since=0)
        .job("b", "default", gpu=4)
        .running("n1", since=0)
        .job("big", "default", gpu=8, created_at=-1)
        .pending(2)
        .job("small", "default")
        .pending(),
        {"small"},
        {"big": "no-room"},
    ),
    Case(
        "a queue default is a run time: the small job backfills",
        _two_nodes()
        .queue("default", gpu_quota=-1, expected_runtime=1800.0)
        .job("small", "default")
        .pending(),
        {"small"},
        {"big": "no-room"},
        {"big": (2 * H, ("n0", "n1"))},
    ),
    Case(
        "at most max_reservations gangs reserve; the next one waits as before",
        _two_nodes().job("big2", "default", gpu=8, created_at=0).pending(2).job("small", "default").pending(),
        set(),
        {"big": "no-room", "big2": "no-room", "small": "reserved"},
        {"big": (2 * H, ("n0", "n1"))},
        config={**RESERVE, "max_reservations": 1},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reservation(case: Case) -> None:
    result = cycle(case.cluster.build(), **case.config)
    assert set(outcome(result)) == case.bound, result.waiting
    for job, code in case.codes.items():
        assert result.waiting[job].code == code, result.waiting[job]
    for job, (start, nodes) in case.reserved.items():
        assert (result.reservations[job].start, result.reservations[job].nodes) == (start, nodes)
        assert (
            f"room is reserved for it on {count(len(nodes), 'node')} ({', '.join(nodes)})"
            in result.waiting[job].text
        )
    if case.codes.get("small") == "reserved":
        assert "reserved for gang big" in result.waiting["small"].text
    assert set(result.reservations) <= set(result.waiting)


def test_the_actions_that_evict_see_the_held_room_taken() -> None:
    """Preempt would place the small job on free room if the holds ended with allocate."""
    snap = _two_nodes().job("small", "default").pending().build()
    result = cycle(snap, "allocate", "consolidation", "reclaim", "preempt", **RESERVE)
    assert outcome(result) == {}
    assert result.waiting["small"].code == "reserved"


# ---------------------------------------------------------------- played forward


@dataclass
class Work:
    name: str
    gpus: int  # per task
    tasks: int
    arrives: float
    runtime: float
    declared: bool = True  # the scheduler is told its run time (exactly)
    started: float | None = None
    nodes: tuple[str, ...] = ()


def play(
    nodes: list[NodeInfo], work: list[Work], config: SchedulerConfig
) -> dict[str, list[tuple[float, float]]]:
    """Cycles at every arrival and end, allocate only, each job running exactly its run
    time; binds start at once. Returns, per gang, (when, expected start) for each cycle
    it held a reservation (the starts are set on `work`)."""
    expected: dict[str, list[tuple[float, float]]] = {}
    cache, now = CycleCache(), 0.0
    for _ in range(500):
        jobs = [_info(w, now) for w in work if w.arrives <= now and not _done(w, now)]
        result = run_cycle(
            ClusterSnapshot(nodes, [QueueInfo("q", quota=(-1.0,) * 3)], jobs), config, now, cache=cache
        )
        by_job: dict[str, list[str]] = {}
        for d in result.decisions:
            assert isinstance(d, Bind), d
            by_job.setdefault(d.job, []).append(d.node)
        for w in work:
            if w.name in by_job:
                w.started, w.nodes = now, tuple(by_job[w.name])
        for job, reserved in result.reservations.items():
            expected.setdefault(job, []).append((now, reserved.start))
        times = [w.arrives for w in work if w.arrives > now]
        times += [
            w.started + w.runtime for w in work if w.started is not None and w.started + w.runtime > now
        ]
        if not times:
            return expected
        now = min(times)
    raise AssertionError("the play did not end")


def _done(w: Work, now: float) -> bool:
    return w.started is not None and w.started + w.runtime <= now


def _info(w: Work, now: float) -> JobInfo:
    request = Request(gpu=w.gpus, cpu=1, memory=1.0)
    if w.started is None:
        tasks = [
            TaskInfo(f"{w.name}-{i}", TaskStatus.PENDING, request, since=w.arrives) for i in range(w.tasks)
        ]
    else:
        tasks = [
            TaskInfo(f"{w.name}-{i}", TaskStatus.RUNNING, request, node, since=w.started)
            for i, node in enumerate(w.nodes)
        ]
    return JobInfo(
        w.name, "q", tasks, created_at=w.arrives, expected_runtime=w.runtime if w.declared else None
    )


def _nodes(count: int, gpus: int) -> list[NodeInfo]:
    return [NodeInfo(f"n{i}", gpus, 64.0, 1e12, 8e10, {}) for i in range(count)]


def _assert_never_delayed(
    work: list[Work], expected: dict[str, list[tuple[float, float]]], after: float
) -> None:
    """A gang starts by the start each of its reservations expected. One priority here:
    only backfill, which ends by then, may use its held room; and a gang that has waited
    longer, whose own reservation comes first (it may take the room of a younger one):
    one seen holding a reservation meanwhile, or starting once it had waited `after`."""
    order = {w.name: (w.arrives, i) for i, w in enumerate(work)}
    for w in work:
        started = w.started if w.started is not None else math.inf
        for made, start in expected.get(w.name, []):
            older = [
                v.name
                for v in work
                if order[v.name] < order[w.name]
                and (
                    any(made <= t < started for t, _ in expected.get(v.name, []))
                    or (
                        v.started is not None
                        and made <= v.started < started
                        and v.started - v.arrives >= after
                    )
                )
            ]
            if not older:
                assert started <= start + 1e-6, (w.name, w.started, made, start)


def _stream(gang_gpus: int = 16) -> list[Work]:
    """A 16-GPU gang behind a stream of 1-GPU jobs on two 8-GPU nodes."""
    first = [Work(f"r{i}", 4, 1, 0.0, 1800.0 * (i + 1)) for i in range(4)]
    small = [Work(f"s{i}", 1, 1, 60.0 + 300.0 * i, 2400.0 + 600.0 * (i % 5)) for i in range(40)]
    return [*first, Work("big", 8, gang_gpus // 8, 30.0, 3 * H), *small]


def test_a_stream_of_small_jobs_starves_a_gang_without_a_reservation_not_with_one() -> None:
    plain = _stream()
    play(_nodes(2, 8), plain, SchedulerConfig(actions=("allocate",)))
    reserving = _stream()
    expected = play(_nodes(2, 8), reserving, SchedulerConfig(actions=("allocate",), reserve_after_s=600.0))
    big_plain = next(w for w in plain if w.name == "big")
    big = next(w for w in reserving if w.name == "big")
    assert big.started is not None and big_plain.started is not None
    assert big.started < big_plain.started
    assert expected["big"], "the gang held a reservation"
    _assert_never_delayed(reserving, expected, 600.0)
    # The small jobs that ran before the gang backfilled: each ended by its start.
    backfilled = [
        w for w in reserving if w.name.startswith("s") and w.started is not None and w.started < big.started
    ]
    assert backfilled and all(w.started + w.runtime <= big.started for w in backfilled if w.started >= 630.0)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[NodeInfo], list[Work]]:
    count, gpus = draw(st.integers(2, 4)), draw(st.sampled_from([4, 8]))
    work = []
    for i in range(draw(st.integers(1, 2 * count))):
        work.append(
            Work(f"r{i}", draw(st.integers(1, gpus)), 1, 0.0, draw(st.sampled_from([600.0, 1800.0, 3600.0])))
        )
    for i in range(draw(st.integers(1, 2))):
        tasks = draw(st.integers(2, count))
        work.append(Work(f"g{i}", gpus, tasks, draw(st.sampled_from([0.0, 30.0, 900.0])), 2 * H))
    for i in range(draw(st.integers(0, 25))):
        work.append(
            Work(
                f"s{i}",
                draw(st.integers(1, gpus)),
                draw(st.integers(1, 2)),
                draw(st.floats(1.0, 4 * H)),
                draw(st.sampled_from([300.0, 900.0, 2400.0, 5400.0])),
                declared=draw(st.booleans()),
            )
        )
    return _nodes(count, gpus), work


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.sampled_from([60.0, 600.0]), st.integers(1, 3))
def test_backfill_never_delays_a_reservation_beyond_its_expected_start(
    stream: tuple[list[NodeInfo], list[Work]], after: float, most: int
) -> None:
    nodes, work = stream
    config = SchedulerConfig(actions=("allocate",), reserve_after_s=after, max_reservations=most)
    expected = play(nodes, work, config)
    _assert_never_delayed(work, expected, after)


SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.one_of(clusters(), look_alikes()))
def test_on_with_no_gang_waiting_long_it_decides_as_off(snap: ClusterSnapshot) -> None:
    """Nothing has waited an hour: the walk without allocate's shortcuts decides the same."""
    today = run_cycle(snap, SchedulerConfig(), 0.0)
    assert run_cycle(snap, SchedulerConfig(reserve_after_s=H), 0.0) == today


@SETTINGS
@given(st.one_of(clusters(), look_alikes()))
def test_a_cycle_cache_decides_as_a_fresh_cycle(snap: ClusterSnapshot) -> None:
    """With reservations on, a kept state gives what a fresh build gives, twice."""
    config = SchedulerConfig(reserve_after_s=1.0)
    waited = replace(snap, jobs=[replace(j, expected_runtime=900.0) for j in snap.jobs])
    fresh = run_cycle(waited, config, 3600.0)
    cache = CycleCache()
    assert run_cycle(waited, config, 3600.0, cache=cache) == fresh
    assert run_cycle(waited, config, 3600.0, cache=cache) == fresh
