"""The user API around a block of code, cancellation, and the scheduler's metrics."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest

import kai_ray
from kai_ray.api.workloads import make_spec

from .conftest import Gate, groups_of, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

QUEUE = [{"name": "a", "resources": {"gpu": {"quota": -1}, "cpu": {"quota": -1}}}]


@ray.remote(num_gpus=2, num_cpus=0)
def gpu_node() -> str:
    return str(ray.get_runtime_context().get_node_id())


def test_reservation_context_manager_runs_a_block_inside_the_group(start_scheduler: Any) -> None:
    start_scheduler(QUEUE)
    with kai_ray.reservation(queue="a", workers=2, resources_per_worker={"GPU": 2}) as r:
        info = r.handle.info()
        assert info["state"] == "Running" and r.notice() is None
        nodes = ray.get([gpu_node.options(scheduling_strategy=r.strategy(i)).remote() for i in range(2)])
        assert nodes == info["nodes"]  # bundle i on the node the scheduler pinned it to
    assert r.handle.status() == "Succeeded" and groups_of(r.handle.id) == []


def test_a_failing_block_is_reported_failed(start_scheduler: Any) -> None:
    start_scheduler(QUEUE)
    with pytest.raises(ZeroDivisionError), kai_ray.reservation(queue="a") as r:
        _ = 1 / 0
    info = r.handle.info()
    assert info["state"] == "Failed" and "ZeroDivisionError" in info["reason"]


def test_cancel_a_queued_workload_and_a_running_one(start_scheduler: Any) -> None:
    sched = start_scheduler(QUEUE)
    gate = Gate.remote()

    def hold(gate: Any) -> None:
        while not ray.get(gate.is_open.remote("never")):
            time.sleep(0.05)

    wl = kai_ray.workload(queue="a", workers=3, resources_per_worker={"GPU": 4})(hold)
    running = wl.submit(gate)
    assert running.wait_admitted(30)["state"] == "Running"
    queued = wl.submit(gate)
    wait_until(lambda: queued.position() == 1, what="queued second")
    queued.cancel()
    with pytest.raises(kai_ray.WorkloadCancelled):
        queued.result(30)
    running.cancel()  # kills the body: its caller learns it was cancelled
    with pytest.raises(kai_ray.WorkloadCancelled):
        running.result(30)
    assert groups_of(running.id) == [] and sched.info(running.id)["state"] == "Cancelled"


def test_metrics_reach_prometheus(start_scheduler: Any) -> None:
    sched = start_scheduler(QUEUE)
    wid = sched.submit(make_spec("a", kind="block", resources_per_worker={"GPU": 1}))
    wait_until(lambda: sched.info(wid)["state"] == "Running")
    head = next(n for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])
    url = f"http://{head['NodeManagerAddress']}:{head['MetricsExportPort']}/metrics"

    def allocated_gpus(text: str) -> list[float]:
        # One series per scheduler process that ever reported (the label WorkerId differs).
        return [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("ray_kai_ray_queue_allocated{")
            and 'resource="gpu"' in line
            and 'queue="a"' in line
        ]

    def scrape() -> str:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        wanted = (
            "ray_kai_ray_queue_fair_share{",
            "ray_kai_ray_admission_wait_seconds",
            "ray_kai_ray_queue_pending_workloads{",
        )
        return text if all(w in text for w in wanted) and 1.0 in allocated_gpus(text) else ""

    # The GPU this workload holds shows up as queue a's allocation on the head's exporter.
    wait_until(scrape, timeout=40, what="kai-ray metrics on the head node")


DRIVER = """\
import os, sys, time
import ray
import kai_ray
ray.init(address=sys.argv[1])

@kai_ray.workload(queue="a", workers=3, resources_per_worker={"GPU": 4})
def forever():
    time.sleep(3600)

running = forever.submit()
running.wait_admitted(30)
queued = forever.submit()
print(running.id, queued.id, flush=True)
os._exit(0)  # the driver dies without a word to the scheduler
"""


def test_workloads_of_a_driver_that_exited_are_cancelled(
    start_scheduler: Any, ray_cluster: Any, tmp_path: Any
) -> None:
    import subprocess
    import sys

    sched = start_scheduler(QUEUE)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    out = subprocess.run(
        [sys.executable, str(script), ray_cluster.address], capture_output=True, text=True, timeout=90
    )
    running, queued = out.stdout.split()[-2:]
    for wid in (running, queued):
        wait_until(
            lambda wid=wid: sched.info(wid)["state"] == "Cancelled",
            timeout=30,
            what=lambda wid=wid: sched.info(wid),
        )
        assert "driver" in sched.info(wid)["reason"] and "exited" in sched.info(wid)["reason"]
    assert groups_of(running) == []
