"""Ray Tune under a queue: each trial is a workload of its own, the queue decides how many
run at once, and a trial preempted by higher-priority work is paused with its checkpoint
and resumed from it."""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import kai_ray
import kai_ray.tune

from .conftest import Gate, wait_until

ray = pytest.importorskip("ray")
tune = pytest.importorskip("ray.tune")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def intervals(sched: Any, name: str) -> list[tuple[float, float]]:
    """When each workload called `name` was running (admitted to its end)."""
    out = []
    for w in sched.list():
        if w["name"] != name:
            continue
        history = sched.info(w["id"])["history"]
        spans = [h[0] for h in history if h[2] == "Running" or h[1] == "Running"]
        out.extend(zip(spans[::2], spans[1::2], strict=False))
    return out


def trainable(config: dict[str, Any]) -> None:
    time.sleep(1.0)
    tune.report({"score": config["x"] * 10})


def test_trials_are_workloads_and_the_queue_decides_how_many_run(
    start_scheduler: Any, tmp_path: Path
) -> None:
    # A limit of 4 GPUs: one trial of 4 GPUs at a time, though 12 are free.
    sched = start_scheduler(
        [{"name": "sweep", "resources": {"gpu": {"quota": 0, "limit": 4}, "cpu": {"quota": -1}}}]
    )
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"gpu": 4, "cpu": 0}),
        param_space={"x": tune.grid_search([1, 2, 3])},
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="limit", verbose=0),
    )
    results = kai_ray.tune.fit(tuner, queue="sweep", priority="train")
    assert sorted(r.metrics["score"] for r in results) == [10, 20, 30]
    spans = sorted(intervals(sched, "tune-trial"))
    assert len(spans) == 3  # one workload per trial
    assert all(a[1] <= b[0] + 1e-3 for a, b in itertools.pairwise(spans))  # never two at once
    assert {w["queue"] for w in sched.list() if w["name"] == "tune-trial"} == {"sweep"}


def checkpointed(config: dict[str, Any]) -> None:
    """Counts steps, checkpointing each; records where it started from."""
    from ray.tune import Checkpoint

    gate = config["gate"]
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        start = int((Path(ckpt.path) / "step").read_text())
    ray.get(gate.record.remote("start", start))
    step = start
    while not ray.get(gate.is_open.remote("done")):
        step += 1
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "step").write_text(str(step))
            tune.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
        time.sleep(0.2)


def serve(gate: Any) -> str:
    gate.record.remote("served", time.time())
    return "served"


def test_a_preempted_trial_is_paused_with_its_checkpoint_then_resumed(
    start_scheduler: Any, tmp_path: Path
) -> None:
    import threading

    sched = start_scheduler([{"name": "a", "resources": {"gpu": {"quota": 12}, "cpu": {"quota": -1}}}])
    gate = Gate.remote()
    tuner = tune.Tuner(
        tune.with_resources(checkpointed, tune.PlacementGroupFactory([{"GPU": 4, "CPU": 0}] * 3)),
        param_space={"gate": gate},
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="preempt", verbose=0),
    )
    out: dict[str, Any] = {}

    def sweep() -> None:
        try:
            out["results"] = kai_ray.tune.fit(tuner, queue="a", grace_period=20)
        except BaseException as exc:  # shown by the assertion below
            out["error"] = exc

    thread = threading.Thread(target=sweep)
    thread.start()

    def entries(key: str) -> list[Any]:
        return [v for k, v in ray.get(gate.entries.remote()) if k == key]

    wait_until(lambda: entries("start"), timeout=90, what="the trial started")
    time.sleep(2)  # some steps, each checkpointed
    urgent = kai_ray.workload(queue="a", priority="inference", num_gpus=4, num_cpus=0)(serve)
    assert urgent.submit(gate).result(90) == "served"  # the trial made room
    starts = wait_until(lambda: len(entries("start")) >= 2 and entries("start"), timeout=90, what="resumed")
    assert starts[0] == 0 and starts[1] > 0  # paused at a checkpoint, resumed from it
    ray.get(gate.release.remote("done"))
    thread.join(120)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    (result,) = list(out["results"])
    assert result.error is None and result.metrics["step"] >= starts[1]
    trials = [w for w in sched.list() if w["name"] == "tune-trial"]
    assert len(trials) == 2 and all(w["state"] == "Succeeded" for w in trials)  # paused, not failed
    assert any(w["preemptions"] == 1 for w in trials)
