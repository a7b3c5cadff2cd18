"""How backends run cycles (control/cycles.py): the identity a cache reads as
"unchanged", kept across snapshots made afresh."""

from __future__ import annotations

import dataclasses

from kai_ray.control.cycles import Stable, cycle_function
from kai_ray.core import (
    ClusterSnapshot,
    JobInfo,
    NodeInfo,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
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


def test_equal_nodes_and_jobs_keep_last_passes_objects_and_changed_ones_are_new() -> None:
    stable = Stable()
    first = stable.keep(_snapshot(8))
    again = stable.keep(_snapshot(8))
    assert all(a is b for a, b in zip(first.nodes, again.nodes, strict=True))
    assert all(a is b for a, b in zip(first.jobs, again.jobs, strict=True))
    changed = _snapshot(4)
    changed.jobs[1] = dataclasses.replace(changed.jobs[1], priority=125)
    third = stable.keep(changed)
    assert third.nodes[0] is again.nodes[0] and third.nodes[1] is not again.nodes[1]
    assert third.nodes[1].gpus == 4
    assert third.jobs[0] is again.jobs[0] and third.jobs[1].priority == 125


def test_a_checked_cycle_on_kept_objects_decides_as_a_full_one() -> None:
    # The suite sets KAI_RAY_CHECK_INCREMENTAL (tests/conftest.py): each call decides both
    # ways and raises if they differ. The second pass patches the kept state.
    cycle, stable = cycle_function(), Stable()
    config = SchedulerConfig()
    first = cycle(stable.keep(_snapshot(8)), config, 0.0)
    assert [d.node for d in first.decisions] == ["n1"]  # type: ignore[attr-defined]
    second = cycle(stable.keep(_snapshot(4)), config, 1.0)
    assert second.decisions == [] and "b" in second.pending_reasons
