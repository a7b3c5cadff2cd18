"""What the scheduler refuses at submission, with the field and the fix in the message.

Checked before anything is queued, so a bad request never disturbs admitted work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kai_ray.core import NodeInfo, QueueInfo, gang_never_fits
from kai_ray.ray.translate import job_info, largest_fit, parse_resources, request_for
from kai_ray.ray.workload import Workload, WorkloadSpec

__all__ = ["STRATEGIES", "SubmitError", "same_spec", "validate_spec"]

STRATEGIES = frozenset({"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"})


class SubmitError(ValueError):
    """A workload the scheduler refuses; the message names the field and the fix."""


def validate_spec(spec: WorkloadSpec, queues: Sequence[QueueInfo], nodes: Sequence[NodeInfo]) -> None:
    """Raise SubmitError for an unknown or non-leaf queue, bad sizes or strategy, a job
    without a command, a worker no node could hold even when empty, or a gang the whole
    cluster could not hold even when empty (the core's rule). Normalises
    spec.resources_per_worker (quantities such as "16Gi" become numbers)."""
    parents = {q.parent for q in queues}
    if spec.queue not in {q.name for q in queues}:
        known = ", ".join(q.name for q in queues if q.name not in parents)
        raise SubmitError(
            f"queue {spec.queue!r} does not exist; use one of: {known} (or add it with `kai-ray queue apply`)"
        )
    if spec.queue in parents:
        raise SubmitError(f"queue {spec.queue!r} has child queues; submit to a leaf queue")
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
    why = largest_fit(request_for(spec.resources_per_worker), nodes) or gang_never_fits(
        nodes, job_info(Workload(id="new", spec=spec, created_at=0.0))
    )
    if why:
        raise SubmitError(why)


def same_spec(first: WorkloadSpec, again: WorkloadSpec) -> bool:
    """Whether a submission under an id already taken asks for the same workload (a
    retried call) rather than another one. Quantities are compared as numbers."""
    try:
        resources = parse_resources(again.resources_per_worker)
    except ValueError:
        return False
    return first == dataclasses.replace(again, resources_per_worker=resources)
