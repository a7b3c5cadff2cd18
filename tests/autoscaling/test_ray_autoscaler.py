"""kai-ray with Ray's real autoscaler (its fake multi-node provider starts local nodes):
a gang that waits for room asks for nodes and runs; one held back by its queue asks for
none; one that names a GPU type gets a node of that type.

`AutoscalingCluster.start()` runs `ray stop --force`, which ends every Ray process on the
machine, so this module must not share a session with another cluster: its directory
sorts before tests/ray, so it runs (and shuts down) before that suite's cluster starts.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import AutoscalingCluster  # noqa: E402

import kai_ray  # noqa: E402
from kai_ray.ray.client import make_spec  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

QUEUES = [
    {"name": "open", "resources": {"gpu": {"quota": -1}, "cpu": {"quota": -1}}},
    {"name": "capped", "resources": {"gpu": {"quota": 0, "limit": 0}, "cpu": {"quota": -1}}},
]


class _FakeNodesCluster(AutoscalingCluster):  # type: ignore[misc]
    """Ray's AutoscalingCluster reads its base config from an example file the Ray wheel
    does not ship; the same fake multi-node provider is named here as an external one,
    with the whole config written out."""

    def _generate_config(self, head_resources: dict, worker_node_types: dict, **_: Any) -> dict[str, Any]:
        provider = "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider"
        return {
            "cluster_name": "kai-ray-autoscaling-test",
            "max_workers": sum(t["max_workers"] for t in worker_node_types.values()),
            "idle_timeout_minutes": 10,
            "upscaling_speed": 10.0,
            "provider": {
                "type": "external",
                "module": provider,
                "disable_launch_config_check": True,
                "disable_node_updaters": True,
                "use_node_id_as_ip": True,
            },
            "auth": {"ssh_user": "ubuntu"},
            "available_node_types": {
                "ray.head.default": {"resources": dict(head_resources), "node_config": {}, "max_workers": 0},
                **worker_node_types,
            },
            "head_node_type": "ray.head.default",
            "file_mounts": {},
            "cluster_synced_files": [],
            "initialization_commands": [],
            "setup_commands": [],
            "head_setup_commands": [],
            "worker_setup_commands": [],
            "head_start_ray_commands": [],
            "worker_start_ray_commands": [],
        }


@pytest.fixture(scope="module")
def autoscaling() -> Iterator[None]:
    # `ray start` is run by name: the venv's bin must be on PATH even when it is not active.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    cluster = _FakeNodesCluster(
        head_resources={"CPU": 2},
        worker_node_types={
            "gpu-node": {
                "resources": {"CPU": 2, "GPU": 4},
                "node_config": {},
                "min_workers": 0,
                "max_workers": 3,  # room for one more than the 2 the gang asks for
            },
            # Ray's way of saying a node's GPU type (docs/gpu-types.md).
            "a100-node": {
                "resources": {"CPU": 2, "GPU": 4, "accelerator_type:A100": 1},
                "node_config": {},
                "min_workers": 0,
                "max_workers": 1,
            },
        },
    )
    cluster.start()
    ray.init("auto")
    _wait_for_autoscaler()
    try:
        yield
    finally:
        kai_ray.shutdown_scheduler()
        ray.shutdown()
        cluster.shutdown()


def _wait_for_autoscaler(timeout: float = 60.0) -> None:
    """Until Ray's monitor has published the autoscaler's first status (kai-ray reads it
    to know that the cluster can grow)."""
    from kai_ray.ray.upkeep import autoscaler_runs

    deadline = time.time() + timeout
    while not autoscaler_runs():
        assert time.time() < deadline, "Ray's autoscaler published no status"
        time.sleep(0.5)


def gpu_nodes(of_type: str | None = None) -> list[str]:
    """Ids of the live GPU nodes (of an accelerator type; "": of none)."""
    return [
        n["NodeID"]
        for n in ray.nodes()
        if n["Alive"]
        and n["Resources"].get("GPU")
        and (of_type is None or _types(n["Resources"]) == ({of_type} if of_type else set()))
    ]


def _types(resources: dict[str, float]) -> set[str]:
    return {k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")}


def test_a_gang_waiting_for_room_gets_nodes_and_one_held_by_its_queue_gets_none(autoscaling: None) -> None:
    sched = kai_ray.init(queues=QUEUES)
    assert gpu_nodes() == []
    held = sched.submit(
        make_spec("capped", kind="block", workers=1, resources_per_worker={"GPU": 1, "CPU": 0.1})
    )
    time.sleep(15)  # several autoscaler updates (every second here)
    assert gpu_nodes("") == [], "a workload held back by its queue's limit must not buy a node"
    assert sched.info(held)["reason_code"] == "queue-limit"

    wid = sched.submit(
        make_spec("open", kind="block", workers=2, resources_per_worker={"GPU": 4, "CPU": 0.5})
    )
    info = sched.wait(wid, ["Running"], timeout=240)
    assert info["state"] == "Running"
    assert len(gpu_nodes("")) == 2  # the plain GPU node type: the gang asked for no type
    assert sched.info(held)["state"] == "Queued"  # still held: the new nodes were not for it


def test_a_gang_that_names_a_gpu_type_gets_a_node_of_that_type(autoscaling: None) -> None:
    """The autoscaler is asked for the type (accelerator_type:A100), so it starts the
    A100 node type, and the gang runs there. Asked for GPUs alone, it may start a third
    plain GPU node instead (it may start one more), where the gang would never run."""
    sched = kai_ray.init(queues=QUEUES)
    assert gpu_nodes("A100") == []
    wid = sched.submit(
        make_spec(
            "open",
            kind="block",
            workers=1,
            resources_per_worker={"GPU": 4, "CPU": 0.5},
            accelerator_type="A100",
        )
    )
    info = sched.wait(wid, ["Running"], timeout=240)
    (a100,) = gpu_nodes("A100")
    assert [n[:12] for n in info["nodes"]] == [a100[:12]]
    sched.cancel(wid)
    sched.wait(wid, ["Cancelled"], timeout=60)
