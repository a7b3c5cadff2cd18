"""Priority preemption inside a queue: notice, checkpoint, kill (nothing left hanging),
re-queue, resume from the checkpoint; and failing instead when asked to."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

import kai_ray

from .conftest import Gate, groups_of, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(150)]

ONE_QUEUE = [{"name": "a", "resources": {"gpu": {"quota": 12}, "cpu": {"quota": -1}}}]


@ray.remote(num_gpus=1, num_cpus=0, max_restarts=-1, max_task_retries=-1)
class Helper:
    """An actor the training body starts in its reservation. It may restart forever: only
    a kill of its owner (the body) stops it for good."""

    def pid(self) -> int:
        return os.getpid()


def train(gate: Any, ckpt: str) -> int:
    path = Path(ckpt)
    step = int(path.read_text()) if path.exists() else 0
    gate.record.remote("start", step)
    helper = Helper.remote()
    gate.record.remote("helper_pid", ray.get(helper.pid.remote()))
    while not ray.get(gate.is_open.remote("done")):
        notice = kai_ray.preemption_notice()
        if notice is not None:
            path.write_text(str(step))  # checkpoint, then wait for the end
            gate.record.remote("checkpoint", step)
            time.sleep(60)
        time.sleep(0.05)
        step += 1
        if step == 3:
            gate.record.remote("stepped", step)  # some steps done: worth a checkpoint
    return step


def serve(gate: Any) -> str:
    gate.record.remote("inference", time.time())
    while not ray.get(gate.is_open.remote("inference")):
        time.sleep(0.05)
    return "served"


def entries(gate: Any, key: str) -> list[Any]:
    return [v for k, v in ray.get(gate.entries.remote()) if k == key]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_higher_priority_preempts_with_notice_then_victim_resumes(
    start_scheduler: Any, tmp_path: Path
) -> None:
    start_scheduler(ONE_QUEUE)
    gate = Gate.remote()
    trainer = kai_ray.workload(
        queue="a",
        priority="train",
        workers=3,
        resources_per_worker={"GPU": 4, "CPU": 1},
        grace_period=3.0,
    )(train)
    h_train = trainer.submit(gate, str(tmp_path / "ckpt"))
    assert h_train.wait_admitted(30)["state"] == "Running"
    # Some steps first, however slow the machine: a notice at step 0 would checkpoint nothing.
    wait_until(lambda: entries(gate, "stepped"), what="training stepped")
    (helper_pid,) = entries(gate, "helper_pid")

    inference = kai_ray.workload(
        queue="a", priority="inference", workers=1, resources_per_worker={"GPU": 4, "CPU": 1}
    )(serve)
    h_inf = inference.submit(gate)
    # Notice first: the victim checkpoints inside its grace period, still holding its group.
    (ckpt_step,) = wait_until(lambda: entries(gate, "checkpoint"), what="checkpoint on notice")
    assert ckpt_step > 0
    assert h_train.status() == "Preempting" and groups_of(h_train.id)
    assert h_inf.status() == "Queued"
    # Then the kill, and the preemptor runs.
    assert h_inf.wait_admitted(30)["state"] == "Running"
    assert h_train.status() == "Queued" and groups_of(h_train.id) == []
    assert h_train.info()["preemptions"] == 1
    # Nothing of the victim hangs: its restartable actor died with its owner, for good.
    wait_until(lambda: not pid_alive(helper_pid), timeout=10, what="helper killed")
    time.sleep(1.0)
    helpers = [
        a for a in ray._private.state.state.actor_table(None).values() if a["ActorClassName"] == "Helper"
    ]
    assert helpers and all(a["State"] == "DEAD" for a in helpers)

    ray.get(gate.release.remote("inference"))
    assert h_inf.result(30) == "served"
    assert h_train.wait_admitted(30)["state"] == "Running"  # re-admitted once capacity is back
    starts = wait_until(lambda: entries(gate, "start")[1:] and entries(gate, "start"))
    assert starts == [0, ckpt_step]  # resumed from its checkpoint
    ray.get(gate.release.remote("done"))
    assert h_train.result(30) >= ckpt_step
    states = [h[2] for h in h_train.info()["history"]]
    assert states == [
        "Queued",
        "Admitting",
        "Running",
        "Preempting",
        "Queued",
        "Admitting",
        "Running",
        "Succeeded",
    ]


def test_preempted_workload_fails_with_a_clear_error_when_asked(start_scheduler: Any) -> None:
    start_scheduler(ONE_QUEUE)
    gate = Gate.remote()
    victim = kai_ray.workload(
        queue="a",
        priority="train",
        workers=3,
        resources_per_worker={"GPU": 4},
        grace_period=0.0,
        on_preempt="fail",
    )(serve)
    h_victim = victim.submit(gate)
    assert h_victim.wait_admitted(30)["state"] == "Running"
    wait_until(lambda: entries(gate, "inference"), what="victim running")
    preemptor = kai_ray.workload(queue="a", priority="inference", resources_per_worker={"GPU": 2})(
        lambda: "ok"
    )
    assert preemptor() == "ok"
    with pytest.raises(kai_ray.WorkloadPreempted, match="preempted"):
        h_victim.result(30)
    assert h_victim.status() == "Failed"
