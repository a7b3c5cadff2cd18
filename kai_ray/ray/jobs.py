"""Ray Jobs admitted by the scheduler: submitted to Ray only once their reservation is
ready (a job waiting inside Ray fails after 900 s and asks the autoscaler for nodes).

The job gets its reservation through environment variables: KAI_RAY_WORKLOAD (the
workload id) and KAI_RAY_PLACEMENT_GROUP_ID (its group); `kai_ray.reservation_strategy()`
inside the job turns them into a scheduling strategy for its tasks and actors.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import ray

from kai_ray.ray.workload import Workload

__all__ = ["ENV_ATTEMPT", "ENV_GROUP", "ENV_PLACEMENT", "ENV_WORKLOAD", "RayJobRunner"]

log = logging.getLogger(__name__)
ENV_WORKLOAD = "KAI_RAY_WORKLOAD"
ENV_GROUP = "KAI_RAY_PLACEMENT_GROUP_ID"
ENV_ATTEMPT = "KAI_RAY_ATTEMPT"
ENV_PLACEMENT = "KAI_RAY_PLACEMENT"


class RayJobRunner:
    """JobSubmissionClient, created on first use (the dashboard may start after us)."""

    def __init__(self, address: str | None = None) -> None:
        self._address = address
        self._client: Any = None

    def _jobs(self) -> Any:
        if self._client is None:
            from ray.job_submission import JobSubmissionClient

            # A bootstrap (GCS) address lets the SDK find the dashboard and the auth token.
            self._client = JobSubmissionClient(self._address or ray.get_runtime_context().gcs_address)
        return self._client

    def submit(self, w: Workload) -> str:
        env = dict(w.spec.runtime_env)
        env_vars = {
            **env.get("env_vars", {}),
            ENV_WORKLOAD: w.id,
            ENV_GROUP: w.group_ids.get(w.gang_group, ""),
            ENV_ATTEMPT: str(w.attempt),
            # Where each worker was admitted and with what: a handed-off job reserves the
            # same itself (kai_ray.train_scaling_config builds Ray Train's config from it).
            ENV_PLACEMENT: json.dumps(
                {
                    "nodes": [w.slots[t].node for t in sorted(w.slots, key=lambda t: int(t[1:]))],
                    "resources_per_worker": w.spec.resources_per_worker,
                    "handed_off": w.handed_off,
                }
            ),
        }
        env["env_vars"] = env_vars
        submission_id = f"{w.id}-{w.attempt}"  # idempotent per admission
        try:
            return str(
                self._jobs().submit_job(
                    entrypoint=w.spec.entrypoint,
                    submission_id=submission_id,
                    runtime_env=env,
                    metadata={**w.spec.metadata, "kai-ray/queue": w.spec.queue, "kai-ray/workload": w.id},
                    entrypoint_num_cpus=0,  # the driver holds nothing; its work uses the group
                )
            )
        except Exception as exc:
            if "already exists" in str(exc):
                return submission_id
            raise

    def status(self, submission_id: str) -> str:
        try:
            return str(self._jobs().get_job_status(submission_id).value)
        except Exception as exc:
            log.warning("status of Ray job %s: %s", submission_id, exc)
            return "UNKNOWN"

    def stop(self, submission_id: str) -> None:
        try:
            self._jobs().stop_job(submission_id)
        except Exception as exc:
            log.warning("stopping Ray job %s: %s", submission_id, exc)
