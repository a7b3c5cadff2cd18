"""Small fluent builders for core tests: a cluster in a few readable lines.

snap = (ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q0", gpu_quota=1)
        .job("train", "q0", gpu=1).running("n0").pending()
        .build())
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kai_ray.core import (
    DEFAULT_GPU_TYPE,
    UNLIMITED,
    ClusterSnapshot,
    CycleResult,
    JobInfo,
    NodeAffinity,
    NodeInfo,
    NodeRequirement,
    NodeSelectorTerm,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    TopologyConstraint,
    run_cycle,
)

GI = 1024**3
PRIORITY = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


class ClusterBuilder:
    def __init__(self) -> None:
        self.nodes: list[NodeInfo] = []
        self.queues: list[QueueInfo] = []
        self.jobs: list[JobInfo] = []
        self._job: JobInfo | None = None
        self._request = Request()
        self._can_grow = False

    # -- nodes and queues

    def node(
        self,
        name: str,
        gpus: int = 0,
        cpu: float = 1000,
        memory: float = 1024 * GI,
        gpu_memory: float = 80 * GI,
        gpus_used_outside: float = 0,
        unschedulable: bool = False,
        gpu_type: str = DEFAULT_GPU_TYPE,
        **labels: str,
    ) -> ClusterBuilder:
        outside = (("gpu", gpus_used_outside),) if gpus_used_outside else ()
        self.nodes.append(
            NodeInfo(
                name,
                gpus,
                cpu,
                memory,
                gpu_memory,
                dict(labels),
                unschedulable,
                used_outside=outside,
                gpu_type=gpu_type,
            )
        )
        return self

    def nodes_(self, count: int, gpus: int, prefix: str = "n", **labels: str) -> ClusterBuilder:
        for i in range(count):
            self.node(f"{prefix}{i}", gpus=gpus, **labels)
        return self

    def queue(
        self,
        name: str,
        parent: str | None = None,
        gpu_quota: float = 0,
        gpu_limit: float = UNLIMITED,
        weight: float = 1,
        priority: int = 100,
        cpu_quota: float = UNLIMITED,
        memory_quota: float = UNLIMITED,
        **extra: Any,
    ) -> ClusterBuilder:
        self.queues.append(
            QueueInfo(
                name,
                parent,
                priority,
                quota=(gpu_quota, cpu_quota, memory_quota),
                limit=(gpu_limit, UNLIMITED, UNLIMITED),
                over_quota_weight=(weight, 1, 1),
                **extra,
            )
        )
        return self

    # -- jobs

    def job(
        self,
        name: str,
        queue: str,
        gpu: float = 1,
        cpu: float = 1,
        memory: float = GI,
        gpu_memory: float = 0,
        priority: str | int = "train",
        min_member: int = 0,
        created_at: float | None = None,
        preemptible: bool | None = None,
        topology: TopologyConstraint | None = None,
        node_selector: dict[str, str] | None = None,
        spread: str = "",
        gpu_types: tuple[str, ...] = (),
        mixed_gpu_types: bool = False,
        tenant: str | None = None,
    ) -> ClusterBuilder:
        value = PRIORITY[priority] if isinstance(priority, str) else priority
        self._request = Request(gpu=0 if gpu_memory else gpu, gpu_memory=gpu_memory, cpu=cpu, memory=memory)
        self._job = JobInfo(
            name,
            queue,
            [],
            priority=value,
            preemptible=value < 100 if preemptible is None else preemptible,
            min_member=min_member,
            created_at=float(len(self.jobs)) if created_at is None else created_at,
            topology=topology,
            node_selector=node_selector or {},
            spread=spread,
            gpu_types=gpu_types,
            mixed_gpu_types=mixed_gpu_types,
            tenant=tenant,
        )
        self.jobs.append(self._job)
        return self

    def _task(
        self,
        status: TaskStatus,
        node: str | None = None,
        group: int | None = None,
        since: float = 0.0,
        count: int = 1,
        affinity: NodeAffinity | None = None,
    ) -> ClusterBuilder:
        assert self._job is not None, "call job() first"
        for _ in range(count):
            name = f"{self._job.name}-{len(self._job.tasks)}"
            self._job.tasks.append(
                TaskInfo(name, status, self._request, node, group, since, node_affinity=affinity)
            )
        return self

    def pending(self, count: int = 1, affinity: NodeAffinity | None = None) -> ClusterBuilder:
        return self._task(TaskStatus.PENDING, count=count, affinity=affinity)

    def running(
        self,
        node: str,
        group: int | None = None,
        since: float = -3600,
        count: int = 1,
        affinity: NodeAffinity | None = None,
    ) -> ClusterBuilder:
        return self._task(TaskStatus.RUNNING, node, group, since, count, affinity)

    def releasing(self, node: str, group: int | None = None) -> ClusterBuilder:
        return self._task(TaskStatus.RELEASING, node, group)

    def failed(self, since: float = 0.0) -> ClusterBuilder:
        return self._task(TaskStatus.FAILED, since=since)

    def runtime(
        self, expected: float | None = None, limit: float | None = None, ran: float = 0.0
    ) -> ClusterBuilder:
        """The job's expected and max run time (seconds), and what its earlier runs took."""
        assert self._job is not None, "call job() first"
        self._job.expected_runtime, self._job.max_runtime, self._job.ran = expected, limit, ran
        return self

    def grows(self) -> ClusterBuilder:
        """An autoscaler may add nodes (ClusterSnapshot.can_grow)."""
        self._can_grow = True
        return self

    def build(self) -> ClusterSnapshot:
        queues = self.queues or [QueueInfo("default", quota=(UNLIMITED,) * 3)]
        return ClusterSnapshot(list(self.nodes), list(queues), list(self.jobs), can_grow=self._can_grow)


def req(key: str, operator: str, *values: str) -> NodeRequirement:
    """One matchExpressions entry: req("gpu", "In", "a100", "h100")."""
    return NodeRequirement(key, operator, values)


def name_req(operator: str, *names: str) -> NodeRequirement:
    """One matchFields entry on the node's name."""
    return NodeRequirement("metadata.name", operator, names, field=True)


def affinity(*terms: Sequence[NodeRequirement], **selector: str) -> NodeAffinity:
    """Terms (ORed), each a list of requirements (ANDed); keyword pairs: the task's own
    nodeSelector."""
    made = tuple(
        NodeSelectorTerm(tuple(r for r in t if not r.field), tuple(r for r in t if r.field)) for t in terms
    )
    return NodeAffinity.of(made, selector)


def cycle(snap: ClusterSnapshot, *actions: str, now: float = 0.0, **config: Any) -> CycleResult:
    cfg = SchedulerConfig(**config)
    if actions:
        cfg = replace(cfg, actions=actions)
    return run_cycle(snap, cfg, now)


def outcome(result: CycleResult) -> dict[str, set[str]]:
    """job -> set of 'bind@node' / 'pipeline@node' / 'evict@node' seen in the decisions."""
    out: dict[str, set[str]] = {}
    for d in result.decisions:
        kind = type(d).__name__.lower()
        out.setdefault(d.job, set()).add(f"{kind}@{d.node}")
    return out
