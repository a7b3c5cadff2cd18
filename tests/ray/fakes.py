"""In-memory ports for the scheduler's state machine (kai_ray.ray.engine): the engine is
tested with the real core and these, without Ray."""

from __future__ import annotations

import json
from typing import Any

from kai_ray.core import QueueInfo
from kai_ray.ray.engine import SchedulerEngine
from kai_ray.ray.workload import Workload, WorkloadSpec


def ray_node(name: str, gpus: int = 4, cpu: int = 8, **labels: str) -> dict[str, Any]:
    return {
        "NodeID": name,
        "Alive": True,
        "Labels": labels,
        "Resources": {"CPU": cpu, "GPU": gpus, "memory": 64 * 2**30, f"node:{name}": 1},
    }


class FakeBackend:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.node_list = nodes
        self.groups: dict[str, dict[str, Any]] = {}
        self.ready = True  # groups become ready at once unless a test says otherwise
        self.killed: list[tuple[str, int]] = []
        self.removed: list[str] = []
        self.store: MemoryStore | None = None
        self.created_while_stored: list[bool] = []
        # Failures to inject, by workload id: raised when its group is created / removed.
        self.fail_create: dict[str, Exception] = {}
        self.fail_remove: dict[str, Exception] = {}

    def nodes(self) -> list[dict[str, Any]]:
        return self.node_list

    def available(self) -> dict[str, dict[str, float]]:
        return {}

    def create(self, name: str, bundles: list[dict[str, float]], nodes: list[str]) -> str:
        if name.split("/")[1] in self.fail_create:
            raise self.fail_create[name.split("/")[1]]
        if self.store is not None:  # write-ahead: the record must exist already
            wid = name.split("/")[1]
            self.created_while_stored.append(wid in self.store.workloads)
        self.groups[name] = {"bundles": bundles, "nodes": nodes}
        return f"id-{name}"

    def is_ready(self, name: str) -> bool:
        return self.ready and name in self.groups

    def remove(self, name: str) -> None:
        if name.split("/")[1] in self.fail_remove:
            raise self.fail_remove[name.split("/")[1]]
        self.groups.pop(name, None)
        self.removed.append(name)

    def live_groups(self) -> dict[str, list[str]]:
        return {n: g["nodes"] for n, g in self.groups.items()}

    def kill_process(self, node: str, pid: int) -> None:
        self.killed.append((node, pid))

    def kill_actors_in(self, group: str) -> None:
        pass


class MemoryStore:
    def __init__(self) -> None:
        self.workloads: dict[str, str] = {}
        self.queues: list[dict[str, Any]] | None = None
        self.notices: dict[str, dict[str, Any]] = {}

    def load(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return [json.loads(v) for v in self.workloads.values()], self.queues

    def save(self, workload: dict[str, Any]) -> None:
        self.workloads[workload["id"]] = json.dumps(workload)  # must be JSON

    def delete(self, workload_id: str) -> None:
        self.workloads.pop(workload_id, None)

    def save_queues(self, queues: list[dict[str, Any]]) -> None:
        self.queues = queues

    def set_notice(self, workload_id: str, notice: Any) -> None:
        if notice is None:
            self.notices.pop(workload_id, None)
        else:
            self.notices[workload_id] = dict(notice)


class FakeJobs:
    """Ray Jobs: submissions recorded; `fail` injects errors by workload id, one per
    call, and the submission goes through once the list is used up."""

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.statuses: dict[str, str] = {}
        self.stopped: list[str] = []
        self.fail: dict[str, list[Exception]] = {}

    def submit(self, w: Workload) -> str:
        errors = self.fail.get(w.id)
        if errors:
            raise errors.pop(0)
        sid = f"{w.id}-{w.attempt}"
        self.submitted.append(sid)
        self.statuses[sid] = "RUNNING"
        return sid

    def status(self, submission_id: str) -> str:
        return self.statuses.get(submission_id, "UNKNOWN")

    def outcome(self, submission_id: str) -> str:
        return "exit code 3" if self.statuses.get(submission_id) == "FAILED" else ""

    def stop(self, submission_id: str) -> None:
        self.stopped.append(submission_id)
        self.statuses[submission_id] = "STOPPED"


QUEUES = [
    QueueInfo("a", quota=(-1, -1, -1)),
    QueueInfo("parent"),
    QueueInfo("child", parent="parent", quota=(-1, -1, -1)),
]


def make(nodes: int = 2, jobs: FakeJobs | None = None) -> tuple[SchedulerEngine, FakeBackend, MemoryStore]:
    backend = FakeBackend([ray_node(f"n{i}") for i in range(nodes)])
    store = MemoryStore()
    backend.store = store
    return SchedulerEngine(backend, store, QUEUES, jobs=jobs), backend, store


def spec(**kw: Any) -> WorkloadSpec:
    kw.setdefault("resources_per_worker", {"GPU": 4, "CPU": 1})
    return WorkloadSpec(queue=kw.pop("queue", "a"), **kw)
