"""Ray Jobs admitted by the scheduler: submitted to Ray only once their reservation is
ready (a job waiting inside Ray fails after 900 s and asks the autoscaler for nodes).

The job gets its reservation through environment variables: KAI_RAY_WORKLOAD (the
workload id) and KAI_RAY_PLACEMENT_GROUP_ID (its group); `kai_ray.reservation_strategy()`
inside the job turns them into a scheduling strategy for its tasks and actors.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

import ray

from kai_ray.control import BackendError, Workload, task_index
from kai_ray.ray.env import ENV_ATTEMPT, ENV_GROUP, ENV_PLACEMENT, ENV_WORKLOAD

__all__ = [
    "ENV_ATTEMPT",
    "ENV_GROUP",
    "ENV_PLACEMENT",
    "ENV_WORKLOAD",
    "RayJobRunner",
    "job_error",
    "package_uris",
    "upload_runtime_env",
]

log = logging.getLogger(__name__)


class RayJobRunner:
    """JobSubmissionClient, created on first use (the dashboard may start after us)."""

    def __init__(self, address: str | None = None) -> None:
        self._address = address
        self._client: Any = None

    def _jobs(self) -> Any:
        if self._client is None:
            from ray.job_submission import JobSubmissionClient

            # A bootstrap (GCS) address lets the SDK find the dashboard and the auth token.
            try:
                self._client = JobSubmissionClient(self._address or ray.get_runtime_context().gcs_address)
            except Exception as exc:  # the dashboard is not up yet: try again later
                raise BackendError(f"Ray's job server is not reachable yet ({exc})", permanent=False) from exc
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
                    "nodes": [w.slots[t].node for t in sorted(w.slots, key=task_index)],
                    "resources_per_worker": w.spec.resources_per_worker,
                    "handed_off": w.handed_off,
                }
            ),
        }
        env["env_vars"] = env_vars
        submission_id = f"{w.id}-{w.attempt}"  # idempotent per admission
        # Which workload this is, beyond its id: an id can come back (--submission-id)
        # after the first workload of that name was pruned, while Ray keeps its old jobs.
        mine = {"kai-ray/workload": w.id, "kai-ray/created-at": repr(w.created_at)}
        try:
            return str(
                self._jobs().submit_job(
                    entrypoint=w.spec.entrypoint,
                    submission_id=submission_id,
                    runtime_env=env,
                    metadata={**w.spec.metadata, "kai-ray/queue": w.spec.queue, **mine},
                    entrypoint_num_cpus=0,  # the driver holds nothing; its work uses the group
                )
            )
        except BackendError:
            raise
        except Exception as exc:
            if "already exists" not in str(exc):
                raise job_error(exc) from exc
        # Submitted already: this attempt, before a restart of the scheduler, or another
        # workload that had this id once.
        theirs = self._jobs().get_job_info(submission_id).metadata or {}
        if all(theirs.get(k) == v for k, v in mine.items()):
            return submission_id
        raise BackendError(
            f"Ray already has a job {submission_id} from an earlier workload with the id {w.id!r}; "
            "submit again with another --submission-id",
            permanent=True,
        )

    def status(self, submission_id: str) -> str:
        try:
            return str(self._jobs().get_job_status(submission_id).value)
        except Exception as exc:
            log.warning("status of Ray job %s: %s", submission_id, exc)
            return "UNKNOWN"

    def outcome(self, submission_id: str) -> str:
        """A short account of how the Ray job ended (exit code, or Ray's own message)."""
        try:
            message = str(self._jobs().get_job_info(submission_id).message or "")
        except Exception as exc:
            log.warning("info of Ray job %s: %s", submission_id, exc)
            return ""
        code = re.search(r"exit code (-?\d+)", message)
        return f"exit code {code.group(1)}" if code else _first_line(message, 160)

    def stop(self, submission_id: str) -> None:
        try:
            self._jobs().stop_job(submission_id)
        except Exception as exc:
            log.warning("stopping Ray job %s: %s", submission_id, exc)


def job_error(exc: Exception) -> BackendError:
    """Ray's answer to a job submission as transient (try again) or permanent (fail the
    workload, saying what to fix). The job server answers 400 to a request it finds
    invalid and 500 when no job agent is up yet; the SDK raises ValueError or TypeError
    for a runtime environment it cannot use before it sends anything."""
    text = _first_line(str(exc))
    if isinstance(exc, ValueError | TypeError):
        return BackendError(f"Ray refused the job's runtime environment: {text}", permanent=True)
    if "status code 4" in str(exc):
        return BackendError(f"Ray refused the job as invalid: {text}", permanent=True)
    return BackendError(f"Ray could not take the job now: {text}", permanent=False)


def package_uris(runtime_env: dict[str, Any]) -> list[str]:
    """The packages a runtime environment refers to in Ray's GCS (`gcs://...` URIs):
    uploaded at submission, kept alive by the scheduler until the job is admitted."""
    uris = [runtime_env.get("working_dir"), *(runtime_env.get("py_modules") or [])]
    return [u for u in uris if isinstance(u, str) and u.startswith("gcs://")]


def _first_line(text: str, limit: int = 300) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def upload_runtime_env(runtime_env: dict[str, Any], address: str | None = None) -> dict[str, Any]:
    """Check a job's runtime environment where it is submitted, and upload its local
    working_dir and py_modules to Ray's GCS as `ray job submit` does: the job may start
    much later, and the scheduler that starts it does not see the submitter's files.
    Raises ValueError naming the field and the fix."""
    from ray.runtime_env import RuntimeEnv

    env = dict(runtime_env)
    working_dir = env.get("working_dir")
    if isinstance(working_dir, str) and "://" not in working_dir:
        path = os.path.abspath(os.path.expanduser(working_dir))
        if not os.path.isdir(path) and not (os.path.isfile(path) and path.endswith(".zip")):
            raise ValueError(
                f"runtime_env working_dir {working_dir!r}: no such directory here; give an existing "
                "directory (or a .zip file), relative to where you submit"
            )
        env["working_dir"] = path
    try:
        RuntimeEnv(**env)  # Ray's own checks of every field (types, unknown keys)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"runtime_env: {_first_line(str(exc))}; fix the runtime environment") from None
    if not _has_local_packages(env):
        return env
    from ray.job_submission import JobSubmissionClient

    try:
        client = JobSubmissionClient(address or ray.get_runtime_context().gcs_address)
    except Exception as exc:
        raise ValueError(
            f"cannot upload the job's files: Ray's job server is not reachable ({exc})"
        ) from None
    try:  # the SDK's own upload, as `ray job submit` does it
        client._upload_working_dir_if_needed(env)
        client._upload_py_modules_if_needed(env)
    except (ValueError, TypeError, OSError, RuntimeError) as exc:
        raise ValueError(f"runtime_env: uploading the job's files failed: {_first_line(str(exc))}") from None
    return env


def _has_local_packages(env: dict[str, Any]) -> bool:
    paths = [env.get("working_dir"), *(env.get("py_modules") or [])]
    return any(isinstance(p, str) and "://" not in p for p in paths)
