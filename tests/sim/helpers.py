"""Small traces written on the fly, and simulations of them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kai_ray.core import QueueInfo
from kai_ray.sim.cluster import parse_cluster
from kai_ray.sim.engine import Options, Simulation
from kai_ray.sim.metrics import Metrics
from kai_ray.sim.policies import make_policy
from kai_ray.sim.trace import SimJob

GENERIC_HEADER = "submit_time,duration,gpus,queue,cpu,memory,priority,gang_size,min_workers,max_workers,name"


def write_csv(path: Path, header: str, rows: Sequence[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def job(name: str, submit: float, duration: float, gpus: float, queue: str = "a", workers: int = 1) -> SimJob:
    return SimJob(id=name, submit=submit, duration=duration, queue=queue, workers=workers, gpus=gpus)


def simulate(
    jobs: Sequence[SimJob],
    policy: str,
    cluster: str = "1x4",
    queues: Sequence[QueueInfo] | None = None,
    checkpoint_s: float = 0.0,
    runtime_estimates: str = "",
) -> tuple[Simulation, Metrics]:
    nodes = parse_cluster(cluster)
    names = sorted({j.queue for j in jobs})
    if queues is None:
        queues = [QueueInfo(name=n) for n in names]
    options = Options(checkpoint_s=checkpoint_s, event_log=True, runtime_estimates=runtime_estimates)
    sim = Simulation(jobs, nodes, queues, make_policy(policy), options)
    return sim, sim.run()
