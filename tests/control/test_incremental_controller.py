"""The controller's incremental cycles (incremental=True) against full rebuilds: the same
sequence of submissions, finishes, cancellations, readiness and node changes gives the
same cycle results and the same workloads."""

from __future__ import annotations

import os
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.control import Controller, State
from kai_ray.control.cycles import CHECK_INCREMENTAL_ENV, IncrementalMismatch
from kai_ray.control.memory import ManualClock, MemoryExecutor, MemoryNodes, MemoryStore
from kai_ray.control.snapshot import job_info
from kai_ray.core import CycleCache, QueueInfo, SchedulerConfig, run_cycle
from tests.control.harness import QUEUES, node, spec
from tests.properties import examples


def controller(full: bool) -> Controller:
    """`full`: the reference, every cycle rebuilt from JobInfos made afresh."""
    cluster = MemoryNodes([node(f"n{i}") for i in range(3)])
    c = Controller(
        cluster,
        MemoryExecutor(),
        MemoryStore(),
        ManualClock(),
        QUEUES,
        SchedulerConfig(stale_gang_grace_period=5.0),
        cycle=run_cycle if full else None,
        incremental=not full,
    )
    if full:
        c.infos.get = lambda w: job_info(w, c.node_label)  # type: ignore[method-assign]
    return c


def apply(c: Controller, op: tuple[Any, ...], serial: int) -> None:
    kind = op[0]
    running = sorted(w.id for w in c.workloads.values() if w.state is State.RUNNING)
    live = sorted(w.id for w in c.workloads.values() if not w.terminal)
    if kind == "submit":
        _, queue, workers, gpus, high = op
        resources = {"GPU": gpus, "CPU": 1}
        c.submit(
            f"w{serial}",
            spec(
                queue=queue,
                workers=workers,
                resources_per_worker=resources,
                min_workers=1,
                priority=125 if high else 50,
                preemptible=not high,
                grace_period=2,
            ),
        )
    elif kind == "finish" and running:
        w = c.workloads[running[op[1] % len(running)]]
        c.finish(w.id, w.attempt, op[2])
    elif kind == "cancel" and live:
        c.cancel(live[op[1] % len(live)])
    elif kind == "ready":
        c.executor.ready = op[1]  # type: ignore[attr-defined]
    elif kind == "outside":
        c.cluster.outside = {"n0": {"gpu": float(op[1])}} if op[1] else {}  # type: ignore[attr-defined]
    elif kind == "queues":
        c.apply_queues([QueueInfo("a", quota=(op[1], -1, -1))])


ops = st.one_of(
    st.tuples(
        st.just("submit"),
        st.sampled_from(["a", "child"]),
        st.integers(1, 3),
        st.sampled_from([1, 2, 4]),
        st.booleans(),
    ),
    st.tuples(st.just("finish"), st.integers(0, 20), st.booleans()),
    st.tuples(st.just("cancel"), st.integers(0, 20)),
    st.tuples(st.just("ready"), st.booleans()),
    st.tuples(st.just("outside"), st.sampled_from([0, 0, 2])),
    st.tuples(st.just("queues"), st.sampled_from([-1, 4])),
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(ops, max_size=4), st.integers(1, 4)), min_size=1, max_size=14))
def test_incremental_controller_matches_full_cycles(steps: list[tuple[list[tuple[Any, ...]], int]]) -> None:
    inc, full = controller(full=False), controller(full=True)
    serial, t = 0, 0.0
    for step_ops, dt in steps:
        for op in step_ops:
            serial += 1
            apply(inc, op, serial)
            apply(full, op, serial)
        t += dt
        inc.clock.t = full.clock.t = t  # type: ignore[attr-defined]
        a, b = inc.step(), full.step()
        assert a.result == b.result
        assert a.events == b.events
    assert {w.id: (w.state, w.reason, sorted(w.slots)) for w in inc.workloads.values()} == {
        w.id: (w.state, w.reason, sorted(w.slots)) for w in full.workloads.values()
    }


def test_a_surplus_worker_placed_while_running_is_seen_by_the_next_cycle() -> None:
    # The workload stays Running while its surplus worker is placed: only the
    # controller's change mark tells the kept JobInfo is stale.
    inc, full = controller(full=False), controller(full=True)
    for c in (inc, full):
        c.submit("x", spec(workers=1, resources_per_worker={"GPU": 4, "CPU": 1}))
        c.submit("w", spec(workers=3, min_workers=1, resources_per_worker={"GPU": 4, "CPU": 1}))
    for t in range(1, 8):
        if t == 4:
            for c in (inc, full):
                x = c.workloads["x"]
                c.finish("x", x.attempt, True)
        inc.clock.t = full.clock.t = float(t)  # type: ignore[attr-defined]
        a, b = inc.step(), full.step()
        assert a.result == b.result
    assert len(inc.workloads["w"].slots) == 3  # gang of 1, then two surplus workers


def test_what_workloads_hold_is_worked_out_only_for_a_source_that_reads_it() -> None:
    seen: list[dict[str, dict[str, float]]] = []

    class Reading(MemoryNodes):
        def nodes(self, held: Any) -> list[Any]:
            seen.append({k: dict(v) for k, v in held.items()})
            return super().nodes(held)

    c = controller(full=False)
    c.submit("w", spec(workers=2, resources_per_worker={"GPU": 4, "CPU": 1}))
    c.clock.t = 1.0  # type: ignore[attr-defined]
    calls: list[object] = []
    with patch("kai_ray.control.controller.held_by_workloads", lambda *a: calls.append(a) or {}):
        c.step()  # the in-memory source never reads it: nothing worked out
    assert calls == [] and c.workloads["w"].state is State.ADMITTING
    c.cluster = Reading(c.cluster.node_list)  # type: ignore[attr-defined]
    c.step()
    assert seen == [{"n0": {"gpu": 4.0, "cpu": 1.0}, "n1": {"gpu": 4.0, "cpu": 1.0}}]


def test_the_check_catches_a_cache_that_keeps_a_stale_state(monkeypatch: Any) -> None:
    # The suite runs every Controller with KAI_RAY_CHECK_INCREMENTAL (tests/conftest.py).
    # A cache that forgets to recompute the queues of the jobs that changed keeps their
    # old figures: the check must say so, naming what differs.
    assert os.environ.get(CHECK_INCREMENTAL_ENV)
    monkeypatch.setattr(CycleCache, "_rebuild_queues", lambda self, queues: None)
    c = controller(full=False)
    c.submit("w1", spec(workers=1, resources_per_worker={"GPU": 4, "CPU": 1}))
    c.clock.t = 1.0  # type: ignore[attr-defined]
    c.step()  # the first cycle is a full build: the same either way
    c.submit("w2", spec(workers=2, resources_per_worker={"GPU": 4, "CPU": 1}))
    c.clock.t = 2.0  # type: ignore[attr-defined]
    with pytest.raises(IncrementalMismatch, match=r"differs from the full one:\n(.*\n)*queues: "):
        c.step()


def test_without_the_check_the_controller_decides_from_the_cache_alone(monkeypatch: Any) -> None:
    monkeypatch.delenv(CHECK_INCREMENTAL_ENV)
    calls: list[bool] = []

    def counted(*args: Any, cache: Any = None, **kw: Any) -> Any:
        calls.append(cache is not None)
        return run_cycle(*args, cache=cache, **kw)

    monkeypatch.setattr("kai_ray.control.cycles.run_cycle", counted)
    c = controller(full=False)
    c.submit("w", spec(workers=1, resources_per_worker={"GPU": 4, "CPU": 1}))
    for t in (1.0, 2.0, 3.0):
        c.clock.t = t  # type: ignore[attr-defined]
        c.step()
    assert calls == [True, True, True]
    assert c.workloads["w"].state is State.RUNNING
