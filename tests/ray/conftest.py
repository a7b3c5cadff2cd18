"""One multi-node Ray cluster for the whole tests/ray suite, and a fresh scheduler per test.

The cluster (head + 3 workers with 4 fake GPUs each, racks r0, r0, r1) takes ~15 s to
start on 2 cores, so it is shared; each test gets its own scheduler with its own queues,
and everything it left behind (workloads, groups, stored state) is cleared afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

GPU_NODES = 3
GPUS_PER_NODE = 4


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Cluster]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    for i, rack in enumerate(["r0", "r0", "r1"][:GPU_NODES]):
        cluster.add_node(num_cpus=4, num_gpus=GPUS_PER_NODE, labels={"rack": rack, "idx": str(i)})
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def gpu_node_ids() -> list[str]:
    return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU"))


def stop_ray_jobs() -> None:
    """Stop Ray jobs a test left running (a failed example test leaves its job holding
    GPUs through Ray Train's own placement group, which no kai-ray reset would free)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    try:
        jobs = JobSubmissionClient(ray.get_runtime_context().gcs_address)
    except (ConnectionError, RuntimeError):  # no dashboard (yet): no job can have run
        return
    live = [
        j.submission_id for j in jobs.list_jobs() if j.submission_id and not JobStatus(j.status).is_terminal()
    ]
    for sid in live:
        jobs.stop_job(sid)
    deadline = time.time() + 30
    while live and time.time() < deadline:
        live = [s for s in live if not jobs.get_job_status(s).is_terminal()]
        time.sleep(0.2)


def reset_scheduler() -> None:
    """Kill the scheduler, stop leftover Ray jobs, drop its stored state and every group
    it made."""
    from ray.experimental import internal_kv
    from ray.util.placement_group import placement_group_table, remove_placement_group

    import kai_ray
    from kai_ray.api.notice import group_by_id
    from kai_ray.control import GROUP_PREFIX
    from kai_ray.ray.kvstore import KV_NAMESPACE

    kai_ray.shutdown_scheduler()
    stop_ray_jobs()
    for key in internal_kv._internal_kv_list("", namespace=KV_NAMESPACE):
        internal_kv._internal_kv_del(key, namespace=KV_NAMESPACE)
    for info in placement_group_table().values():
        if info["name"].startswith(GROUP_PREFIX) and info["state"] != "REMOVED":
            remove_placement_group(group_by_id(info["placement_group_id"]))
    time.sleep(0.3)  # let Ray hand freed capacity back before the next test reserves it


@pytest.fixture
def start_scheduler(ray_cluster: Cluster) -> Iterator[Callable[..., Any]]:
    import kai_ray

    reset_scheduler()

    def start(queues: Any = None, **kwargs: Any) -> Any:
        return kai_ray.init(queues=queues, **kwargs)

    yield start
    reset_scheduler()


def wait_until(pred: Callable[[], Any], timeout: float = 20.0, what: Any = "") -> Any:
    """Poll until `pred()` is truthy; `what` (a string or a callable giving one) says what
    was awaited, for the failure message."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    said = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout}s waiting for {said or pred}")


def groups_of(wid: str) -> list[dict[str, Any]]:
    """Live placement groups of one workload, straight from Ray."""
    from ray.util.placement_group import placement_group_table

    return [
        info
        for info in placement_group_table().values()
        if info["name"].startswith(f"kai-ray/{wid}/") and info["state"] != "REMOVED"
    ]


@ray.remote(num_cpus=0)
class Gate:
    """A latch tests open to let workloads finish, and a log of what ran."""

    def __init__(self) -> None:
        self.open: set[str] = set()
        self.log: list[tuple[str, Any]] = []

    def release(self, key: str) -> None:
        self.open.add(key)

    def is_open(self, key: str) -> bool:
        return key in self.open

    def record(self, key: str, value: Any = None) -> None:
        self.log.append((key, value))

    def entries(self) -> list[tuple[str, Any]]:
        return list(self.log)
