"""Applying decisions and advancing rounds, with hand-made core answers.

These test the runner's own rules (docs/scenario-format.md, "Between rounds"),
not the core: the CycleResults are written here.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kai_ray.core.model.snapshot import (
    Bind,
    ClusterSnapshot,
    CycleResult,
    Evict,
    Pipeline,
    Reason,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
)
from kai_ray.scenario.runner import (
    ScenarioRunError,
    advance_round,
    apply_result,
    run_scenario,
)
from tests.scenario.builders import ScenarioBuilder, cycle_result, pending, running, scenario

P, B, PL, R, RL = (
    TaskStatus.PENDING,
    TaskStatus.BINDING,
    TaskStatus.PIPELINED,
    TaskStatus.RUNNING,
    TaskStatus.RELEASING,
)


def two_nodes() -> ScenarioBuilder:
    return ScenarioBuilder().node("n0", gpus=2).node("n1", gpus=2)


def snapshot_of(builder: ScenarioBuilder) -> ClusterSnapshot:
    return builder.load().snapshot


def task(snapshot: ClusterSnapshot, name: str) -> TaskInfo:
    return next(t for j in snapshot.jobs for t in j.tasks if t.name == name)


def state(snapshot: ClusterSnapshot, name: str) -> tuple[TaskStatus, str | None, int | None]:
    t = task(snapshot, name)
    return t.status, t.node, t.gpu_group


# ------------------------------------------------------------------ applying one cycle


def test_bind_pipeline_and_evict() -> None:
    snap = snapshot_of(two_nodes().job("run", running("n0")).job("a", pending(), pending()).job("b"))
    result = cycle_result(
        Bind("a", "a-0", "n1", None),
        Pipeline("a", "a-1", "n0", 1),
        Evict("run", "run-0", "n0", "preempt", "lower priority"),
    )
    apply_result(snap, result, clock=7.0)
    assert state(snap, "a-0") == (B, "n1", None)
    assert state(snap, "a-1") == (PL, "n0", 1)
    assert state(snap, "run-0") == (RL, "n0", None)  # still holds its capacity on n0
    assert state(snap, "b-0") == (P, None, None)
    assert [task(snap, n).since for n in ("a-0", "a-1", "run-0", "b-0")] == [7.0, 7.0, 7.0, 0.0]


@pytest.mark.parametrize("placement", [Bind, Pipeline], ids=["bind", "pipeline"])
def test_evicted_and_placed_in_one_cycle_is_a_move(
    placement: Callable[..., Bind | Pipeline],
) -> None:
    snap = snapshot_of(two_nodes().job("mover", running("n0")))
    result = cycle_result(
        Evict("mover", "mover-0", "n0", "consolidation", "make room"),
        placement("mover", "mover-0", "n1", None),
    )
    apply_result(snap, result, clock=3.0)
    assert state(snap, "mover-0") == (PL, "n1", None)
    assert task(snap, "mover-0").since == 3.0


def test_a_status_left_alone_keeps_its_since() -> None:
    snap = snapshot_of(two_nodes().job("run", running("n0", since=-50)))
    apply_result(snap, cycle_result(), clock=1.0)
    assert task(snap, "run-0").since == -50.0


BAD_DECISIONS = [
    ("unknown task", Bind("x", "x-0", "n0", None), "unknown task 'x-0' of job 'x'"),
    ("unknown node", Bind("a", "a-0", "n9", None), "unknown node 'n9'"),
    ("placing a running task", Bind("run", "run-0", "n1", None), "which is Running"),
    ("evicting a pending task", Evict("a", "a-0", "n0", "preempt", ""), "which is Pending"),
]


@pytest.mark.parametrize(
    ("decision", "message"), [c[1:] for c in BAD_DECISIONS], ids=[c[0] for c in BAD_DECISIONS]
)
def test_decisions_that_cannot_be_applied(decision: Bind | Evict, message: str) -> None:
    snap = snapshot_of(two_nodes().job("run", running("n0")).job("a"))
    with pytest.raises(ScenarioRunError, match=message):
        apply_result(snap, cycle_result(decision), clock=0.0)


def test_placing_a_task_twice() -> None:
    snap = snapshot_of(two_nodes().job("a"))
    twice = cycle_result(Bind("a", "a-0", "n0", None), Pipeline("a", "a-0", "n1", None))
    with pytest.raises(ScenarioRunError, match="placed twice"):
        apply_result(snap, twice, clock=0.0)


# ------------------------------------------------------------------ between rounds


def test_between_rounds() -> None:
    snap = snapshot_of(
        two_nodes()
        .job("bound")
        .job("piped", gpu=0.5)
        .job("moved", running("n0"))
        .job("gone", running("n1", gpuGroup="g0"), gpu=0.5)
        .job("run", running("n1", since=-9))
        .job("done", {"state": "Succeeded", "node": "n0", "since": -9})
    )
    apply_result(
        snap,
        cycle_result(
            Bind("bound", "bound-0", "n0", None),
            Pipeline("piped", "piped-0", "n1", 0),
            Evict("moved", "moved-0", "n0", "consolidation", ""),
            Pipeline("moved", "moved-0", "n1", None),
            Evict("gone", "gone-0", "n1", "reclaim", ""),
        ),
        clock=4.0,
    )
    advance_round(snap, clock=4.0)
    assert state(snap, "bound-0") == (R, "n0", None)
    assert state(snap, "piped-0") == (P, None, None)
    assert state(snap, "moved-0") == (P, None, None)  # placed again by the next cycle
    assert state(snap, "gone-0") == (P, None, None)  # its capacity is free now
    assert state(snap, "run-0") == (R, "n1", None)
    assert state(snap, "done-0") == (TaskStatus.SUCCEEDED, "n0", None)
    sinces = [task(snap, n).since for n in ("bound-0", "piped-0", "gone-0", "run-0", "done-0")]
    assert sinces == [4.0, 4.0, 4.0, -9.0, -9.0]


STALE = [
    ("still below the gang", [running("n0"), pending()], -5.0),
    ("whole again", [running("n0"), running("n0")], None),
    ("nothing active", [pending(), pending()], None),
]


@pytest.mark.parametrize(("tasks", "expected"), [c[1:] for c in STALE], ids=[c[0] for c in STALE])
def test_a_given_stale_since_holds_only_while_the_gang_is_broken(
    tasks: list[dict[str, object]], expected: float | None
) -> None:
    snap = snapshot_of(two_nodes().job("g", *tasks, staleSince=-5))
    advance_round(snap, clock=0.0)
    assert snap.jobs[0].stale_since == expected


# ------------------------------------------------------------------ whole runs


class ScriptedCore:
    """Answers each cycle from a list, and records the clock and states it was given."""

    def __init__(self, *answers: CycleResult) -> None:
        self.answers = list(answers)
        self.clocks: list[float] = []
        self.seen: list[dict[str, TaskStatus]] = []

    def __call__(self, snap: ClusterSnapshot, _config: SchedulerConfig, now: float) -> CycleResult:
        self.clocks.append(now)
        self.seen.append({t.name: t.status for j in snap.jobs for t in j.tasks})
        return self.answers.pop(0) if self.answers else cycle_result()


def test_rounds_advance_the_clock_and_carry_state() -> None:
    loaded = (
        scenario()
        .set("rounds", 3)
        .set("now", 100)
        .job("j")
        .expect("j", status="Running", node="node0")
        .load()
    )
    core = ScriptedCore(cycle_result(Bind("j", "j-0", "node0", None)))
    result = run_scenario(loaded, core)
    assert core.clocks == [100.0, 101.0, 102.0]
    assert [s["j-0"] for s in core.seen] == [P, R, R]
    assert result.passed, result.mismatches
    assert result.jobs[0].tasks[0].since == 100.0


def test_the_loaded_scenario_is_not_changed_by_a_run() -> None:
    loaded = scenario().job("j").load()
    run_scenario(loaded, ScriptedCore(cycle_result(Bind("j", "j-0", "node0", None))))
    assert loaded.snapshot.jobs[0].tasks[0].status is P


def test_pending_reasons_of_the_last_round_are_kept() -> None:
    loaded = scenario().set("rounds", 2).job("j").load()
    core = ScriptedCore(
        cycle_result(j="first round"),
        CycleResult(decisions=[], pending_reasons={"j": "second"}, queues={}, invalid={"x": "?"}),
    )
    assert run_scenario(loaded, core).pending_reasons == {"j": "second", "x": "?"}


def test_a_failing_core_fails_the_scenario_without_raising() -> None:
    def broken(_s: ClusterSnapshot, _c: SchedulerConfig, _n: float) -> CycleResult:
        raise ZeroDivisionError("oops")

    result = run_scenario(scenario().job("j").load(), broken)
    assert not result.passed
    assert result.error == "ZeroDivisionError: oops"


def test_a_decision_that_cannot_be_applied_fails_the_scenario() -> None:
    core = ScriptedCore(cycle_result(Bind("j", "j-9", "node0", None)))
    result = run_scenario(scenario().job("j").load(), core)
    assert not result.passed
    assert result.error is not None and "unknown task 'j-9'" in result.error


def test_a_scenario_without_expectations_passes_when_it_runs() -> None:
    assert run_scenario(scenario().job("j").load(), ScriptedCore()).passed


def test_an_expected_reason_code_is_checked_against_the_last_round() -> None:
    loaded = scenario().job("j").job("k").expect("j", reason="no-room").expect("k", reason="none").load()
    waiting = {"j": Reason("queue-limit", "at its limit"), "k": Reason("no-room", "no room")}
    core = ScriptedCore(CycleResult(decisions=[], pending_reasons={}, queues={}, waiting=waiting))
    result = run_scenario(loaded, core)
    assert [str(m) for m in result.mismatches] == [
        "job j: reason expected no-room, actual queue-limit",
        "job k: reason expected none, actual no-room",
    ]
