"""A Ray Serve application for kai-ray: submit it with `kai-ray job submit --handoff`.

    kai-ray job submit --queue ml --priority inference --workers 2 --gpus 1 --cpus 0.5 \\
        --handoff -- python examples/serve/serve_app.py --seconds 20

kai-ray admits the job at priority `inference`: when GPUs run short in its queue it
preempts lower-priority training first. Once admitted, the reservation is handed to the
job and Serve starts one replica per admitted worker (one GPU each). The job sends
requests through a deployment handle for `--seconds`, then scales down: it deletes the
application and exits, and kai-ray re-admits whatever waited, e.g. the preempted
training, which resumes from its checkpoint. A stop from kai-ray (SIGTERM) also deletes
the application, so no replica outlives the job.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from typing import Any

import numpy as np
import ray
from ray import serve

import kai_ray

APP = "kai-ray-example"


@serve.deployment
class Model:
    def __init__(self) -> None:
        self.weights = np.random.default_rng(7).normal(size=(64, 8))

    def __call__(self, features: list[float]) -> list[float]:
        return (np.asarray(features) @ self.weights).tolist()


def _scale_down(*_: Any) -> None:
    serve.delete(APP)
    serve.shutdown()
    sys.exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    ray.init()
    placement = kai_ray.reservation_placement() or {"nodes": [None],
                                                     "resources_per_worker": {"GPU": 1}}
    replicas, res = len(placement["nodes"]), placement["resources_per_worker"]
    signal.signal(signal.SIGTERM, _scale_down)  # kai-ray's stop on preemption or cancel
    serve.start(proxy_location="Disabled")  # requests come through the handle below
    app = Model.options(
        num_replicas=replicas,
        ray_actor_options={"num_gpus": res.get("GPU", 0), "num_cpus": res.get("CPU", 0)},
    ).bind()
    handle = serve.run(app, name=APP, route_prefix=None)
    print(f"[serve] {replicas} replicas up", flush=True)
    rng = np.random.default_rng(0)
    latencies: list[float] = []
    end = time.time() + args.seconds
    while time.time() < end:
        t0 = time.perf_counter()
        handle.remote(rng.normal(size=64).tolist()).result()
        latencies.append(time.perf_counter() - t0)
    print(f"[serve] {len(latencies)} requests, p50 {statistics.median(latencies) * 1e3:.2f} ms; "
          "scaling down", flush=True)
    serve.delete(APP)
    serve.shutdown()


if __name__ == "__main__":
    main()
