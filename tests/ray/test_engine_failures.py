"""One workload's failure in the backend stays that workload's: the others are admitted in
the same cycle, and the failed one is re-queued with back-off or failed, with the error
in its reason. The engine with in-memory ports and the real core; failures injected."""

from __future__ import annotations

import pytest

from kai_ray.ray.engine import MAX_UNEXPECTED_FAILURES, SubmitError
from kai_ray.ray.jobs import job_error
from kai_ray.ray.ports import ActionFailed
from kai_ray.ray.workload import State

from .fakes import FakeJobs, make, spec

GPU1 = {"GPU": 1, "CPU": 1}
AGENT_DOWN = RuntimeError(
    "Request failed with status code 500: No available agent to submit job, please try again later.."
)


def job(**kw: object) -> object:
    return spec(kind="job", entrypoint="python -c pass", resources_per_worker=GPU1, **kw)


def test_a_group_ray_refuses_requeues_that_workload_and_admits_the_others() -> None:
    engine, backend, _ = make()
    backend.fail_create["bad"] = RuntimeError("bundle refused")
    for wid in ("first", "bad", "last"):
        engine.submit(wid, spec(resources_per_worker=GPU1), 0)
    engine.step(1)
    bad = engine.workloads["bad"]
    assert engine.workloads["first"].state is State.ADMITTING
    assert engine.workloads["last"].state is State.ADMITTING
    assert bad.state is State.QUEUED
    assert "reserving its placement group failed: RuntimeError: bundle refused" in bad.reason
    assert "next try in 2s (1 failed in a row)" in bad.reason
    engine.step(2)
    assert {engine.workloads[w].state for w in ("first", "last")} == {State.RUNNING}
    assert bad.state is State.QUEUED and bad.retry_at == 3  # backing off: not tried at 2


def test_an_unexpected_error_that_keeps_coming_fails_the_workload() -> None:
    engine, backend, _ = make()
    backend.fail_create["bad"] = RuntimeError("bundle refused")
    engine.submit("bad", spec(resources_per_worker=GPU1), 0)
    now = 1.0
    for _ in range(MAX_UNEXPECTED_FAILURES):
        engine.step(now)
        now = max(now, engine.workloads["bad"].retry_at or now) + 0.01
    bad = engine.workloads["bad"]
    assert bad.state is State.FAILED, bad.history
    assert bad.reason.startswith("failed while reserving its placement group: RuntimeError: bundle refused")
    assert bad.attempt == MAX_UNEXPECTED_FAILURES  # tried that often, no more
    assert backend.groups == {}


def test_a_permanent_job_error_fails_that_job_at_once_and_the_next_job_runs() -> None:
    jobs = FakeJobs()
    engine, backend, _ = make(jobs=jobs)
    jobs.fail["bad"] = [job_error(ValueError("directory /no/such/dir must be an existing directory"))] * 9
    engine.submit("bad", job(), 0)
    engine.step(1)
    engine.step(2)
    bad = engine.workloads["bad"]
    assert bad.state is State.FAILED
    assert "Ray refused the job's runtime environment: directory /no/such/dir" in bad.reason
    assert backend.groups == {}  # its reservation was given back
    engine.submit("good", job(), 3)
    engine.step(3)
    engine.step(4)
    assert engine.workloads["good"].state is State.RUNNING and jobs.submitted == ["good-1"]


def test_job_agent_not_up_yet_is_retried_with_back_off() -> None:
    jobs = FakeJobs()
    engine, backend, _ = make(jobs=jobs)
    jobs.fail["w"] = [job_error(AGENT_DOWN), job_error(AGENT_DOWN)]  # then it goes through
    engine.submit("w", job(), 0)
    engine.step(1)
    engine.step(2)
    w = engine.workloads["w"]
    assert w.state is State.QUEUED and "No available agent" in w.reason and "next try in 2s" in w.reason
    assert backend.groups == {}
    engine.step(4)
    engine.step(5)
    assert w.state is State.QUEUED and "next try in 4s (2 failed in a row)" in w.reason
    engine.step(9)
    engine.step(10)
    assert w.state is State.RUNNING and jobs.submitted == ["w-3"] and w.failed_admissions == 0


@pytest.mark.parametrize(
    ("error", "permanent", "says"),
    [
        (AGENT_DOWN, False, "Ray could not take the job now"),
        (RuntimeError("Request failed with status code 400: bad entrypoint."), True, "refused the job"),
        (TypeError("env_vars must be strings"), True, "runtime environment"),
        (ConnectionError("connection refused"), False, "could not take the job now"),
    ],
)
def test_ray_job_errors_are_classified(error: Exception, permanent: bool, says: str) -> None:
    failed = job_error(error)
    assert isinstance(failed, ActionFailed) and failed.permanent is permanent and says in str(failed)


def test_a_failed_release_does_not_block_preemption_and_the_orphan_is_swept() -> None:
    engine, backend, _ = make(nodes=1)
    engine.submit("low", spec(grace_period=0), 0)
    engine.step(1)
    engine.step(2)
    backend.fail_remove["low"] = RuntimeError("GCS busy")
    engine.submit("high", spec(priority=125, preemptible=False), 3)
    engine.step(3)
    low = engine.workloads["low"]
    assert low.state is State.QUEUED and "kai-ray/low/1" in backend.groups  # its removal failed
    del backend.fail_remove["low"]
    assert engine.sweep_orphans() == ["kai-ray/low/1"] and "kai-ray/low/1" not in backend.groups


def test_a_workload_the_core_cannot_be_told_about_leaves_the_others_scheduled() -> None:
    engine, _, _ = make()
    engine.submit("broken", spec(resources_per_worker=GPU1), 0)
    engine.submit("fine", spec(resources_per_worker=GPU1), 0)
    engine.workloads["broken"].spec.resources_per_worker = {"GPU": "lots"}  # type: ignore[dict-item]
    engine.step(1)
    assert engine.workloads["fine"].state is State.ADMITTING
    broken = engine.workloads["broken"]
    assert broken.state is State.QUEUED and "describing it to the scheduler failed" in broken.reason


def test_a_failed_ray_job_points_at_its_logs() -> None:
    jobs = FakeJobs()
    engine, _, _ = make(jobs=jobs)
    engine.submit("w", job(), 0)
    engine.step(1)
    engine.step(2)
    jobs.statuses["w-1"] = "FAILED"
    engine.step(3)
    w = engine.workloads["w"]
    assert w.state is State.FAILED
    assert w.reason == "failed: Ray job w-1 FAILED (exit code 3); its output: `kai-ray job logs w`"


def test_the_same_id_is_the_same_workload_or_refused() -> None:
    engine, _, _ = make()
    first = engine.submit("w", spec(resources_per_worker={"GPU": 1, "memory": "1Gi"}), 0)
    again = engine.submit("w", spec(resources_per_worker={"GPU": 1, "memory": 2**30}), 1)
    assert again is first  # a retried call
    with pytest.raises(SubmitError, match="workload id 'w' is taken by another workload"):
        engine.submit("w", spec(resources_per_worker={"GPU": 2}), 2)


def test_a_running_workload_is_not_stopped_because_looking_at_it_failed() -> None:
    engine, backend, _ = make()
    engine.submit("w", spec(workers=4, min_workers=2, resources_per_worker=GPU1), 0)
    engine.step(1)
    engine.step(2)
    w = engine.workloads["w"]
    assert w.state is State.RUNNING and len(w.slots) == 4
    for s in w.slots.values():
        s.ready = False  # surplus not seen ready yet: the next pass asks Ray again

    def busy(name: str) -> bool:
        raise RuntimeError("GCS busy")

    backend.is_ready = busy  # type: ignore[method-assign]
    engine.step(3)
    assert w.state is State.RUNNING and w.preemptions == 0 and len(backend.groups) == 3
