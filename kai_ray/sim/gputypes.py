"""GPU types in the simulator (docs/simulator.md, "GPU types"): how a type is written,
how a job's accepted types reach the core, and the figures per type in summary.json.

A type is a name such as `H100` or `NVIDIA-A100-SXM4-80GB`: what Ray calls an
accelerator type and Kubernetes labels `nvidia.com/gpu.product`: any text without spaces, as
in a scenario file, except that the trace lists a job's types in one CSV cell, so its
separators (`|`, `;`) and the comma (the CSV's, and `--gpu-types`') are no part of a name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kai_ray.config.errors import ConfigError
from kai_ray.core import NodeInfo
from kai_ray.sim.series import StepSeries

if TYPE_CHECKING:
    from kai_ray.sim.jobs import JobRun

__all__ = [
    "GPU_TYPE_FIX",
    "TypeRoom",
    "TypeUsage",
    "comma_types",
    "gpu_type_problem",
    "held_share",
    "split_gpu_types",
]

_NAME = re.compile(r"^[^\s|;,]+$")
_SEPARATORS = re.compile(r"[|;]")
GPU_TYPE_FIX = "write a name such as H100 or A100-80GB (no spaces, '|', ';' or ',')"


def gpu_type_problem(value: object) -> str | None:
    """What is wrong with `value` as a GPU type's name, or None when it is one."""
    if not isinstance(value, str):
        return f"{value!r} is not a string"
    if not value:
        return "is empty"
    if not _NAME.match(value):
        return f"{value!r} is not a GPU type's name"
    return None


def comma_types(text: str, flag: str, what: str) -> list[str]:
    """`H100,A100` (a command line's list of types) as names, or a ConfigError naming
    `flag`; `what` is the whole value, as the user wrote it."""
    types = [t.strip() for t in text.split(",")]
    for t in types:
        problem = gpu_type_problem(t)
        if problem is not None:
            raise ConfigError(f"{what!r}: a GPU type {problem}; {GPU_TYPE_FIX}", field=flag)
    if len(set(types)) != len(types):
        raise ConfigError(f"{what!r} names a GPU type twice; name each once", field=flag)
    return types


def split_gpu_types(cell: str) -> tuple[list[str], str | None]:
    """A trace cell's types in preference order (`H100|A100`; `;` also separates) and the
    first problem with them (None when there is none). An empty cell: any type."""
    if not cell.strip():
        return [], None
    names = [part.strip() for part in _SEPARATORS.split(cell)]
    for name in names:
        problem = gpu_type_problem(name)
        if problem is not None:
            return names, f"{cell!r}: a type {problem}"
    if len(set(names)) != len(names):
        return names, f"{cell!r} names a type twice"
    return names, None


class TypeRoom:
    """Whether a gang fits on one of the GPU types it accepts, were the cluster empty.
    The simulator rejects a job that fits on none when it is submitted, as it rejects
    one larger than the whole cluster: it would wait for ever."""

    def __init__(self, nodes: Iterable[NodeInfo]) -> None:
        self.devices: dict[str, list[int]] = {}  # type -> its nodes' GPU counts
        for n in nodes:
            if n.gpus:
                self.devices.setdefault(n.gpu_type, []).append(n.gpus)
        self._seen: dict[tuple[float, int, tuple[str, ...]], str] = {}  # a trace repeats shapes

    def why_not(self, gpus: float, gang: int, types: tuple[str, ...]) -> str:
        """Why `gang` workers of `gpus` GPUs each fit on no type of `types` (its gang
        runs on one type), or "" when one can hold them (or it accepts any type)."""
        if not types or gpus <= 0:
            return ""
        key = (gpus, gang, types)
        if key not in self._seen:
            self._seen[key] = (
                ""
                if any(self._fits(gpus, gang, t) for t in types)
                else (
                    f"it needs {gang} worker(s) of {gpus:g} GPUs on one GPU type, and no type it "
                    f"accepts ({', '.join(types)}) has that many"
                )
            )
        return self._seen[key]

    def _fits(self, gpus: float, gang: int, gpu_type: str) -> bool:
        per_worker = max(gpus, 1.0)  # a fraction still needs a node with a device
        room = sum(g for g in self.devices.get(gpu_type, ()) if g >= per_worker)
        return room >= gpus * gang


class TypeUsage:
    """GPUs held per GPU type over time, and the jobs that ran on each type."""

    def __init__(self, nodes: Iterable[NodeInfo]) -> None:
        self.gpus: dict[str, float] = {}
        for n in nodes:
            self.gpus[n.gpu_type] = self.gpus.get(n.gpu_type, 0.0) + n.gpus
        self.node_type = {n.name: n.gpu_type for n in nodes}
        self.held_now = dict.fromkeys(self.gpus, 0.0)
        self.used = {t: StepSeries() for t in self.gpus}
        self.capacity = {t: StepSeries() for t in self.gpus}  # the type's GPUs (an autoscaler adds some)
        for gpu_type, gpus in self.gpus.items():
            self.capacity[gpu_type].record(0.0, gpus)

    def held(self, t: float, by_type: Iterable[tuple[str, float]]) -> None:
        for gpu_type, delta in by_type:
            self.held_now[gpu_type] += delta
            self.used[gpu_type].record(t, self.held_now[gpu_type])

    def grow(self, t: float, node: NodeInfo, sign: float) -> None:
        """A node joined (sign 1) or left (-1) the cluster."""
        gpu_type = node.gpu_type
        if gpu_type not in self.gpus:
            self.gpus[gpu_type], self.held_now[gpu_type] = 0.0, 0.0
            self.used[gpu_type], self.capacity[gpu_type] = StepSeries(), StepSeries()
        self.gpus[gpu_type] += sign * node.gpus
        self.capacity[gpu_type].record(t, self.gpus[gpu_type])
        self.node_type[node.name] = gpu_type

    def figures(
        self, runs: Sequence[JobRun], makespan: float, jobs: Callable[[Sequence[JobRun]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Per type (sorted by name): its GPUs (their mean over the makespan where an
        autoscaler added some), their mean utilisation over the makespan, and
        `jobs(runs)`'s figures for the jobs that held GPUs of that type."""
        out: dict[str, Any] = {}
        for gpu_type in sorted(self.gpus):
            ran = [r for r in runs if gpu_type in r.ran_on]
            capacity = self.capacity[gpu_type]
            out[gpu_type] = {
                "gpus": capacity.mean(0.0, makespan),
                # as the overall figure is taken
                "gpu_utilisation": held_share(self.used[gpu_type], capacity, makespan),
                **jobs(ran),
            }
        return out


def held_share(used: StepSeries, capacity: StepSeries, end: float) -> float:
    """What was held over what there was, both integrated over [0, end] (at `end` alone
    when end is 0)."""
    if end <= 0:
        return used.last / capacity.last if capacity.last else 0.0
    span = np.array([0.0, end])
    there = float(np.diff(capacity.integral(span))[0])
    return float(np.diff(used.integral(span))[0]) / there if there > 0 else 0.0
