"""Why a job could not be placed, in words a person understands, naming the constraint."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kai_ray.core.cluster import EPS, Task
from kai_ray.core.model import Request
from kai_ray.core.placement import Placer
from kai_ray.core.quantity import format_bytes

__all__ = ["describe_request", "explain_unplaced", "never_fits"]


def describe_request(req: Request) -> str:
    parts = []
    if req.gpu_memory > 0:
        parts.append(f"{format_bytes(req.gpu_memory)} of GPU memory")
    elif req.gpu > 0:
        parts.append(f"{req.gpu:g} GPU")
    if req.cpu > 0:
        parts.append(f"{req.cpu:g} CPU")
    if req.memory > 0:
        parts.append(f"{format_bytes(req.memory)} memory")
    parts.extend(f"{v:g} {k}" for k, v in req.extended)
    return ", ".join(parts) or "no resources"


def never_fits(placer: Placer, task: Task, mask: np.ndarray) -> bool:
    """True when no matching node could hold the task even if it were empty."""
    nodes = placer.state.nodes
    ok = mask.copy()
    for col in np.flatnonzero(task.demand):
        ok &= nodes.capacity[:, col] >= task.demand[col] - EPS
    if task.fraction_request:
        ok &= nodes.gpus >= 1
        if task.request.gpu_memory > 0:
            ok &= nodes.device_memory >= task.request.gpu_memory - EPS
    return not ok.any()


def explain_unplaced(placer: Placer, tasks: Sequence[Task]) -> str:
    """The constraint that blocked placing `tasks` (a gang, or one elastic task)."""
    job = tasks[0].job
    nodes = placer.state.nodes
    mask = placer.base_mask(job)
    selector = job.info.node_selector
    if not mask.any():
        if selector:
            wanted = ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
            return f"no schedulable node matches nodeSelector {wanted}"
        return "no schedulable node in the cluster"
    task = tasks[0]
    what = describe_request(task.request)
    if never_fits(placer, task, mask):
        return f"each task asks for {what}: no node is that large, even when empty"
    fitting = int(placer.fits(task, mask, future=True).sum())
    n = len(tasks)
    gang = f"gang of {n} tasks ({what} each)" if n > 1 else f"task ({what})"
    constraint = job.info.topology
    if constraint is not None and constraint.required:
        return _topology_reason(placer, tasks, mask, constraint.required, gang)
    if job.info.spread == "required":
        own = len({t.node for t in job.tasks if t.status.is_active and t.node >= 0})
        return (
            f"{gang} must spread one task per node: {fitting} nodes have room for a task "
            f"(now or once released) and {own} of them may already hold one of its tasks"
            if own
            else f"{gang} must spread one task per node: only {fitting} nodes have room for a task"
        )
    free_gpus = float((nodes.idle[mask, 0] + nodes.releasing[mask, 0]).sum())
    largest = float((nodes.idle[mask, 0]).max()) if mask.any() else 0.0
    if fitting == 0:
        outside = float(nodes.outside[mask, 0].sum())
        held = f"; work outside the scheduler holds {outside:g} GPUs" if outside > EPS else ""
        return (
            f"{gang}: no node has room now for even one task "
            f"(free: {free_gpus:g} whole GPUs, largest free node has {largest:g}{held})"
        )
    return (
        f"{gang}: only part of the gang fits at once ({fitting} nodes have room for a task; "
        f"free: {free_gpus:g} whole GPUs, largest free node has {largest:g}); "
        "the gang starts whole or not at all"
    )


def _topology_reason(placer: Placer, tasks: Sequence[Task], mask: np.ndarray, level: str, gang: str) -> str:
    ids, names = placer.domains(level)
    usable = mask & (ids >= 0)
    if not usable.any():
        return f"{gang} must share one {level}, but no matching node has the label {level}"
    nodes = placer.state.nodes
    gpu = tasks[0].fraction_request or tasks[0].demand[0] > 0
    col = 0 if gpu else 1
    free = np.bincount(ids[usable], weights=nodes.idle[usable, col], minlength=len(names))
    need = sum(t.demand[col] for t in tasks)
    unit = "GPUs" if gpu else "CPUs"
    best = int(np.argmax(free))
    return (
        f"{gang} must share one {level}: it needs {need:g} {unit}, the largest free {level} "
        f"({names[best]}) has {free[best]:g}"
    )
