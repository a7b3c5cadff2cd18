"""A Ray Train job for kai-ray: submit it with `kai-ray job submit --handoff`.

    kai-ray job submit --queue ml --priority train --workers 2 --gpus 1 --cpus 1 \\
        --grace-period 5 --handoff -- python examples/train/ray_train_job.py --steps 300

kai-ray queues the job and submits it to Ray once admitted; with --handoff it releases
its reservation to the job, and `kai_ray.train_scaling_config()` gives Ray Train the
same workers on the same nodes (label selectors on Ray's node ids), so Train reserves
exactly what kai-ray accounted. The training is data-parallel linear regression (numpy,
generated data, nothing downloaded): every step the workers average their gradients
through a small actor. Worker 0 reports a Ray Train checkpoint every 25 steps and on
kai-ray's preemption notice; on re-admission the job resumes from the latest one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.train import Checkpoint, RunConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

import kai_ray

DIM = 32


@ray.remote(num_cpus=0)
class Averager:
    """Mean of one value per worker per step (an all-reduce good enough for an example),
    and whether any worker has seen kai-ray's preemption notice by that step."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.rounds: dict[int, list[Any]] = {}
        self.noticed: dict[int, bool] = {}
        self.done: dict[int, asyncio.Event] = {}

    async def mean(self, step: int, value: list[float], noticed: bool) -> tuple[list[float], bool]:
        got = self.rounds.setdefault(step, [])
        event = self.done.setdefault(step, asyncio.Event())
        got.append(np.asarray(value))
        self.noticed[step] = self.noticed.get(step, False) or noticed
        if len(got) == self.workers:
            event.set()
        await event.wait()
        return list(np.mean(got, axis=0)), self.noticed[step]


def _latest(storage: Path) -> str | None:
    """The newest checkpoint any earlier attempt of this job reported (each attempt is
    a run of its own under the same storage path)."""
    found = sorted(storage.glob("*/checkpoint_*/state.json"), key=lambda p: p.stat().st_mtime)
    return str(found[-1].parent) if found else None


def train_loop(config: dict[str, Any]) -> None:
    ctx = ray.train.get_context()
    rank, size = ctx.get_world_rank(), ctx.get_world_size()
    rng = np.random.default_rng(rank + 1)
    truth = np.random.default_rng(0).normal(size=DIM)
    x = rng.normal(size=(4096, DIM))
    y = x @ truth + 0.01 * rng.normal(size=len(x))
    step, w = 0, np.zeros(DIM)
    ckpt = ray.train.get_checkpoint()
    if ckpt is None and config["resume"]:
        ckpt = Checkpoint.from_directory(config["resume"])
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = json.loads((Path(d) / "state.json").read_text())
        step, w = state["step"], np.asarray(state["w"])
    if rank == 0:
        print(f"[train] {size} workers, {'resuming at step ' + str(step) if step else 'starting'}",
              flush=True)
    averager = config["averager"]
    while step < config["steps"]:
        grad = x.T @ (x @ w - y) / len(y)
        # Workers poll the notice on their own, so they agree through the all-reduce on
        # the step that checkpoints: Ray Train's report() waits for every worker.
        seen = kai_ray.preemption_notice() is not None
        mean, noticed = ray.get(averager.mean.remote(step, list(grad), seen))
        w = w - 0.05 * np.asarray(mean)
        step += 1
        if step % 25 == 0 or noticed or step == config["steps"]:
            loss = float(np.mean((x @ w - y) ** 2))
            _report(rank, step, w, loss)
        if noticed:
            if rank == 0:
                print(f"[train] preemption notice: checkpointed step {step}", flush=True)
            time.sleep(3600)  # kai-ray stops the job at the deadline
        time.sleep(0.02)


def _report(rank: int, step: int, w: np.ndarray, loss: float) -> None:
    if rank != 0:
        ray.train.report({"step": step, "loss": loss})
        return
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "state.json").write_text(json.dumps({"step": step, "w": list(w)}))
        ray.train.report({"step": step, "loss": loss}, checkpoint=Checkpoint.from_directory(d))
    print(f"[train] step {step} loss {loss:.5f} (checkpoint)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--storage", default="/tmp/kai-ray-ray-train-example")
    args = parser.parse_args()
    ray.init()
    scaling = kai_ray.train_scaling_config()
    storage = Path(args.storage)
    resume = _latest(storage)
    trainer = DataParallelTrainer(
        train_loop,
        train_loop_config={"steps": args.steps, "resume": resume,
                           "averager": Averager.remote(scaling.num_workers)},
        scaling_config=scaling,
        run_config=RunConfig(name=f"linreg-{os.environ.get('KAI_RAY_ATTEMPT', '0')}",
                             storage_path=str(storage)),
    )
    result = trainer.fit()
    print(f"[train] done: {result.metrics}", flush=True)


if __name__ == "__main__":
    main()
