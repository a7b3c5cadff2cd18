"""Scenario results as text (`PASS name` / `FAIL name` + mismatches) or one JSON object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kai_ray.config.errors import ConfigError
from kai_ray.core.model.snapshot import TaskStatus
from kai_ray.scenario.runner import ScenarioResult

__all__ = ["final_state", "report_json", "result_json", "text_lines"]


def text_lines(result: ScenarioResult) -> list[str]:
    """`PASS name`, or `FAIL name` and then one indented line per mismatch; a job the
    scenario expected differently and the core left pending also gets the core's reason."""
    if result.passed:
        return [f"PASS {result.name}"]
    lines = [f"FAIL {result.name}"]
    if result.error is not None:
        lines += ["  error: " + line for line in result.error.rstrip().splitlines()[:1]]
        lines += ["    " + line for line in result.error.rstrip().splitlines()[1:]]
    explained: set[str] = set()
    for mismatch in result.mismatches:
        lines.append(f"  {mismatch}")
        reason = result.pending_reasons.get(mismatch.job)
        if reason and mismatch.job not in explained and mismatch.actual == "Pending":
            lines.append(f"    why {mismatch.job} is pending: {reason}")
            explained.add(mismatch.job)
    return lines


def final_state(result: ScenarioResult) -> dict[str, Any]:
    """Every job -> its tasks after the last round; gpuGroup is the device index."""
    return {
        job.name: {
            "tasks": [
                {
                    "name": t.name,
                    "status": t.status.value,
                    "node": t.node,
                    "gpuGroup": t.gpu_group if t.node is not None else None,
                }
                for t in job.tasks
            ]
        }
        for job in result.jobs
    }


def result_json(result: ScenarioResult) -> dict[str, Any]:
    data: dict[str, Any] = {
        "file": result.file,
        "name": result.name,
        "passed": result.passed,
        "mismatches": [m.to_json() for m in result.mismatches],
        "final": final_state(result),
        "pendingReasons": _pending_reasons(result),
    }
    if result.error is not None:
        data["error"] = result.error
    return data


def _pending_reasons(result: ScenarioResult) -> dict[str, str]:
    # Only jobs that are still pending after the last round: a reason for a job the
    # core placed in that very cycle would only confuse.
    pending = {job.name for job in result.jobs if any(t.status is TaskStatus.PENDING for t in job.tasks)}
    return {job: why for job, why in result.pending_reasons.items() if job in pending}


def report_json(results: Sequence[ScenarioResult], invalid: Sequence[ConfigError] = ()) -> dict[str, Any]:
    """The whole run; invalid files go under the extra key `invalid`."""
    passed = sum(r.passed for r in results)
    data: dict[str, Any] = {
        "passed": passed,
        "failed": len(results) - passed,
        "results": [result_json(r) for r in results],
    }
    if invalid:
        data["invalid"] = [{"file": e.path, "error": str(e)} for e in invalid]
    return data
