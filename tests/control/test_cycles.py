"""How backends run cycles (control/cycles.py): the identity a cache reads as
"unchanged", kept across snapshots made afresh."""

from __future__ import annotations

import pytest

from kai_ray.control.cycles import Cycles, cycle_function
from kai_ray.core import (
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


def _snapshot(gpus: int) -> ClusterSnapshot:
    """Made afresh each call, as the operator lists its world: equal, never the same."""
    nodes = [NodeInfo("n0", gpus=8, cpu=8, memory=2**36), NodeInfo("n1", gpus=gpus, cpu=8, memory=2**36)]
    req = Request(gpu=8, cpu=1, memory=2**30)
    jobs = [
        JobInfo("a", "default", [TaskInfo("a-0", TaskStatus.RUNNING, req, node="n0")]),
        JobInfo("b", "default", [TaskInfo("b-0", TaskStatus.PENDING, req)]),
    ]
    return ClusterSnapshot(nodes, [QueueInfo("default")], jobs)


def test_a_checked_cycle_on_equal_objects_decides_as_a_full_one() -> None:
    # The suite sets KAI_RAY_CHECK_INCREMENTAL (tests/conftest.py): each call decides both
    # ways and raises if they differ. The second pass gets equal, not identical, objects.
    cycle = cycle_function()
    config = SchedulerConfig()
    first = cycle(_snapshot(8), config, 0.0)
    assert [d.node for d in first.decisions] == ["n1"]  # type: ignore[attr-defined]
    second = cycle(_snapshot(4), config, 1.0)
    assert second.decisions == [] and "b" in second.pending_reasons


def test_cycles_feed_the_usage_history_to_each_cycle_and_record_what_it_left() -> None:
    # Queue "default" holds 8 of 12 GPUs; with a window, the next cycle's snapshot says
    # so (as every backend's does: the operator once left it out).
    config = SchedulerConfig(usage_window_s=600.0)
    cycles = Cycles.of(config)
    first = _snapshot(4)
    cycles(first, config, 0.0)
    assert first.usage == {}  # no history yet
    later = _snapshot(4)
    cycles(later, config, 10.0)
    assert later.usage["default"][0] == pytest.approx(8 / 12)
    plain = Cycles.of(SchedulerConfig())
    unchanged = _snapshot(4)
    plain(unchanged, SchedulerConfig(), 10.0)
    assert plain.usage is None and unchanged.usage == {}


def test_the_simulators_cycles_are_checked_by_the_same_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    from kai_ray.control import cycles as cycles_module
    from kai_ray.sim.policies import make_policy

    calls: list[bool] = []

    def counted(*args: object, cache: object = None, **kwargs: object) -> object:
        calls.append(cache is not None)
        return run_cycle(*args, cache=cache, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cycles_module, "run_cycle", counted)
    cycle = make_policy("default").cycle()
    cycle(_snapshot(8), SchedulerConfig(), 0.0)
    assert calls == [True, False]  # incremental, then the full rebuild it is checked against
