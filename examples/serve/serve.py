"""An inference service at priority `inference` under kai-ray: when GPUs run short it
preempts the training job of the same queue, serves requests, and when it scales down
(exits) the training job is re-admitted and resumes from its checkpoint.

The replicas are Ray actors in the service's kai-ray reservation, each holding a GPU and
a small model (a matrix; no download), behind a round-robin router in the body.

    python examples/serve/serve.py --address auto --replicas 2 --seconds 20
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path

import numpy as np
import ray

import kai_ray


@ray.remote(num_cpus=0.5, num_gpus=1)
class Replica:
    def __init__(self) -> None:
        self.weights = np.random.default_rng(7).normal(size=(64, 8))

    def predict(self, features: list[float]) -> list[float]:
        return (np.asarray(features) @ self.weights).tolist()


def serve(replicas: int, seconds: float) -> dict[str, float]:
    """The workload's body: start the replicas, route requests until `seconds` pass."""
    pool = [Replica.remote() for _ in range(replicas)]
    ray.get([r.predict.remote([0.0] * 64) for r in pool])  # warm
    print(f"[serve] {replicas} replicas up, serving", flush=True)
    latencies: list[float] = []
    rng = np.random.default_rng(0)
    end = time.time() + seconds
    for replica in itertools.cycle(pool):
        if time.time() >= end:
            break
        t0 = time.perf_counter()
        ray.get(replica.predict.remote(rng.normal(size=64).tolist()))
        latencies.append(time.perf_counter() - t0)
    p50 = statistics.median(latencies) * 1e3
    print(f"[serve] {len(latencies)} requests, p50 {p50:.2f} ms; scaling down", flush=True)
    return {"requests": len(latencies), "p50_ms": p50}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", default="auto")
    parser.add_argument("--queues", default=str(Path(__file__).parent.parent / "train" / "queues.yaml"))
    parser.add_argument("--queue", default="ml")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()

    kai_ray.init(address=args.address, queues=args.queues)
    app = kai_ray.workload(
        queue=args.queue, priority="inference", name="serve", workers=args.replicas,
        resources_per_worker={"GPU": 1, "CPU": 0.5},
    )(serve)
    t0 = time.time()
    handle = app.submit(args.replicas, args.seconds)
    print(f"[serve] submitted {handle.id}: {handle.status()} - {handle.reason()}", flush=True)
    info = handle.wait_admitted()
    print(f"[serve] admitted after {time.time() - t0:.2f}s: {info['reason']}", flush=True)
    print(f"[serve] done: {handle.result()}", flush=True)


if __name__ == "__main__":
    main()
