"""What the scheduler refuses before anything is queued, with the field and the fix in
the message. The rules a workload's fields must keep are stated once, for every front
end: its queue (core.queues.leaf_queue_problem: the core leaves a Kubernetes gang in a
missing queue out of the cycle with the same words), its priority class and
preemptibility (config.priority: Ray's submissions, scenario files and Kubernetes'
labels), and here its size, strategy and whether the cluster could ever hold it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from kai_ray.control.snapshot import (
    ACCELERATOR_PREFIX,
    job_info,
    parse_resources,
    request_for,
    resource_gpu_types,
)
from kai_ray.control.workload import Workload, WorkloadSpec
from kai_ray.core import JobInfo, NodeInfo, QueueInfo, Request, device_share, gang_never_fits
from kai_ray.core.model.quantity import parse_run_time
from kai_ray.core.state.access import AccessPath, refusal
from kai_ray.core.state.queues import leaf_queue_problem, listing

__all__ = [
    "STRATEGIES",
    "SubmitError",
    "accelerator_types",
    "check_accelerator_types",
    "check_access",
    "check_runtimes",
    "largest_fit",
    "listing",
    "queue_problem",
    "same_spec",
    "validate_spec",
]

STRATEGIES = frozenset({"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"})


class SubmitError(ValueError):
    """A workload the scheduler refuses; the message names the field and the fix.
    `code`: the rule's reason code where a queue's access rule refused it (else "")."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def queue_problem(name: str, queues: Sequence[QueueInfo]) -> str:
    """Why a workload may not go to queue `name` ("" when it may): the core's rule
    (leaf_queue_problem), on the queues as given."""
    return leaf_queue_problem(name, {q.name: q.parent for q in queues})


def check_access(spec: WorkloadSpec, paths: Mapping[str, AccessPath], closed_queues: bool) -> None:
    """Refuse at the door what its queue's access rule would never let run (the core's
    rule, core/state/access.py: a tenant not admitted, a priority over the ceiling).
    `paths`: each queue's rules (core paths_of)."""
    rules = paths.get(spec.queue, ())
    if not rules and not (closed_queues and spec.tenant is not None):
        return
    probe = JobInfo(
        spec.name or "workload",
        spec.queue,
        [],
        priority=spec.priority,
        tenant=spec.tenant,
        tenant_labels=spec.tenant_labels,
    )
    said = refusal(probe, rules, closed_queues)
    if said is not None:
        raise SubmitError(f"{said.text} [{said.code}]", code=said.code)


def check_runtimes(spec: WorkloadSpec) -> None:
    """expected_runtime and max_runtime: seconds above 0 (a duration such as "2h"
    becomes seconds), or None."""
    for name in ("expected_runtime", "max_runtime"):
        value = getattr(spec, name)
        if value is None:
            continue
        try:
            setattr(spec, name, parse_run_time(value))
        except ValueError as exc:
            raise SubmitError(f"{name}={value!r}: {exc}") from None


_TYPES_FIX = "give a type such as 'A100', or a list of them, most preferred first (None: any type)"


def accelerator_types(value: object) -> list[str]:
    """The accelerator_type option as a list of types: one type (a string), or types in
    order of preference (a list); None is any type. SubmitError naming the fix otherwise."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise SubmitError(f"accelerator_type={value!r}: {_TYPES_FIX}")
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise SubmitError(f"accelerator_type={value!r}: {item!r} is not a type name; {_TYPES_FIX}")
    twice = sorted({t for t in items if items.count(t) > 1})
    if twice:
        raise SubmitError(f"accelerator_type={value!r}: {twice[0]!r} is given twice; name each type once")
    return list(items)


def check_accelerator_types(spec: WorkloadSpec) -> None:
    """accelerator_type becomes a list of distinct types; mixed_accelerator_types is a
    bool; a type asked for Ray's way in resources_per_worker is one type, and one the
    option (if given) accepts."""
    spec.accelerator_type = accelerator_types(spec.accelerator_type)
    if not isinstance(spec.mixed_accelerator_types, bool):
        raise SubmitError(f"mixed_accelerator_types={spec.mixed_accelerator_types!r}: give True or False")
    by_hand = resource_gpu_types(spec.resources_per_worker)
    if len(by_hand) > 1:
        raise SubmitError(
            f"resources_per_worker names {len(by_hand)} accelerator types ({', '.join(by_hand)}) but a "
            f"node has one; for any of them use accelerator_type={by_hand!r} instead"
        )
    if by_hand and spec.accelerator_type and by_hand[0] not in spec.accelerator_type:
        raise SubmitError(
            f"resources_per_worker asks for {ACCELERATOR_PREFIX}{by_hand[0]} but "
            f"accelerator_type={spec.accelerator_type!r}; give the type once, with accelerator_type="
        )


def validate_spec(
    spec: WorkloadSpec,
    queues: Sequence[QueueInfo],
    nodes: Sequence[NodeInfo],
    node_label: str,
    *,
    cluster_grows: bool = False,
) -> None:
    """Raise SubmitError for a queue it may not use, bad sizes or strategy, a job without
    a command, a worker no node could hold even when empty, or a gang the whole cluster
    could not hold even when empty (the core's own rule, gang_never_fits). Normalises
    spec.resources_per_worker (quantities such as "16Gi" become numbers).

    `cluster_grows`: an autoscaler may add nodes, so a workload larger than today's
    cluster is accepted; it waits for room (and asks the autoscaler for it)."""
    problem = queue_problem(spec.queue, queues)
    if problem:
        raise SubmitError(problem)
    check_runtimes(spec)
    check_accelerator_types(spec)
    if spec.workers < 1 or not 0 <= spec.min_workers <= spec.workers:
        raise SubmitError(
            f"workers={spec.workers}, min_workers={spec.min_workers}: need "
            "workers >= 1 and 0 <= min_workers <= workers"
        )
    if spec.strategy not in STRATEGIES:
        raise SubmitError(f"strategy={spec.strategy!r}: use one of {sorted(STRATEGIES)}")
    if spec.kind == "job" and not spec.entrypoint.strip():
        raise SubmitError("a job needs an entrypoint command")
    if spec.handoff and spec.kind != "job":
        raise SubmitError("handoff applies to jobs (`kai-ray job submit --handoff`)")
    try:
        spec.resources_per_worker = parse_resources(spec.resources_per_worker)
    except ValueError as exc:
        raise SubmitError(str(exc)) from None
    if cluster_grows:
        return
    why = largest_fit(request_for(spec.resources_per_worker), nodes) or gang_never_fits(
        nodes, job_info(Workload(id="new", spec=spec, created_at=0.0), node_label)
    )
    if why:
        raise SubmitError(why)


def same_spec(first: WorkloadSpec, again: WorkloadSpec) -> bool:
    """Whether a submission under an id already taken asks for the same workload (a
    retried call) rather than another one. Quantities are compared as numbers."""
    try:
        resources = parse_resources(again.resources_per_worker)
        types = accelerator_types(again.accelerator_type)
    except ValueError:
        return False
    return first == dataclasses.replace(again, resources_per_worker=resources, accelerator_type=types)


def largest_fit(request: Request, nodes: Iterable[NodeInfo]) -> str | None:
    """None when some node could hold one worker when empty; else why none can."""
    nodes = [n for n in nodes if not n.unschedulable]
    if not nodes:
        return "the cluster has no schedulable nodes"
    for n in nodes:
        gpu = device_share(request, n.gpu_memory)
        ext = dict(n.extended)
        if (
            gpu <= n.gpus
            and request.cpu <= n.cpu
            and request.memory <= n.memory
            and all(ext.get(k, 0.0) >= v for k, v in request.extended)
        ):
            return None
    return (
        f"one worker asks for {_describe(request)} but the largest node has "
        f"GPU {max(n.gpus for n in nodes)}, CPU {max(n.cpu for n in nodes):g}; "
        "lower resources_per_worker or add a bigger node"
    )


def _describe(r: Request) -> str:
    parts = [f"GPU {r.gpu:g}"] if r.gpu else []
    if r.gpu_memory:
        parts.append(f"gpu_memory {r.gpu_memory:g}B")
    parts.append(f"CPU {r.cpu:g}")
    if r.memory:
        parts.append(f"memory {r.memory:g}B")
    parts += [f"{k} {v:g}" for k, v in r.extended]
    return ", ".join(parts)
