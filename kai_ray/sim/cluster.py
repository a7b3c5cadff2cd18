"""The simulated cluster's nodes (`--cluster`) and its queues (`--queues`, or one per
trace team with equal quotas)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kai_ray.config.base import read_yaml
from kai_ray.config.errors import ConfigError
from kai_ray.config.queues import load_queues
from kai_ray.core import DEFAULT_GPU_TYPE, HOSTNAME_LABEL, NodeInfo, QueueInfo
from kai_ray.core.model.quantity import parse_quantity
from kai_ray.sim.gputypes import GPU_TYPE_FIX, comma_types, gpu_type_problem

__all__ = ["NODE_CPU", "NODE_MEMORY", "parse_cluster", "sim_queues", "team_queues"]

NODE_CPU = 64.0  # a `NxG` node: cores and memory of a typical 8-GPU machine
NODE_MEMORY = 512 * 1024**3
# NODESxGPUS, optionally :TYPE,TYPE (the nodes split evenly between those GPU types).
_SHORT = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?::(.*))?$")
_FIX = (
    "write NODESxGPUS (e.g. 250x8, or 250x8:H100,A100 for GPU types) or the path of a cluster "
    "file (docs/simulator.md)"
)
_KEYS = ("count", "gpus", "cpu", "memory", "gpuMemory", "gpu_type", "labels")


def parse_cluster(spec: str) -> list[NodeInfo]:
    """`250x8` (250 nodes of 8 GPUs), `250x8:H100,A100` (the same, split evenly between
    the GPU types) or a YAML file: `nodes: [{count, gpus, cpu, memory, gpuMemory,
    gpu_type, labels}]`."""
    m = _SHORT.match(spec)
    if m:
        count, gpus = int(m.group(1)), int(m.group(2))
        if count < 1:
            raise ConfigError(f"{spec!r}: at least one node; {_FIX}", field="--cluster")
        types = _short_types(spec, m.group(3))
        return _nodes(
            [{"count": n, "gpus": gpus, "gpu_type": t} for n, t in _split(count, types) if n],
            where="--cluster",
        )
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"{spec!r} is neither NODESxGPUS nor a file; {_FIX}", field="--cluster")
    data = read_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise ConfigError("needs `nodes:`, a list of {count, gpus, cpu, memory}", path=path, field="nodes")
    try:
        return _nodes(data["nodes"], where="nodes")
    except ConfigError as exc:
        raise exc.at(path) from None


def _nodes(groups: Sequence[Any], where: str) -> list[NodeInfo]:
    nodes: list[NodeInfo] = []
    for i, g in enumerate(groups):
        at = f"{where}[{i}]"
        if not isinstance(g, dict):
            raise ConfigError("must be a map {count, gpus, cpu, memory}", field=at)
        unknown = set(g) - set(_KEYS)
        if unknown:
            raise ConfigError(f"unknown key {sorted(unknown)[0]!r}; use {', '.join(_KEYS)}", field=at)
        count = _whole(g.get("count", 1), f"{at}.count", 1)
        gpus = _whole(g.get("gpus", 0), f"{at}.gpus", 0)
        cpu = _amount(g.get("cpu", NODE_CPU), f"{at}.cpu")
        memory = _amount(g.get("memory", NODE_MEMORY), f"{at}.memory")
        gpu_memory = _amount(g.get("gpuMemory", 80 * 1024**3), f"{at}.gpuMemory")
        gpu_type = _gpu_type(g.get("gpu_type", DEFAULT_GPU_TYPE), f"{at}.gpu_type")
        labels = {str(k): str(v) for k, v in (g.get("labels") or {}).items()}
        for _ in range(count):
            name = f"node-{len(nodes):05d}"
            nodes.append(
                NodeInfo(
                    name,
                    gpus,
                    cpu,
                    memory,
                    gpu_memory,
                    labels={**labels, HOSTNAME_LABEL: name},
                    gpu_type=gpu_type,
                )
            )
    return nodes


def _gpu_type(value: object, field: str) -> str:
    problem = gpu_type_problem(value)
    if problem is not None:
        raise ConfigError(f"{problem}; {GPU_TYPE_FIX}, or leave it out for {DEFAULT_GPU_TYPE!r}", field=field)
    assert isinstance(value, str)
    return value


def _short_types(spec: str, text: str | None) -> list[str]:
    """The GPU types after `NxG:` (none: every node "default")."""
    return [DEFAULT_GPU_TYPE] if text is None else comma_types(text, "--cluster", spec)


def _split(count: int, types: list[str]) -> list[tuple[int, str]]:
    """`count` nodes split evenly between `types`; the first types get one more each
    when it does not divide."""
    share, extra = divmod(count, len(types))
    return [(share + (1 if i < extra else 0), t) for i, t in enumerate(types)]


def _whole(value: Any, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{value!r}: must be a whole number >= {minimum}", field=field)
    return value


def _amount(value: Any, field: str) -> float:
    try:
        amount = parse_quantity(value)
    except ValueError as exc:
        raise ConfigError(f"{exc}; write a number or a quantity such as 512Gi", field=field) from None
    if amount < 0:
        raise ConfigError(f"{value!r}: must be >= 0", field=field)
    return amount


def team_queues(teams: Sequence[str], nodes: Sequence[NodeInfo]) -> list[QueueInfo]:
    """One queue per team, each with an equal quota of every resource."""
    n = max(1, len(teams))
    total = (
        float(sum(x.gpus for x in nodes)) / n,
        float(sum(x.cpu for x in nodes)) / n,
        float(sum(x.memory for x in nodes)) / n,
    )
    return [QueueInfo(name=t, quota=total) for t in sorted(teams)]


def sim_queues(path: str | None, teams: Sequence[str], nodes: Sequence[NodeInfo]) -> list[QueueInfo]:
    """The queues file's queues (every trace team must be a leaf of it), or team_queues."""
    if path is None:
        return team_queues(teams, nodes)
    queues = load_queues(path)
    parents = {q.parent for q in queues}
    leaves = {q.name for q in queues if q.name not in parents}
    missing = sorted(set(teams) - leaves)
    if missing:
        raise ConfigError(
            f"the trace has jobs in queue {missing[0]!r} ({len(missing)} such queues), which is not a "
            "leaf queue of this file; add it, or leave --queues out for one queue per team",
            path=path,
        )
    return queues
