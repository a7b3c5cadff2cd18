"""The snapshot file: what a live scheduler would decide from, as versioned JSON.

`kai-ray snapshot save` writes one (the Ray scheduler actor builds it from its
controller); `kai-ray sim --snapshot FILE` reads it and replays the cycle, with another
scheduler configuration if asked. The format is documented in docs/simulator.md:

    {"format": "kai-ray-snapshot", "version": 1, "source": "ray", "now": 1732300000.0,
     "config": {...SchedulerConfig...}, "nodes": [...], "queues": [...], "jobs": [...],
     "usage": {"queue": [gpu, cpu, memory]}}

Every object's fields are the core's (kai_ray.core.model.snapshot), enums by value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kai_ray.control.snapshot import job_info
from kai_ray.control.workload import Workload
from kai_ray.core import (
    ClusterSnapshot,
    GpuTypeFungibility,
    GpuTypeShare,
    JobInfo,
    NodeInfo,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    Topology,
    TopologyConstraint,
)

__all__ = [
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "SnapshotFile",
    "SnapshotFormatError",
    "build_snapshot",
    "read_snapshot",
    "write_snapshot",
]

SNAPSHOT_FORMAT = "kai-ray-snapshot"
SNAPSHOT_VERSION = 1


class SnapshotFormatError(ValueError):
    """A snapshot document that cannot be read; names the field and the fix."""


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    snapshot: ClusterSnapshot
    config: SchedulerConfig
    now: float
    source: str


def build_snapshot(
    workloads: Iterable[Workload],
    nodes: Iterable[NodeInfo],
    queues: Iterable[QueueInfo],
    node_label: str,
    usage: Mapping[str, tuple[float, float, float]] | None = None,
    can_grow: bool = False,
) -> ClusterSnapshot:
    """The core's input for the live workloads, as the controller's cycle builds it."""
    jobs = [job_info(w, node_label) for w in workloads if not w.terminal]
    return ClusterSnapshot(
        nodes=list(nodes), queues=list(queues), jobs=jobs, usage=dict(usage or {}), can_grow=can_grow
    )


# ---------------------------------------------------------------- writing


def write_snapshot(
    snapshot: ClusterSnapshot, config: SchedulerConfig, now: float, source: str
) -> dict[str, Any]:
    """The JSON document (plain data: json.dumps it)."""
    return {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "source": source,
        "now": now,
        "config": _config_json(config),
        "nodes": [_plain(n) for n in snapshot.nodes],
        "queues": [_queue_json(q) for q in snapshot.queues],
        "jobs": [_job_json(j) for j in snapshot.jobs],
        "usage": {k: list(v) for k, v in snapshot.usage.items()},
        "can_grow": snapshot.can_grow,
    }


def _queue_json(q: QueueInfo) -> dict[str, Any]:
    fungibility = q.gpu_type_fungibility
    return {
        **_plain(q),
        "gpu_types": [_plain(s) for s in q.gpu_types],
        "gpu_type_fungibility": None if fungibility is None else _plain(fungibility),
    }


def _plain(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, tuple):
            value = [list(v) if isinstance(v, tuple) else v for v in value]
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


def _config_json(config: SchedulerConfig) -> dict[str, Any]:
    out = _plain(config)
    out["topologies"] = {name: list(t.levels) for name, t in config.topologies.items()}
    return out


def _job_json(job: JobInfo) -> dict[str, Any]:
    out = _plain(job)
    out["tasks"] = [{**_plain(t), "status": t.status.value, "request": _plain(t.request)} for t in job.tasks]
    out["topology"] = None if job.topology is None else _plain(job.topology)
    return out


# ---------------------------------------------------------------- reading


def read_snapshot(data: Any) -> SnapshotFile:
    """The snapshot of a document; SnapshotFormatError naming the field otherwise."""
    if not isinstance(data, dict) or data.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotFormatError(
            f'format: not a kai-ray snapshot (expected "format": "{SNAPSHOT_FORMAT}"); '
            "write one with `kai-ray snapshot save FILE`"
        )
    if data.get("version") != SNAPSHOT_VERSION:
        raise SnapshotFormatError(
            f"version: {data.get('version')!r} is not supported (this kai-ray reads version "
            f"{SNAPSHOT_VERSION}); save the snapshot again with this kai-ray"
        )
    nodes = [_node(n, i) for i, n in enumerate(_list(data, "nodes"))]
    queues = [_queue(q, i) for i, q in enumerate(_list(data, "queues"))]
    jobs = [_job(j, i) for i, j in enumerate(_list(data, "jobs"))]
    usage = {str(k): _triple(v, f"usage.{k}") for k, v in (data.get("usage") or {}).items()}
    can_grow = data.get("can_grow", False)  # absent in files saved before it existed
    if not isinstance(can_grow, bool):
        raise SnapshotFormatError("can_grow: must be true or false")
    snapshot = ClusterSnapshot(nodes=nodes, queues=queues, jobs=jobs, usage=usage, can_grow=can_grow)
    now = data.get("now")
    if not isinstance(now, int | float):
        raise SnapshotFormatError("now: must be the snapshot's time in seconds")
    return SnapshotFile(
        snapshot, config_from_json(data.get("config") or {}), float(now), str(data.get("source", ""))
    )


def config_from_json(data: Mapping[str, Any]) -> SchedulerConfig:
    data = dict(data)
    topologies = {
        name: Topology(name, tuple(levels)) for name, levels in (data.pop("topologies", None) or {}).items()
    }
    if "actions" in data:
        data["actions"] = tuple(data["actions"])
    config: SchedulerConfig = _build(SchedulerConfig, {**data, "topologies": topologies}, "config")
    return config


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise SnapshotFormatError(f"{key}: must be a list")
    return value


def _triple(value: Any, where: str) -> tuple[float, float, float]:
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise SnapshotFormatError(f"{where}: must be [gpu, cpu, memory]")
    return (float(value[0]), float(value[1]), float(value[2]))


def _pairs(value: Any) -> tuple[tuple[str, float], ...]:
    return tuple((str(k), float(v)) for k, v in value or ())


def _build(cls: Any, data: Any, where: str, tuples: tuple[str, ...] = ()) -> Any:
    if not isinstance(data, dict):
        raise SnapshotFormatError(f"{where}: must be an object")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SnapshotFormatError(
            f"{where}.{unknown[0]}: unknown field; the fields are {', '.join(sorted(known))}"
        )
    values = {k: _triple(v, f"{where}.{k}") if k in tuples else v for k, v in data.items()}
    try:
        return cls(**values)
    except TypeError as exc:
        raise SnapshotFormatError(f"{where}: {exc}") from None


def _queue(data: Any, i: int) -> QueueInfo:
    where = f"queues[{i}]"
    if isinstance(data, dict) and "gpu_types" in data:
        shares = data["gpu_types"] or []
        if not isinstance(shares, list):
            raise SnapshotFormatError(f"{where}.gpu_types: must be a list of per-type shares")
        data = {**data, "gpu_types": tuple(_build(GpuTypeShare, s, f"{where}.gpu_types") for s in shares)}
    if isinstance(data, dict) and data.get("gpu_type_fungibility") is not None:
        own = _build(GpuTypeFungibility, data["gpu_type_fungibility"], f"{where}.gpu_type_fungibility")
        data = {**data, "gpu_type_fungibility": own}
    queue: QueueInfo = _build(QueueInfo, data, where, tuples=("quota", "limit", "over_quota_weight"))
    return queue


def _node(data: Any, i: int) -> NodeInfo:
    if isinstance(data, dict):
        data = {**data, **{k: _pairs(data.get(k)) for k in ("extended", "used_outside") if k in data}}
    node: NodeInfo = _build(NodeInfo, data, f"nodes[{i}]")
    return node


def _job(data: Any, i: int) -> JobInfo:
    where = f"jobs[{i}]"
    if not isinstance(data, dict):
        raise SnapshotFormatError(f"{where}: must be an object")
    tasks = [_task(t, f"{where}.tasks[{k}]") for k, t in enumerate(data.get("tasks") or [])]
    topology = data.get("topology")
    constraint = None if topology is None else _build(TopologyConstraint, topology, f"{where}.topology")
    types = data.get("gpu_types") or []
    if not isinstance(types, list | tuple) or not all(isinstance(t, str) and t for t in types):
        fix = "must be a list of GPU type names, most preferred first"
        raise SnapshotFormatError(f"{where}.gpu_types: {fix}")
    fields = {**data, "tasks": tasks, "topology": constraint, "gpu_types": tuple(types)}
    job: JobInfo = _build(JobInfo, fields, where)
    return job


def _task(data: Any, where: str) -> TaskInfo:
    if not isinstance(data, dict):
        raise SnapshotFormatError(f"{where}: must be an object")
    try:
        status = TaskStatus(data.get("status"))
    except ValueError:
        names = ", ".join(s.value for s in TaskStatus)
        raise SnapshotFormatError(f"{where}.status: {data.get('status')!r} is not one of {names}") from None
    request_data = dict(data.get("request") or {})
    request_data["extended"] = _pairs(request_data.get("extended"))
    request = _build(Request, request_data, f"{where}.request")
    task: TaskInfo = _build(TaskInfo, {**data, "status": status, "request": request}, where)
    return task
