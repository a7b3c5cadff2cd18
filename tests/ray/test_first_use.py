"""What a new user meets first, on a real Ray cluster: one bad job never stops the
scheduler, Ray jobs keep their quoting and say where their output is, the job commands,
starting the scheduler from the shell, and clear errors before it runs."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import kai_ray
from kai_ray.api.workloads import make_spec
from kai_ray.cli import main

from .conftest import wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

QUEUE = [{"name": "a", "resources": {"gpu": {"quota": -1}, "cpu": {"quota": -1}}}]


def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def submit(capsys: Any, *args: str) -> str:
    code, out, err = cli(capsys, "job", "submit", "--queue", "a", "--cpus", "0.1", "--json", *args)
    assert code == 0, err
    return str(json.loads(out)["id"])


def state_of(wid: str) -> str:
    return str(kai_ray.get_scheduler().info(wid)["state"])


def test_one_bad_job_never_stops_the_others(start_scheduler: Any, capsys: Any) -> None:
    sched = start_scheduler(QUEUE)
    # A working_dir that does not exist is refused where it is submitted, at once.
    code, _, err = cli(
        capsys, "job", "submit", "--queue", "a", "--working-dir", "/no/such/dir", "--", "python", "-c", "pass"
    )
    assert code == 2 and "working_dir '/no/such/dir': no such directory here" in err
    assert sched.list() == []
    # One that reaches the scheduler anyway (an old client, a path only the submitter
    # had) fails alone, with Ray's words and the fix, when it is admitted.
    bad = make_spec("a", kind="job", entrypoint="python -c pass", runtime_env={"working_dir": "/no/such/dir"})
    ray.get(sched.handle.submit.remote("bad-job", dataclasses.asdict(bad)))
    good = submit(capsys, "--", sys.executable, "-c", "print('fine')")
    wait_until(lambda: state_of("bad-job") == "Failed", timeout=60, what=lambda: sched.info("bad-job"))
    reason = sched.info("bad-job")["reason"]
    assert "Ray refused the job's runtime environment" in reason and "/no/such/dir" in reason
    wait_until(lambda: state_of(good) == "Succeeded", timeout=90, what=lambda: sched.info(good))


def test_quoting_logs_status_and_a_failure_that_points_at_its_output(
    start_scheduler: Any, capsys: Any
) -> None:
    start_scheduler(QUEUE)
    script = "import os, sys; print('x is', os.environ['X']); print(sys.argv[1:]); sys.exit(3)"
    wid = submit(
        capsys,
        "--submission-id",
        "my-job",
        "--runtime-env-json",
        '{"env_vars": {"X": "from the runtime env"}}',
        "--",
        sys.executable,
        "-c",
        script,
        "two words",
        "it's",
    )
    assert wid == "my-job"
    wait_until(lambda: state_of(wid) == "Failed", timeout=90, what=lambda: kai_ray.get_scheduler().info(wid))
    reason = kai_ray.get_scheduler().info(wid)["reason"]
    assert reason == "failed: Ray job my-job-1 FAILED (exit code 3); its output: `kai-ray job logs my-job`"
    code, out, _ = cli(capsys, "job", "logs", "my-job")
    assert code == 0 and "x is from the runtime env" in out and "['two words', \"it's\"]" in out
    code, out, _ = cli(capsys, "job", "status", "my-job")
    assert code == 0 and out.startswith("my-job: Failed") and "Ray job my-job-1: FAILED" in out
    # The same id for another job is refused, naming the fix.
    code, _, err = cli(capsys, "job", "submit", "--queue", "a", "--submission-id", "my-job", "--", "true")
    assert code == 2 and "workload id 'my-job' is taken by another workload" in err
    code, _, err = cli(capsys, "job", "logs", "nope")
    assert code == 2 and "no workload 'nope'" in err


def test_follow_and_stop(start_scheduler: Any, capsys: Any, tmp_path: Path) -> None:
    start_scheduler(QUEUE)
    wid = submit(capsys, "--", sys.executable, "-c", "import time; print('one'); time.sleep(2); print('two')")
    code, out, _ = cli(capsys, "job", "logs", wid, "--follow")
    assert code == 0 and out.index("one") < out.index("two") and f"==> {wid} Succeeded" in out

    flag = tmp_path / "never"
    wid = submit(
        capsys,
        "--",
        sys.executable,
        "-c",
        f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.1)",
    )
    wait_until(lambda: state_of(wid) == "Running", timeout=60)
    code, out, _ = cli(capsys, "job", "stop", wid)
    assert code == 0 and out.startswith(f"{wid}: Cancelled") and f"Ray job {wid}-1 stopped" in out
    from ray.job_submission import JobSubmissionClient

    jobs = JobSubmissionClient(ray.get_runtime_context().gcs_address)
    wait_until(lambda: jobs.get_job_status(f"{wid}-1").value == "STOPPED", timeout=30)
    flag.write_text("")  # should Ray's stop ever miss the process, it ends by itself


NOTICE_JOB = """\
import kai_ray
print("NOTICE", kai_ray.preemption_notice(), flush=True)  # before any ray.init()
"""


def test_a_job_may_ask_for_its_notice_before_connecting(
    start_scheduler: Any, capsys: Any, tmp_path: Path
) -> None:
    start_scheduler(QUEUE)
    script = tmp_path / "job.py"
    script.write_text(NOTICE_JOB)
    wid = submit(capsys, "--", sys.executable, str(script))
    wait_until(lambda: state_of(wid) in ("Succeeded", "Failed"), timeout=90)
    _, out, _ = cli(capsys, "job", "logs", wid)
    assert state_of(wid) == "Succeeded", out
    assert "NOTICE None" in out


def test_starting_the_scheduler_from_the_shell(start_scheduler: Any, capsys: Any, tmp_path: Path) -> None:
    # Nothing runs yet: Python and the shell say how to start it.
    with pytest.raises(kai_ray.SchedulerNotRunning, match=r"call kai_ray\.init\(\) first.*kai-ray start"):
        kai_ray.workload(queue="a")(print).submit()
    code, _, err = cli(capsys, "queue", "list")
    assert code == 2 and "kai-ray start" in err
    queues = tmp_path / "queues.yaml"
    queues.write_text("- name: ml\n  resources:\n    gpu: {quota: 4}\n")
    code, out, _ = cli(capsys, "start", "--queues", str(queues))
    assert code == 0 and out.startswith("kai-ray scheduler started") and "queues: ml" in out
    more = tmp_path / "more.yaml"
    more.write_text("- name: ml\n  resources:\n    gpu: {quota: 8}\n- name: web\n")
    code, out, _ = cli(capsys, "start", "--queues", str(more))
    assert code == 0 and "already runs; queues: added web; updated ml" in out
    assert [q["name"] for q in kai_ray.get_scheduler().queues()] == ["ml", "web"]


def test_init_adds_queues_and_says_what_it_changed(start_scheduler: Any, capsys: Any, tmp_path: Path) -> None:
    start_scheduler([{"name": "team-b", "resources": {"gpu": {"quota": 4}}}])
    capsys.readouterr()
    sched = kai_ray.init(queues=[{"name": "ml", "resources": {"gpu": {"quota": 4}}}])
    assert [q["name"] for q in sched.queues()] == ["team-b", "ml"]  # another team's queue stays
    assert "kai-ray: queues of the running scheduler: added ml; kept team-b" in capsys.readouterr().err

    # A queue that holds a workload cannot be removed, by delete or by prune.
    wid = sched.submit(make_spec("team-b", kind="block"))
    wait_until(lambda: sched.info(wid)["state"] == "Running")
    code, _, err = cli(capsys, "queue", "delete", "team-b")
    assert code == 2 and f"queue 'team-b' still holds workloads (team-b: {wid})" in err
    only_ml = tmp_path / "ml.yaml"
    only_ml.write_text("- name: ml\n  resources:\n    gpu: {quota: 4}\n")
    code, _, err = cli(capsys, "queue", "apply", "-f", str(only_ml), "--prune")
    assert code == 2 and "still holds workloads" in err
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    code, _, err = cli(capsys, "queue", "apply", "-f", str(empty))
    assert code == 2 and "holds no queues" in err
    assert [q["name"] for q in sched.queues()] == ["team-b", "ml"]  # nothing changed
    sched.cancel(wid)
    code, out, _ = cli(capsys, "queue", "apply", "-f", str(only_ml), "--prune")
    assert code == 0 and out.strip() == "queues: unchanged ml; removed team-b"


def test_an_id_used_by_a_forgotten_workload_is_not_mistaken_for_it(start_scheduler: Any, capsys: Any) -> None:
    from .conftest import reset_scheduler

    start_scheduler(QUEUE)
    submit(capsys, "--submission-id", "again", "--", sys.executable, "-c", "print('first')")
    wait_until(lambda: state_of("again") == "Succeeded", timeout=90)
    reset_scheduler()  # the scheduler's state is gone; Ray still has the job again-1
    start_scheduler(QUEUE)
    submit(capsys, "--submission-id", "again", "--", sys.executable, "-c", "print('second')")
    wait_until(lambda: state_of("again") == "Failed", timeout=90)
    reason = kai_ray.get_scheduler().info("again")["reason"]
    assert "Ray already has a job again-1 from an earlier workload with the id 'again'" in reason
