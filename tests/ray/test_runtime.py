"""Time on a real multi-node Ray cluster: a workload past its max runtime gets its
notice and grace period and is stopped with the reason (decorator and `kai-ray job
submit --max-runtime`); a waiting workload's forecast start in handle.eta(), explain and
`job status`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import kai_ray

from .conftest import Gate, groups_of, wait_until
from .test_cli_jobs import run_cli

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(150)]

ONE_QUEUE = [{"name": "a", "resources": {"gpu": {"quota": 12}, "cpu": {"quota": -1}}}]


def overrun(gate: Any) -> str:
    """Runs until told to stop; writes down the notice it gets."""
    gate.record.remote("started", time.time())
    while not ray.get(gate.is_open.remote("stop")):
        notice = kai_ray.preemption_notice()
        if notice is not None:
            gate.record.remote("notice", dict(notice))
            time.sleep(60)  # no checkpoint to write: waits for the end
        time.sleep(0.05)
    return "finished"


def entries(gate: Any, key: str) -> list[Any]:
    return [v for k, v in ray.get(gate.entries.remote()) if k == key]


def test_past_its_max_runtime_it_gets_its_notice_and_is_stopped_with_the_reason(
    start_scheduler: Any,
) -> None:
    start_scheduler(ONE_QUEUE)
    gate = Gate.remote()
    fn = kai_ray.workload(
        queue="a", workers=2, resources_per_worker={"GPU": 4, "CPU": 1}, max_runtime="10s", grace_period=1.5
    )(overrun)
    h = fn.submit(gate)
    assert h.wait_admitted(30)["state"] == "Running"
    (notice,) = wait_until(
        lambda: entries(gate, "notice"),
        timeout=30,
        what=lambda: f"the notice: {h.info()} {ray.get(gate.entries.remote())}",
    )
    assert notice["reason"] == "stopped: it ran past its max runtime of 10s"
    assert h.status() == "Preempting" and groups_of(h.id)  # its grace period: still held
    with pytest.raises(kai_ray.WorkloadFailed, match="ran past its max runtime of 10s") as caught:
        h.result(30)
    assert not isinstance(caught.value, kai_ray.WorkloadPreempted)
    info = h.info()
    assert info["state"] == "Failed" and info["reason"] == "stopped: it ran past its max runtime of 10s"
    (running, preempting, failed) = (h[0] for h in info["history"][-3:])
    assert [h[2] for h in info["history"][-3:]] == ["Running", "Preempting", "Failed"]
    assert preempting - running == pytest.approx(10.0, abs=1.0)  # run time: from admission
    assert failed - preempting == pytest.approx(1.5, abs=1.0)  # then the grace period
    wait_until(lambda: not groups_of(h.id), timeout=10, what="its reservation released")
    # The room went back: another workload gets it.
    assert kai_ray.workload(queue="a", workers=3, resources_per_worker={"GPU": 4})(lambda: "ok")() == "ok"


def _holding(gate: Any, workers: int) -> Any:
    """A workload of `workers` 4-GPU workers, expected to run 2 hours, running until the
    gate says stop."""
    holder = kai_ray.workload(
        queue="a", workers=workers, resources_per_worker={"GPU": 4, "CPU": 1}, expected_runtime="2h"
    )(overrun)
    h = holder.submit(gate)
    assert h.wait_admitted(30)["state"] == "Running"
    return h


def test_a_waiting_workload_says_when_it_is_expected_to_start(start_scheduler: Any, capsys: Any) -> None:
    start_scheduler(ONE_QUEUE)
    gate = Gate.remote()
    h_hold = _holding(gate, workers=3)
    waiting = kai_ray.workload(queue="a", resources_per_worker={"GPU": 4}, expected_runtime=600)(lambda: "ok")
    h = waiting.submit()
    eta = wait_until(lambda: h.eta() if h.position() == 1 else None, timeout=20, what="a forecast")
    assert eta["at"] is not None and 7100 < eta["in_s"] <= 7200
    assert eta["text"] == "expected to start in about 2h (run times: declared)"
    code, out, _ = run_cli(capsys, "explain", h.id)
    assert code == 0
    assert "estimated start: expected to start in about 2h (run times: declared)" in out
    assert "expected run time 10m" in out
    assert h_hold.eta() is None  # it runs
    ray.get(gate.release.remote("stop"))
    assert h.result(30) == "ok"


def test_a_gang_that_waited_reserves_its_room_and_only_quick_work_backfills(start_scheduler: Any) -> None:
    from kai_ray.core import SchedulerConfig

    start_scheduler(ONE_QUEUE, config=SchedulerConfig(reserve_after_s=1.0))
    gate = Gate.remote()
    _holding(gate, workers=2)
    big = kai_ray.workload(queue="a", workers=3, resources_per_worker={"GPU": 4, "CPU": 1})(lambda: "big")
    h_big = big.submit()
    reason = wait_until(
        lambda: "room is reserved for it on" in (r := h_big.info()["reason"] or "") and r,
        timeout=30,
        what=lambda: f"big's reservation: {h_big.info()}",
    )
    assert "room is reserved for it on 3 nodes" in reason
    small = kai_ray.workload(queue="a", resources_per_worker={"GPU": 1, "CPU": 0.5})
    h_slow = small(lambda: "slow").submit()
    wait_until(lambda: h_slow.info()["reason_code"] == "reserved", timeout=30, what=lambda: h_slow.info())
    assert "is reserved for gang" in h_slow.info()["reason"]
    quick = kai_ray.workload(queue="a", resources_per_worker={"GPU": 1, "CPU": 0.5}, expected_runtime=60)
    h_quick = quick(lambda: "quick").submit()
    assert h_quick.result(60) == "quick"  # backfilled: it ends long before the gang's start
    assert h_slow.status() == "Queued" and h_big.status() == "Queued"
    ray.get(gate.release.remote("stop"))
    assert h_big.result(60) == "big"


JOB = """\
import time
while True:
    time.sleep(0.1)
"""


def test_a_job_submitted_with_max_runtime_is_stopped_and_its_status_says_why(
    start_scheduler: Any, tmp_path: Path, capsys: Any
) -> None:
    start_scheduler(ONE_QUEUE)
    script = tmp_path / "forever.py"
    script.write_text(JOB)

    def submit(*flags: str) -> str:
        """A job of all 12 GPUs running `script`; its workload id."""
        argv = ["job", "submit", "--queue", "a", "--gpus", "4", "--cpus", "0.1", "--workers", "3", *flags]
        code, out, err = run_cli(capsys, *argv, "--json", "--", sys.executable, str(script))
        assert code == 0, err
        return str(json.loads(out)["id"])

    wid = submit("--max-runtime", "4s", "--grace-period", "0")
    sched = kai_ray.get_scheduler()
    wait_until(lambda: sched.info(wid)["state"] == "Running", timeout=30)
    second = submit("--expected-runtime", "30m")
    wait_until(lambda: sched.info(second)["position"] == 1, timeout=20)
    _, out, _ = run_cli(capsys, "job", "status", second)
    # the running job has no expected run time: its max runtime bounds it
    assert "estimated start: expected to start in about" in out and "(run times: max runtime)" in out
    wait_until(lambda: sched.info(wid)["state"] == "Failed", timeout=30, what=lambda: sched.info(wid))
    _, out, _ = run_cli(capsys, "job", "status", wid)
    assert f"{wid}: Failed - stopped: it ran past its max runtime of 4s" in out
    assert "max runtime 4s" in out
    from ray.job_submission import JobSubmissionClient

    jobs = JobSubmissionClient(ray.get_runtime_context().gcs_address)
    wait_until(lambda: jobs.get_job_status(f"{wid}-1").value == "STOPPED", timeout=30)
    wait_until(lambda: sched.info(second)["state"] == "Running", timeout=30)
    sched.cancel(second)


def test_bad_run_times_are_refused_at_the_decorator_and_the_cli(start_scheduler: Any, capsys: Any) -> None:
    start_scheduler(ONE_QUEUE)
    with pytest.raises(kai_ray.SubmitError, match="max_runtime='soon': 'soon' is not a duration"):
        kai_ray.workload(queue="a", max_runtime="soon")(lambda: 1)
    code, _, err = run_cli(
        capsys, "job", "submit", "--queue", "a", "--max-runtime", "-5", "--", sys.executable, "-c", "1"
    )
    assert code != 0 and "max_runtime='-5': must be a run time above 0" in err
