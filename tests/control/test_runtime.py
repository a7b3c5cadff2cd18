"""Max runtime and run-time estimates in the controller (Ray's and the simulator's
lifecycle): the notice, the grace period, the stop and its reason; earlier runs counted;
queue defaults; the history the forecast learns from; bad input refused."""

from __future__ import annotations

import pytest

from kai_ray.control import State, SubmitError
from kai_ray.core import QueueInfo, SchedulerConfig
from tests.control.harness import QUEUES, make


def test_at_its_max_runtime_it_gets_its_notice_then_is_stopped_with_the_reason() -> None:
    h = make(nodes=1)
    h.submit("w", max_runtime="100s", grace_period=5)
    h.at(0).step().step()
    assert h.w("w").state is State.RUNNING
    assert h.controller.next_deadline() == 100.0  # the actor's timer wakes it then
    h.at(99).step()
    assert h.w("w").state is State.RUNNING
    h.at(100).step()
    w = h.w("w")
    assert w.state is State.PREEMPTING
    assert h.executor.notices["w"] == {
        "reason": "stopped: it ran past its max runtime of 1m40s",
        "deadline": 105.0,
        "attempt": 1,
    }
    h.at(105).step()
    assert w.state is State.FAILED
    assert w.reason == w.error == "stopped: it ran past its max runtime of 1m40s"
    assert not h.executor.groups  # its reservation is given back


def test_a_workload_that_finishes_in_its_grace_period_succeeded() -> None:
    h = make(nodes=1)
    h.submit("w", max_runtime=100, grace_period=30)
    h.at(0).step().step().at(100).step()
    h.controller.finish("w", 1, ok=True)
    assert h.w("w").state is State.SUCCEEDED


def test_runs_before_a_preemption_count_against_the_max_runtime() -> None:
    h = make(nodes=1)
    h.submit("w", max_runtime=100, grace_period=0, priority=50)
    h.at(0).step().step()
    h.submit("vip", priority=125, preemptible=False)
    h.at(60).step()  # preempted after 60 s of its 100
    assert h.w("w").state is State.QUEUED and h.w("w").ran == 60.0
    h.controller.cancel("vip")
    h.at(200).step().step()
    assert h.w("w").state is State.RUNNING
    h.at(239).step()
    assert h.w("w").state is State.RUNNING
    h.at(240).step()
    assert h.w("w").state is State.FAILED


def test_without_follow_the_simulators_steps_still_stop_it() -> None:
    h = make(nodes=1)
    h.submit("w", max_runtime=50, grace_period=0)
    h.at(0).step().step()
    h.controller.step(refresh_nodes=False, follow=False)
    h.at(50)
    h.controller.step(refresh_nodes=False, follow=False)
    assert h.w("w").state is State.FAILED


def test_the_queues_default_applies_to_what_declares_none() -> None:
    queues = [QueueInfo("a", quota=(-1, -1, -1), max_runtime=600.0)]
    h = make(nodes=2, queues=queues)
    assert h.submit("plain").spec.max_runtime == 600.0
    assert h.submit("own", max_runtime=60).spec.max_runtime == 60.0


def test_a_restarted_scheduler_still_stops_it() -> None:
    h = make(nodes=1)
    h.submit("w", max_runtime=100, grace_period=0)
    h.at(0).step().step()
    h2 = h.restarted()
    assert h2.controller.next_deadline() == 100.0
    h2.at(100).step()
    assert h2.w("w").state is State.FAILED


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("max_runtime", -1, "max_runtime=-1: must be a run time above 0"),
        ("max_runtime", "soon", "max_runtime='soon': 'soon' is not a duration"),
        ("expected_runtime", 0, "expected_runtime=0: must be a run time above 0"),
    ],
)
def test_a_bad_run_time_is_refused_naming_the_field_and_nothing_admitted_is_lost(
    field: str, value: object, says: str
) -> None:
    h = make(nodes=1)
    h.submit("kept")
    h.at(0).step().step()
    with pytest.raises(SubmitError, match=says):
        h.submit("bad", **{field: value})
    assert "bad" not in h.controller.workloads
    assert h.w("kept").state is State.RUNNING


def test_what_a_shape_took_before_is_its_forecast_run_time() -> None:
    h = make(nodes=1)
    h.submit("first")  # no run time declared anywhere
    h.at(0).step().step()
    h.submit("second")
    h.submit("third")
    h.at(1).step().step()
    assert h.controller.info("third")["eta"]["at"] is None  # nothing known yet
    h.at(300)
    h.controller.finish("first", 1, ok=True)  # ran 300 s
    h.step().step()
    assert h.w("second").state is State.RUNNING
    h.controller.forecaster.made_at = float("-inf")  # not waiting out its period
    eta = h.controller.info("third")["eta"]
    assert eta["at"] == 600.0 and "history" in eta["text"]


def test_queues_used_by_these_tests_have_no_defaults() -> None:
    assert all(q.max_runtime is None and q.expected_runtime is None for q in QUEUES)


def test_a_gang_that_waited_long_reserves_and_only_quick_work_backfills() -> None:
    """Reservations through the controller (Ray's and the simulator's): the reasons say
    who holds the room; a job that ends before the gang's expected start runs there."""
    h = make(nodes=2, config=SchedulerConfig(reserve_after_s=600.0))
    h.submit("full", expected_runtime=3600)
    h.submit("half", resources_per_worker={"GPU": 2, "CPU": 1}, expected_runtime=7200)
    h.at(0).step().step()
    assert {h.w("full").state, h.w("half").state} == {State.RUNNING}
    h.submit("big", workers=2, strategy="STRICT_SPREAD")
    h.at(10).step()
    assert "reserved" not in (h.w("big").reason or "")  # not waited long yet
    h.submit("slow", resources_per_worker={"GPU": 1, "CPU": 1})
    h.submit("quick", resources_per_worker={"GPU": 1, "CPU": 1}, expected_runtime=600)
    h.at(700).step().step()
    assert h.w("big").state is State.QUEUED
    assert "room is reserved for it on 2 nodes (n0, n1) as running work ends" in (h.w("big").reason or "")
    assert h.w("slow").reason_code == "reserved"
    assert "reserved for gang big" in (h.w("slow").reason or "")
    assert h.w("quick").state in (State.ADMITTING, State.RUNNING)
