"""One workload's failure in the backend stays that workload's: the others are admitted in
the same cycle, and the failed one is re-queued with back-off or failed, with the error
in its reason. The controller on in-memory ports and the real core; failures injected."""

from __future__ import annotations

from typing import Any

from kai_ray.control import BackendError, State
from kai_ray.control.table import MAX_UNEXPECTED_FAILURES

from .harness import Harness, make

GPU1 = {"GPU": 1, "CPU": 1}
AGENT_DOWN = BackendError("Ray could not take the job now: No available agent", permanent=False)


def job(h: Harness, wid: str, **kw: Any) -> Any:
    return h.submit(wid, kind="job", entrypoint="python -c pass", resources_per_worker=GPU1, **kw)


def test_a_reservation_refused_requeues_that_workload_and_admits_the_others() -> None:
    h = make()
    h.executor.fail_reserve["bad"] = RuntimeError("bundle refused")
    for wid in ("first", "bad", "last"):
        h.submit(wid, resources_per_worker=GPU1)
    h.at(1).step()
    bad = h.w("bad")
    assert h.w("first").state is State.ADMITTING and h.w("last").state is State.ADMITTING
    assert bad.state is State.QUEUED
    assert "making its reservation failed: RuntimeError: bundle refused" in bad.reason
    assert "next try in 2s (1 failed in a row)" in bad.reason
    h.at(2).step()
    assert {h.w(w).state for w in ("first", "last")} == {State.RUNNING}
    assert bad.state is State.QUEUED and bad.retry_at == 3  # backing off: not tried at 2


def test_an_unexpected_error_that_keeps_coming_fails_the_workload() -> None:
    h = make()
    h.executor.fail_reserve["bad"] = RuntimeError("bundle refused")
    bad = h.submit("bad", resources_per_worker=GPU1)
    now = 1.0
    for _ in range(MAX_UNEXPECTED_FAILURES):
        h.at(now).step()
        now = max(now, bad.retry_at or now) + 0.01
    assert bad.state is State.FAILED, bad.history
    assert bad.reason.startswith("failed while making its reservation: RuntimeError: bundle refused")
    assert bad.attempt == MAX_UNEXPECTED_FAILURES and h.executor.groups == {}


def test_a_permanent_start_error_fails_that_job_at_once_and_the_next_job_runs() -> None:
    h = make()
    refused = BackendError("Ray refused the job's runtime environment: no such dir", permanent=True)
    h.executor.fail_start["bad"] = [refused] * 9
    bad = job(h, "bad")
    h.at(1).step()
    h.at(2).step()
    assert bad.state is State.FAILED
    assert "Ray refused the job's runtime environment: no such dir" in bad.reason
    assert h.executor.groups == {}  # its reservation was given back
    good = job(h, "good")
    h.at(3).step()
    h.at(4).step()
    assert good.state is State.RUNNING and list(h.executor.runs) == ["good-1"]


def test_a_transient_start_error_is_retried_with_back_off() -> None:
    h = make()
    h.executor.fail_start["w"] = [AGENT_DOWN, AGENT_DOWN]  # then it goes through
    w = job(h, "w")
    h.at(1).step()
    h.at(2).step()
    assert w.state is State.QUEUED and "No available agent" in w.reason and "next try in 2s" in w.reason
    assert h.executor.groups == {}
    h.at(4).step()
    h.at(5).step()
    assert w.state is State.QUEUED and "next try in 4s (2 failed in a row)" in w.reason
    h.at(9).step()
    h.at(10).step()
    assert w.state is State.RUNNING and list(h.executor.runs) == ["w-3"] and w.failed_admissions == 0


def test_a_failed_release_does_not_block_preemption_and_the_orphan_is_swept() -> None:
    h = make(nodes=1)
    low = h.submit("low", grace_period=0)
    h.at(1).step()
    h.at(2).step()
    h.executor.fail_release["low"] = RuntimeError("GCS busy")
    h.submit("high", priority=125, preemptible=False)
    h.at(3).step()
    assert low.state is State.QUEUED and "kai-ray/low/1" in h.executor.groups  # its release failed
    del h.executor.fail_release["low"]
    assert h.controller.sweep_orphans() == ["kai-ray/low/1"] and "kai-ray/low/1" not in h.executor.groups


def test_a_workload_the_core_cannot_be_told_about_leaves_the_others_scheduled() -> None:
    h = make()
    broken = h.submit("broken", resources_per_worker=GPU1)
    fine = h.submit("fine", resources_per_worker=GPU1)
    broken.spec.resources_per_worker = {"GPU": "lots"}  # type: ignore[dict-item]
    h.at(1).step()
    assert fine.state is State.ADMITTING
    assert broken.state is State.QUEUED and "describing it to the scheduler failed" in broken.reason


def test_a_failed_run_points_at_its_output() -> None:
    h = make()
    w = job(h, "w")
    h.at(1).step()
    h.at(2).step()
    h.executor.runs["w-1"] = "FAILED"
    h.at(3).step()
    assert w.state is State.FAILED
    assert w.reason == "failed: run w-1 FAILED (exit code 3); its output: `kai-ray job logs w`"


def test_a_running_workload_is_not_stopped_because_looking_at_it_failed() -> None:
    h = make()
    w = h.submit("w", workers=4, min_workers=2, resources_per_worker=GPU1)
    h.at(1).step()
    h.at(2).step()
    assert w.state is State.RUNNING and len(w.slots) == 4

    def busy(name: str) -> bool:
        raise RuntimeError("GCS busy")

    h.executor.is_ready = busy  # type: ignore[method-assign]
    h.at(3).step()
    assert w.state is State.RUNNING and w.preemptions == 0 and len(h.executor.groups) == 3
