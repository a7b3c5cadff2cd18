"""The scheduler actor's own node restarted: run by test_head_restart.py in a process of
its own, since it needs a cluster of its own (the suite's shared cluster keeps the GCS in
the head's memory, so losing the head there ends the cluster).

The scheduler actor lives on the head node. With Ray's GCS fault tolerance (an external
Redis, as KubeRay's `gcsFaultToleranceOptions` sets it up), the head can be lost and
started again at the same address: the GCS reloads its tables from Redis, the worker
nodes and their placement groups stay, and Ray restarts the detached scheduler actor on
the new head. kai-ray's own state is in the GCS key-value store, so the restarted actor
reconciles with the groups that are still live.

The driver (this process) is attached to a worker node (by its temp dir): a driver on the
head would die with it. Prints one JSON line of what it observed; the test asserts.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import ray
from ray.cluster_utils import Cluster
from ray.util.placement_group import placement_group_table

import kai_ray
from kai_ray.api.workloads import make_spec

GPU_NODES = 2
GPUS_PER_NODE = 2
GANGS = 6  # of 2 GPUs each: 2 run at a time, 4 wait


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def live_groups() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for info in placement_group_table().values():
        if info["name"].startswith("kai-ray/") and info["state"] != "REMOVED":
            out.setdefault(info["name"].split("/")[1], []).append(info["name"])
    return out


def wait_until(pred: Any, timeout: float, what: str) -> float:
    start = time.time()
    while time.time() - start < timeout:
        try:
            if pred():
                return time.time() - start
        except (ray.exceptions.RayError, ConnectionError):
            pass  # the GCS or the actor is still coming back
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout}s: {what}")


class Watch:
    """Polls the scheduler through the restart: the most workloads seen running at once,
    and every workload seen with two live groups."""

    def __init__(self, sched: Any) -> None:
        self.sched, self.most_running, self.doubled = sched, 0, set[str]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                running = [w for w in self.sched.list(False) if w["state"] == "Running"]
                self.most_running = max(self.most_running, len(running))
                self.doubled |= {w for w, names in live_groups().items() if len(names) > 1}
            except (ray.exceptions.RayError, ConnectionError):
                pass
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def running(sched: Any, ids: list[str]) -> list[str]:
    return [w for w in ids if sched.info(w)["state"] == "Running"]


def main() -> dict[str, Any]:
    gcs_port, worker_dir = free_port(), f"/tmp/kai-ray-headrestart-{os.getpid()}"
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "gcs_server_port": gcs_port, "include_dashboard": False},
    )
    for _ in range(GPU_NODES):
        cluster.add_node(num_cpus=2, num_gpus=GPUS_PER_NODE, temp_dir=worker_dir)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, _temp_dir=worker_dir)
    try:
        return run(cluster, gcs_port)
    finally:
        ray.shutdown()
        cluster.shutdown()


def run(cluster: Cluster, gcs_port: int) -> dict[str, Any]:
    sched = kai_ray.init(queues=[{"name": "a", "resources": {"gpu": {"quota": -1}}}])
    spec = make_spec("a", kind="block", workers=2, resources_per_worker={"GPU": 1, "CPU": 0.1})
    ids = [sched.submit(spec) for _ in range(GANGS)]
    wait_until(lambda: len(running(sched, ids)) == 2, 60, "two gangs running")
    first = running(sched, ids)
    attempts = {w: sched.info(w)["attempt"] for w in first}
    groups_before = {w: live_groups()[w] for w in first}
    old_head = cluster.head_node.node_id
    watch = Watch(sched)

    # The head goes: its GCS, its raylet and the scheduler actor with them. A submission
    # made while it is down waits and lands once.
    removed_at = time.time()
    cluster.remove_node(cluster.head_node, allow_graceful=False)
    late: dict[str, Any] = {}
    submitter = threading.Thread(target=lambda: late.update(id=sched.submit(spec)), daemon=True)
    submitter.start()
    time.sleep(2)
    restart_at = time.time()
    cluster.add_node(num_cpus=1, gcs_server_port=gcs_port, include_dashboard=False)
    new_head = cluster.head_node.node_id
    wait_until(lambda: sched.status() is not None, 120, "the scheduler answers")
    answered_at = time.time()
    submitter.join(60)
    ids.append(late["id"])

    survived = {
        w: {
            "state": sched.info(w)["state"],
            "attempt": sched.info(w)["attempt"],
            "groups": live_groups().get(w, []),
        }
        for w in first
    }
    # Every gang still runs to its end, two at a time, each admitted once.
    done: list[str] = []
    while len(done) < len(ids):
        now = [w for w in running(sched, ids) if w not in done]
        if not now:
            wait_until(lambda: [w for w in running(sched, ids) if w not in done], 60, "the next gangs")
            continue
        for w in now:
            sched.finish(w, sched.info(w)["attempt"], True)
            done.append(w)
    watch.stop()
    return {
        "old_head": old_head,
        "new_head": new_head,
        "scheduler_node": scheduler_node(),
        "head_down_s": round(restart_at - removed_at, 2),
        "answered_after_restart_s": round(answered_at - restart_at, 2),
        "attempts_before": attempts,
        "groups_before": groups_before,
        "survived": survived,
        "states": {w: sched.info(w)["state"] for w in ids},
        "times_running": {w: [h[2] for h in sched.info(w)["history"]].count("Running") for w in ids},
        "most_running": watch.most_running,
        "doubled": sorted(watch.doubled),
        "late": late["id"],
    }


def scheduler_node() -> str:
    from kai_ray.ray.actor import SCHEDULER_NAME

    for a in ray._private.state.state.actor_table(None).values():
        if a["Name"] == SCHEDULER_NAME and a["State"] == "ALIVE":
            return str(a["Address"]["NodeID"])
    return ""


def start_redis() -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(50):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("redis-server did not listen")


if __name__ == "__main__":
    redis, port = start_redis()
    # Read by the head's GCS when it starts (both times): its tables live in Redis.
    os.environ["RAY_REDIS_ADDRESS"] = f"127.0.0.1:{port}"
    os.environ["RAY_external_storage_namespace"] = f"kai-ray-test-{os.getpid()}"  # noqa: SIM112 (Ray reads this case)
    try:
        print(json.dumps(main()), flush=True)
    finally:
        redis.kill()
    sys.exit(0)
