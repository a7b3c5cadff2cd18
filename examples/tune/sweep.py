"""A Ray Tune sweep under a kai-ray queue: each trial is a workload of queue `sweeps`.

The trainable fits a noisy quadratic by gradient descent (numpy, nothing downloaded),
reports its loss every step and checkpoints every few steps, so that a trial that kai-ray
preempts is paused by Tune at its last checkpoint and resumes from there.

    python examples/tune/sweep.py --address auto --samples 8
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from ray import tune

import kai_ray
import kai_ray.tune

HERE = Path(__file__).resolve().parent


def fit_quadratic(config: dict[str, Any]) -> None:
    """Minimise (w - 3)^2 with learning rate config["lr"], from the last checkpoint."""
    w, step = 0.0, 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        saved = json.loads((Path(checkpoint.path) / "state.json").read_text())
        w, step = saved["w"], saved["step"]
    rng = np.random.default_rng(step)
    while step < config["steps"]:
        step += 1
        w -= config["lr"] * 2 * (w - 3.0) + rng.normal(scale=1e-3)
        metrics = {"loss": (w - 3.0) ** 2, "step": step}
        if step % 5 == 0:
            with tempfile.TemporaryDirectory() as d:
                (Path(d) / "state.json").write_text(json.dumps({"w": w, "step": step}))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report(metrics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="a Ray cluster (default: start a local one)")
    parser.add_argument("--samples", type=int, default=8, help="trials")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--storage", default=str(Path(tempfile.gettempdir()) / "kai-ray-tune"))
    args = parser.parse_args()

    kai_ray.init(address=args.address, queues=HERE / "queues.yaml")
    tuner = tune.Tuner(
        # One fake GPU per trial: the queue's limit of 4 lets at most 4 trials run at once.
        tune.with_resources(fit_quadratic, {"gpu": 1, "cpu": 0}),
        param_space={"lr": tune.loguniform(1e-3, 0.4), "steps": args.steps},
        tune_config=tune.TuneConfig(num_samples=args.samples, metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=args.storage, name="kai-ray-sweep", verbose=0),
    )
    results = kai_ray.tune.fit(tuner, queue="sweeps", priority="train")
    best = results.get_best_result()
    print(f"[sweep] {len(results)} trials, {results.num_errors} failed")
    print(f"[sweep] best lr {best.config['lr']:.4f}: loss {best.metrics['loss']:.2e}")
    trials = [w for w in kai_ray.get_scheduler().list() if w["name"] == "tune-trial"]
    print(f"[sweep] {len(trials)} trial workloads in queue sweeps: {sorted({w['state'] for w in trials})}")


if __name__ == "__main__":
    main()
