"""The Ray Train and Ray Serve examples as Ray jobs under kai-ray (examples/train,
examples/serve): training is preempted by inference, checkpoints, and resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import kai_ray
from kai_ray.cli import main

from .conftest import wait_until

ray = pytest.importorskip("ray")
pytest.importorskip("ray.train", reason="needs ray[train]")
pytest.importorskip("ray.serve", reason="needs ray[serve]")
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def submit(capsys: Any, *args: str) -> str:
    code = main(["job", "submit", "--json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return str(json.loads(out)["id"])


def test_ray_train_job_is_preempted_by_ray_serve_and_resumes(
    start_scheduler: Any, tmp_path: Path, capsys: Any
) -> None:
    from ray.job_submission import JobSubmissionClient

    start_scheduler([{"name": "ml", "resources": {"gpu": {"quota": 12}, "cpu": {"quota": -1}}}])
    sched = kai_ray.get_scheduler()
    jobs = JobSubmissionClient(ray.get_runtime_context().gcs_address)
    train = submit(
        capsys,
        "--queue",
        "ml",
        "--priority",
        "train",
        "--workers",
        "3",
        "--gpus",
        "4",
        "--cpus",
        "0.5",
        "--grace-period",
        "5",
        "--handoff",
        "--",
        sys.executable,
        str(EXAMPLES / "train" / "ray_train_job.py"),
        "--steps",
        "150",
        "--storage",
        str(tmp_path / "ckpt"),
    )
    first = f"{train}-1"
    wait_until(lambda: sched.info(train)["state"] == "Running", timeout=30, what=lambda: sched.info(train))
    wait_until(
        lambda: "(checkpoint)" in jobs.get_job_logs(first),
        timeout=120,
        what=lambda: jobs.get_job_logs(first)[-2000:],
    )
    serve = submit(
        capsys,
        "--queue",
        "ml",
        "--priority",
        "inference",
        "--workers",
        "1",
        "--gpus",
        "4",
        "--cpus",
        "0.5",
        "--handoff",
        "--",
        sys.executable,
        str(EXAMPLES / "serve" / "serve_app.py"),
        "--seconds",
        "3",
    )
    wait_until(
        lambda: sched.info(serve)["state"] == "Succeeded",
        timeout=120,
        what=lambda: (sched.info(serve), sched.info(train)["reason"]),
    )
    assert "scaling down" in jobs.get_job_logs(f"{serve}-1")
    assert "preemption notice: checkpointed step" in jobs.get_job_logs(first)
    assert jobs.get_job_status(first).value == "STOPPED"
    wait_until(lambda: sched.info(train)["state"] == "Succeeded", timeout=150, what=lambda: sched.info(train))
    info = sched.info(train)
    assert info["preemptions"] == 1 and info["attempt"] == 2
    logs = jobs.get_job_logs(f"{train}-2")
    assert "resuming at step" in logs and "'step': 150" in logs


def test_the_tune_example_runs_its_trials_under_the_queue_limit(
    start_scheduler: Any, ray_cluster: Any
) -> None:
    """examples/tune: 6 trials of one GPU under a queue limit of 4 GPUs, from a driver of
    its own; never more than 4 trials run at once, and every trial is a workload."""
    import subprocess

    sched = start_scheduler()
    script = EXAMPLES / "tune" / "sweep.py"
    out = subprocess.run(
        [sys.executable, str(script), "--address", ray_cluster.address, "--samples", "6", "--steps", "15"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[sweep] 6 trials, 0 failed" in out.stdout
    trials = [sched.info(w["id"]) for w in sched.list() if w["name"] == "tune-trial"]
    assert len(trials) == 6 and {t["queue"] for t in trials} == {"sweeps"}
    events = sorted(
        (h[0], +1 if h[2] == "Running" else -1)
        for t in trials
        for h in t["history"]
        if "Running" in (h[1], h[2])
    )
    running = [sum(d for _, d in events[: i + 1]) for i in range(len(events))]
    assert max(running) <= 4, running
