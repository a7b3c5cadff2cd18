"""One controller, two sets of ports: the same story (a gang admitted, a higher-priority
gang preempting it after a notice, a cancel) driven through the in-memory ports and
through Ray's adapters on a real multi-node cluster, with the same outcome."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kai_ray.control import Controller, State, WorkloadSpec
from kai_ray.control.memory import ManualClock, MemoryExecutor, MemoryNodes, MemoryStore
from kai_ray.core import QueueInfo, SchedulerConfig

from .conftest import GPUS_PER_NODE, gpu_node_ids, groups_of, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

QUEUES = [QueueInfo("a", quota=(-1, -1, -1))]


class WallClock:
    def now(self) -> float:
        return time.time()


def memory_ports() -> tuple[Controller, Callable[[], None], dict[str, Any]]:
    from kai_ray.core import HOSTNAME_LABEL, NodeInfo

    nodes = [NodeInfo(f"n{i}", gpus=GPUS_PER_NODE, cpu=4, labels={HOSTNAME_LABEL: f"n{i}"}) for i in range(3)]
    clock, executor = ManualClock(), MemoryExecutor()
    controller = Controller(MemoryNodes(nodes), executor, MemoryStore(), clock, QUEUES)

    def tick() -> None:
        clock.advance(0.5)
        controller.step()

    return controller, tick, {"notices": executor.notices, "groups": lambda w: executor.groups}


@pytest.fixture
def ray_ports(ray_cluster: Any) -> Iterator[tuple[Controller, Callable[[], None], dict[str, Any]]]:
    from kai_ray.ray.adapters import RayExecutor, RayNodes
    from kai_ray.ray.kvstore import KVStore
    from kai_ray.ray.translate import NODE_ID_LABEL

    from .conftest import reset_scheduler

    reset_scheduler()  # no scheduler actor: this test is the controller
    store = KVStore(prefix="adapter-test/")
    cluster = RayNodes()
    executor = RayExecutor(cluster, store)
    controller = Controller(
        cluster, executor, store, WallClock(), QUEUES, SchedulerConfig(), node_label=NODE_ID_LABEL
    )

    def tick() -> None:
        time.sleep(0.1)
        controller.step()

    def notices() -> dict[str, Any]:
        from kai_ray.ray.kvstore import notice_key

        return {wid: r.value for wid in controller.workloads if (r := store.get(notice_key(wid)))}

    yield controller, tick, {"notices": None, "notice_of": notices, "groups": groups_of}
    for wid in list(controller.workloads):
        controller.cancel(wid)
    for key in store.load(""):
        store.delete(key, store.get(key).revision)  # type: ignore[union-attr]
    reset_scheduler()


def story(controller: Controller, tick: Callable[[], None], look: dict[str, Any]) -> list[str]:
    """What happened, in words that do not depend on the ports."""
    said: list[str] = []

    def until(pred: Callable[[], bool], what: str) -> None:
        for _ in range(300):
            if pred():
                said.append(what)
                return
            tick()
        raise AssertionError(f"never: {what}: {[w.reason for w in controller.workloads.values()]}")

    gpu = {"GPU": GPUS_PER_NODE, "CPU": 0.1}
    low = controller.submit("low", WorkloadSpec("a", workers=3, resources_per_worker=gpu, grace_period=1.0))
    until(lambda: low.state is State.RUNNING, "low runs on 3 nodes")
    said.append(f"low holds {len(set(s.node for s in low.slots.values()))} nodes")
    high = controller.submit(
        "high", WorkloadSpec("a", priority=125, preemptible=False, resources_per_worker=gpu, kind="block")
    )
    until(lambda: low.state is State.PREEMPTING, "low is being preempted")
    notice = look["notices"]["low"] if look["notices"] is not None else look["notice_of"]()["low"]
    said.append(f"notice: {notice['reason']}")
    until(lambda: low.state is State.QUEUED, "low is re-queued")
    until(lambda: high.state is State.RUNNING, "high runs")
    controller.cancel("high")
    until(lambda: low.state is State.RUNNING, "low runs again")
    said.append(f"low: attempt {low.attempt}, preempted {low.preemptions} time")
    controller.cancel("low")
    said.append(f"groups left: {len(look['groups']('low'))}")
    return said


def test_the_same_controller_on_memory_and_on_ray(ray_ports: Any) -> None:
    on_memory = story(*memory_ports())
    on_ray = story(*ray_ports)
    assert on_ray == on_memory
    assert on_memory[:3] == ["low runs on 3 nodes", "low holds 3 nodes", "low is being preempted"]
    assert on_memory[3].startswith("notice: preempt: ")
    wait_until(lambda: len(gpu_node_ids()) == 3)


def test_the_named_actors_alive_in_a_group_are_read_from_the_gcs(ray_cluster: Any) -> None:
    """What a stop kills beside removing the group: its named actors, read from the GCS of
    this cluster (not Ray's state API, which finds its cluster from the machine's files and
    needs a dashboard: with a second Ray instance on the machine and no dashboard, each stop
    waited out its timeouts)."""
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from kai_ray.ray.adapters import _alive_actors_in

    @ray.remote(num_cpus=0.1)
    class Member:
        def ping(self) -> int:
            return 1

    group = placement_group([{"CPU": 0.5}])  # room for the three members of 0.1
    ray.get(group.ready())
    inside = PlacementGroupSchedulingStrategy(group)
    named = Member.options(name="member-a", namespace="ns-a", scheduling_strategy=inside).remote()
    gone = Member.options(name="member-gone", namespace="ns-a", scheduling_strategy=inside).remote()
    anonymous = Member.options(scheduling_strategy=inside).remote()
    outside = Member.options(name="outside", namespace="ns-a").remote()
    ray.get([a.ping.remote() for a in (named, gone, anonymous, outside)])
    ray.kill(gone)
    try:
        wait_until(lambda: _alive_actors_in(group.id.hex()) == [("member-a", "ns-a")], 20)
    finally:
        for actor in (named, anonymous, outside):
            ray.kill(actor)
        remove_placement_group(group)
