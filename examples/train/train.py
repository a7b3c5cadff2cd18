"""Data-parallel training under a kai-ray queue that checkpoints on a preemption notice
and resumes from its checkpoint when re-admitted.

The model is a linear regression trained by synchronous SGD over N data-parallel
worker actors (numpy, CPU; the data is generated, nothing is downloaded). The workers
are started by the workload's body, so they run inside its kai-ray reservation.

    python examples/train/train.py --address auto --steps 600
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import ray

import kai_ray

DIM = 32


@ray.remote(num_cpus=1, num_gpus=1)
class Shard:
    """One worker: a shard of the data set, gradients on demand."""

    def __init__(self, seed: int, rows: int = 4096) -> None:
        truth = np.random.default_rng(0).normal(size=DIM)
        rng = np.random.default_rng(seed + 1)
        self.x = rng.normal(size=(rows, DIM))
        self.y = self.x @ truth + 0.01 * rng.normal(size=rows)

    def grad(self, w: np.ndarray) -> tuple[np.ndarray, float]:
        err = self.x @ w - self.y
        return self.x.T @ err / len(self.y), float(np.mean(err**2))


def save(ckpt: Path, step: int, w: np.ndarray) -> None:
    tmp = ckpt.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, "w": w.tolist()}))
    os.replace(tmp, ckpt)  # atomic: a kill mid-write leaves the last good checkpoint


def load(ckpt: Path) -> tuple[int, np.ndarray]:
    if not ckpt.exists():
        return 0, np.zeros(DIM)
    data = json.loads(ckpt.read_text())
    return int(data["step"]), np.array(data["w"])


def train(ckpt_dir: str, steps: int, workers: int, lr: float = 0.05) -> dict[str, float]:
    """The workload's body: runs inside the reservation, as often as it is admitted."""
    ckpt = Path(ckpt_dir) / "checkpoint.json"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    step, w = load(ckpt)
    print(f"[train] {'resuming from step ' + str(step) if step else 'starting'}", flush=True)
    shards = [Shard.remote(i) for i in range(workers)]
    loss = float("nan")
    while step < steps:
        results = ray.get([s.grad.remote(w) for s in shards])
        w = w - lr * np.mean([g for g, _ in results], axis=0)
        loss = float(np.mean([err for _, err in results]))
        step += 1
        if step % 50 == 0:
            save(ckpt, step, w)
            print(f"[train] step {step} loss {loss:.5f}", flush=True)
        notice = kai_ray.preemption_notice()
        if notice is not None:
            save(ckpt, step, w)
            left = notice["deadline"] - time.time()
            print(f"[train] preemption notice ({notice['reason']}): checkpointed step {step}, "
                  f"stopping within {left:.1f}s", flush=True)
            time.sleep(3600)  # kai-ray stops this attempt at the deadline
        time.sleep(0.02)  # pretend a step takes a while
    save(ckpt, step, w)
    return {"step": step, "loss": loss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", default="auto")
    parser.add_argument("--queues", default=str(Path(__file__).parent / "queues.yaml"))
    parser.add_argument("--queue", default="ml")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--checkpoint-dir", default="/tmp/kai-ray-train-example")
    args = parser.parse_args()

    kai_ray.init(address=args.address, queues=args.queues)
    job = kai_ray.workload(
        queue=args.queue, priority="train", name="train", workers=args.workers,
        resources_per_worker={"GPU": 1, "CPU": 1}, grace_period=5.0,
    )(train)
    handle = job.submit(args.checkpoint_dir, args.steps, args.workers)
    print(f"[train] submitted {handle.id}: {handle.status()} - {handle.reason()}", flush=True)
    last = ""
    while not handle.done():
        info = handle.info()
        line = f"{info['state']} (preempted {info['preemptions']}x): {info['reason']}"
        if line != last:
            print(f"[kai-ray] {handle.id} {line}", flush=True)
            last = line
        time.sleep(0.2)
    print(f"[train] finished: {handle.result()}; history:", flush=True)
    for at, old, new, why in handle.info()["history"]:
        print(f"    {time.strftime('%H:%M:%S', time.localtime(at))} {old or '-':>10} -> "
              f"{new:<10} {why}")


if __name__ == "__main__":
    main()
