"""`kai-ray demo`: queues, fair share and preemption end to end on a local Ray cluster.

Two simulated nodes with 4 fake GPUs each, two queues with a quota of 4 GPUs each.
research starts two trainings and borrows the idle half of the cluster; prod's training
reclaims it (fair share); prod's inference service preempts prod's own training
(priority); when the service scales down, training resumes from its checkpoint.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kai_ray.api.render import plural

__all__ = ["run_demo"]

QUEUES = [
    {"name": "research", "resources": {"gpu": {"quota": 4}, "cpu": {"quota": -1}}},
    {"name": "prod", "resources": {"gpu": {"quota": 4}, "cpu": {"quota": -1}}},
]


class Timeline:
    def __init__(self) -> None:
        self.t0 = time.time()

    def say(self, text: str) -> None:
        print(f"[{time.time() - self.t0:6.1f}s] {text}", flush=True)


def _bodies(ray: Any, kai_ray: Any) -> tuple[Any, Any, Any]:
    @ray.remote(num_cpus=0)
    class Board:
        """Checkpoints and messages from the workloads, and the demo's stop signal."""

        def __init__(self) -> None:
            self.ckpt: dict[str, int] = {}
            self.msgs: list[str] = []
            self.flags: set[str] = set()

        def save(self, name: str, step: int) -> None:
            self.ckpt[name] = step

        def load(self, name: str) -> int:
            return self.ckpt.get(name, 0)

        def say(self, text: str) -> None:
            self.msgs.append(text)

        def drain(self) -> list[str]:
            out, self.msgs = self.msgs, []
            return out

        def set(self, flag: str) -> None:
            self.flags.add(flag)

        def has(self, flag: str) -> bool:
            return flag in self.flags

    def train(board: Any, name: str) -> int:
        step = ray.get(board.load.remote(name))
        board.say.remote(f"{name}: {'resuming at step ' + str(step) if step else 'starting'}")
        while not ray.get(board.has.remote("finish")):
            if kai_ray.preemption_notice() is not None:
                ray.get(board.save.remote(name, step))
                board.say.remote(f"{name}: preemption notice -> checkpoint at step {step}")
                time.sleep(3600)  # wait for the stop
            step += 1
            time.sleep(0.1)
        board.say.remote(f"{name}: finished at step {step}")
        return int(step)

    def serve(board: Any, seconds: float) -> int:
        board.say.remote("serve: replica up, serving requests")
        served, end = 0, time.time() + seconds
        while time.time() < end:
            served += 1
            time.sleep(0.01)
        board.say.remote(f"serve: served {served} requests, scaling down")
        return served

    return Board, train, serve


def run_demo(quick: bool = False) -> int:
    import ray
    from ray.cluster_utils import Cluster

    import kai_ray
    from kai_ray.api.render import queue_table

    tl = Timeline()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    for rack in ("rack-1", "rack-2"):
        cluster.add_node(num_cpus=4, num_gpus=4, labels={"rack": rack})
    try:
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        sched = kai_ray.init(queues=QUEUES)
        tl.say("cluster up: 2 nodes x 4 GPUs (simulated); queues research and prod, quota 4 GPUs each")
        return _story(ray, kai_ray, sched, tl, quick, queue_table)
    finally:
        kai_ray.shutdown_scheduler()
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]


def _story(ray: Any, kai_ray: Any, sched: Any, tl: Timeline, quick: bool, queue_table: Any) -> int:
    Board, train, serve = _bodies(ray, kai_ray)
    board = Board.remote()
    pause = 1.0 if quick else 2.5
    states: dict[str, str] = {}
    names: dict[str, str] = {}

    def watch(seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            for msg in ray.get(board.drain.remote()):
                tl.say(f"  {msg}")
            for w in sched.list():
                if states.get(w["id"]) != w["state"]:
                    states[w["id"]] = w["state"]
                    where = f" on {plural(len(set(w.get('nodes') or [])), 'node')}" if w["workers"] else ""
                    tl.say(f"{names.get(w['id'], w['id']):<14} {w['state']:<10}{where} - {w['reason']}")
            time.sleep(0.1)

    def submit(fn: Any, name: str, queue: str, priority: str, *args: Any) -> Any:
        wl = kai_ray.workload(
            queue=queue,
            priority=priority,
            name=name,
            grace_period=1.0,
            resources_per_worker={"GPU": 4, "CPU": 1},
        )(fn)
        handle = wl.submit(*args)
        names[handle.id] = f"{queue}/{name}"
        tl.say(f"submit {queue}/{name} (priority {priority}, 4 GPUs)")
        return handle

    t1 = submit(train, "train-1", "research", "train", board, "train-1")
    t2 = submit(train, "train-2", "research", "train", board, "train-2")
    watch(pause + 1)
    tl.say("research uses all 8 GPUs: over its quota of 4, borrowing what prod does not use")
    t3 = submit(train, "train-3", "prod", "train", board, "train-3")
    watch(pause + 2)
    tl.say("prod wanted its fair share back: one research training was reclaimed")
    print("\n" + queue_table(sched.queues()) + "\n", flush=True)
    s = submit(serve, "serve", "prod", "inference", board, 3 * pause)
    watch(3 * pause + 3)
    served = s.result(timeout=60)
    tl.say(f"inference done ({served} requests); training resumes from its checkpoint")
    watch(pause + 1)
    ray.get(board.set.remote("finish"))
    watch(pause)
    for h in (t1, t2, t3):
        if h.status() in ("Queued", "Admitting", "Preempting"):
            h.cancel()  # still waiting when the demo ends
        else:
            h.result(timeout=60)
    preempted = sum(sched.info(h.id)["preemptions"] for h in (t1, t2, t3))
    tl.say(f"done: {plural(preempted, 'preemption')}, every workload either finished or was cancelled")
    return 0 if preempted >= 2 else 1
