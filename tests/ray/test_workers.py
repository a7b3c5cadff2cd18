"""The body of an elastic workload sees its workers: how many it has now, a scheduling
strategy for each, and when one is added or taken back. And `.remote()` gives an
ObjectRef, as `@ray.remote` does."""

from __future__ import annotations

import time
from typing import Any

import pytest

import kai_ray

from .conftest import Gate, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(150)]

TWO_QUEUES = [
    {"name": "a", "resources": {"gpu": {"quota": 6}, "cpu": {"quota": -1}}},
    {"name": "b", "resources": {"gpu": {"quota": 6}, "cpu": {"quota": -1}}},
]


@ray.remote(num_gpus=1, num_cpus=0.1)
class Shard:
    def where(self) -> tuple[str, list[Any]]:
        return str(ray.get_runtime_context().get_node_id()), ray.get_gpu_ids()


def test_one_actor_per_worker_of_an_elastic_workload(start_scheduler: Any) -> None:
    """The README's headline shape: 4 workers, a gang of 2, one actor per worker."""
    start_scheduler(TWO_QUEUES)

    @kai_ray.workload(queue="a", priority="train", workers=4, min_workers=2, num_gpus=1, num_cpus=0.1)
    def train() -> dict[str, Any]:
        pool = kai_ray.workers()
        first = len(pool)
        shards = {w.index: Shard.options(scheduling_strategy=w.strategy).remote() for w in pool}
        while len(shards) < 4:  # the surplus joins as its groups become ready
            pool = pool.wait_change(timeout=20)
            shards.update(
                {w.index: Shard.options(scheduling_strategy=w.strategy).remote() for w in pool.added}
            )
        placed = {i: ray.get(s.where.remote()) for i, s in shards.items()}
        return {"first": first, "placed": placed, "nodes": {w.index: w.node_id for w in pool}}

    out = ray.get(train.remote(), timeout=90)
    assert 2 <= out["first"] <= 4 and sorted(out["placed"]) == [0, 1, 2, 3]
    # Each actor runs on the node kai-ray pinned its worker to, on a GPU of its own.
    assert {i: node for i, (node, _) in out["placed"].items()} == out["nodes"]
    devices = [(node, tuple(ids)) for node, ids in out["placed"].values()]
    assert len(set(devices)) == 4


def test_the_body_learns_when_a_surplus_worker_is_taken_back(start_scheduler: Any) -> None:
    sched = start_scheduler(TWO_QUEUES)
    gate = Gate.remote()

    @kai_ray.workload(queue="a", workers=12, min_workers=4, num_gpus=1, num_cpus=0.1, grace_period=2)
    def elastic(gate: Any) -> None:
        pool = kai_ray.workers()
        gate.record.remote("start", len(pool))
        while not ray.get(gate.is_open.remote("stop")):
            pool = pool.wait_change(timeout=1)
            if pool.added or pool.removed:
                removed = [(w.index, w.releasing_at is not None) for w in pool.removed]
                gate.record.remote("change", (len(pool), [w.index for w in pool.added], removed))

    handle = elastic.submit(gate)
    wait_until(lambda: sched.info(handle.id)["workers"] == 12, timeout=40, what=lambda: handle.info())
    wait_until(lambda: _sizes(gate)[-1:] == [12], timeout=20, what=lambda: ray.get(gate.entries.remote()))

    other = kai_ray.workload(queue="b", num_gpus=2, num_cpus=0.1, workers=2)(_hold)
    taker = other.submit(gate)
    wait_until(lambda: taker.status() == "Running", timeout=40, what=lambda: taker.reason())
    # Queue b reclaimed 4 GPUs of a's surplus: the body heard of each one before it went
    # (with the time it is taken back), then saw 8 workers left.
    changes = [v for k, v in ray.get(gate.entries.remote()) if k == "change"]
    removed = [r for _, _, rs in changes for r in rs]
    assert len(removed) == 4 and all(noticed for _, noticed in removed)
    assert all(index >= 4 for index, _ in removed)  # surplus only: the gang of 4 stays
    assert _sizes(gate)[-1] == 8 and handle.status() == "Running"
    ray.get(gate.release.remote("stop"))
    handle.result(timeout=30)
    taker.cancel()


def _sizes(gate: Any) -> list[int]:
    return [v if k == "start" else v[0] for k, v in ray.get(gate.entries.remote())]


def _hold(gate: Any) -> None:
    while not ray.get(gate.is_open.remote("never")):
        time.sleep(0.1)


def test_remote_gives_an_object_ref_and_errors_as_ray_does(start_scheduler: Any) -> None:
    start_scheduler(TWO_QUEUES)

    @kai_ray.workload(queue="a", num_gpus=1)
    def add(x: int, y: int) -> int:
        return x + y

    @kai_ray.workload(queue="a")
    def broken() -> None:
        raise ZeroDivisionError("no")

    refs = [add.remote(i, ray.put(10)) for i in range(3)]  # ObjectRef arguments are resolved
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert ray.get(refs, timeout=60) == [10, 11, 12]
    with pytest.raises(ZeroDivisionError):
        ray.get(broken.remote(), timeout=60)
    with pytest.raises(kai_ray.SubmitError, match="queue 'nope' does not exist"):
        add.options(queue="nope").remote(1, 2)  # refused at once, not inside the ref
