"""A thin client of the scheduler actor, and the helpers every front end shares (the
user API in kai_ray.api, the CLI, the benchmark): workload ids, specs, queue arguments."""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import ray

from kai_ray.control import OWNER_KEY, QueueChangeError, SubmitError, WorkloadSpec
from kai_ray.control.tenants import TOKEN_ENV
from kai_ray.control.validate import accelerator_types, check_accelerator_types, check_runtimes
from kai_ray.core import QueueInfo

__all__ = [
    "QueuesArg",
    "Scheduler",
    "TenantsArg",
    "check_workload_id",
    "load_queue_arg",
    "load_tenants_arg",
    "make_spec",
    "new_workload_id",
    "resolve_token",
    "worker_resources",
]

_List = list  # `Scheduler.list` shadows the builtin inside the class
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")

QueuesArg = str | Path | Sequence[QueueInfo] | Sequence[dict[str, Any]] | None
# A tenants file's path, its document, or the parsed file (kai_ray.config.tenants).
TenantsArg = str | Path | Mapping[str, Any] | Any | None


def load_queue_arg(queues: QueuesArg) -> list[QueueInfo] | None:
    """A queues file path, a list of queue dicts (the file's format) or QueueInfo objects."""
    if queues is None:
        return None
    from kai_ray.config import load_queues, parse_queues

    if isinstance(queues, str | Path):
        return load_queues(queues)
    items = list(queues)
    if not items:
        raise QueueChangeError(
            "queues=[] names no queue; pass the queues to add or update (or leave queues out "
            "to keep the scheduler's)"
        )
    if all(isinstance(q, QueueInfo) for q in items):
        return items  # type: ignore[return-value]
    return parse_queues([items])


def load_tenants_arg(tenants: TenantsArg) -> dict[str, Any] | None:
    """A tenants file path, its document or the parsed file -> the checked document
    (ConfigError naming the entry, the field and the fix)."""
    if tenants is None:
        return None
    from kai_ray.config.tenants import TenantsFile, load_tenants, parse_tenants

    if isinstance(tenants, str | Path):
        return load_tenants(tenants).document()
    if isinstance(tenants, TenantsFile):
        return tenants.document()
    return parse_tenants(tenants).document()


def resolve_token(token: str | None = None) -> str | None:
    """The token given, else $KAI_RAY_TOKEN, else None."""
    return token or os.environ.get(TOKEN_ENV) or None


class Scheduler:
    """A thin client of the scheduler actor; every call is one actor round trip.
    `token` (default: $KAI_RAY_TOKEN) goes with every call that submits, cancels or
    changes something; the scheduler checks it once tenants are configured."""

    def __init__(self, handle: Any, token: str | None = None) -> None:
        self.handle = handle
        self.token = resolve_token(token)

    def _call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        try:
            return ray.get(getattr(self.handle, method).remote(*args, **kwargs), timeout=timeout)
        except ray.exceptions.RayTaskError as exc:
            # A mistake of the caller's (unknown workload, bad queue tree, a token the
            # tenants do not allow: TokenRefused): raise it as is.
            if isinstance(exc.cause, KeyError | ValueError | PermissionError):
                raise exc.cause from None
            raise

    def _signed(self, method: str, *args: Any) -> Any:
        """A call that submits, cancels or changes: it carries the token."""
        return self._call(method, *args, token=self.token)

    def submit(self, spec: WorkloadSpec, wid: str | None = None) -> str:
        """Queue a workload; its id (`wid`, or a new one). Raises SubmitError."""
        wid = check_workload_id(wid) if wid else new_workload_id(spec.name)
        _stamp_owner(_upload_job_files(spec))
        info = self._signed("submit", wid, dataclasses.asdict(spec))
        if "submit_error" in info:
            raise SubmitError(info["submit_error"], code=info.get("code", ""))
        return wid

    def submit_many(self, specs: Sequence[WorkloadSpec]) -> list[str]:
        """Submit together, in one call: one cycle sees them all, and the ids come back
        once all are durable. Raises on the first refused spec (the others are queued).
        A spec given many times (one object) is prepared and sent once."""
        prepared: dict[int, dict[str, Any]] = {}
        items = []
        for s in specs:
            if id(s) not in prepared:
                prepared[id(s)] = dataclasses.asdict(_stamp_owner(_upload_job_files(s)))
            items.append((new_workload_id(s.name), prepared[id(s)]))
        answers = self._signed("submit_many", items)
        for a in answers:
            if "submit_error" in a:
                raise SubmitError(a["submit_error"], code=a.get("code", ""))
        return [a["id"] for a in answers]

    def wait(self, wid: str, states: Sequence[str], timeout: float | None = None) -> dict[str, Any]:
        return self._call("wait", wid, list(states), timeout)  # type: ignore[no-any-return]

    def info(self, wid: str) -> dict[str, Any]:
        return self._call("info", wid)  # type: ignore[no-any-return]

    def explain(self, wid: str) -> dict[str, Any]:
        return self._call("explain", wid)  # type: ignore[no-any-return]

    def eta(self, wid: str) -> dict[str, Any] | None:
        return self._call("eta", wid)  # type: ignore[no-any-return]

    def cancel(self, wid: str) -> dict[str, Any]:
        """Cancel a workload (once tenants are configured: one's own, or any as an admin)."""
        return self._signed("cancel", wid)  # type: ignore[no-any-return]

    def cancel_many(self, ids: Sequence[str]) -> int:
        """Cancel several workloads in one call (one write); how many were cancelled."""
        return self._signed("cancel_many", list(ids))  # type: ignore[no-any-return]

    def finish(self, wid: str, attempt: int, ok: bool, error: str = "") -> dict[str, Any]:
        return self._call("finish", wid, attempt, ok, error)  # type: ignore[no-any-return]

    def list(self, include_finished: bool = True) -> _List[dict[str, Any]]:
        return self._call("list_workloads", include_finished)  # type: ignore[no-any-return]

    def queues(self) -> _List[dict[str, Any]]:
        return self._call("queues")  # type: ignore[no-any-return]

    def status(self) -> dict[str, Any]:
        return self._call("status")  # type: ignore[no-any-return]

    def dashboard(self) -> dict[str, Any]:
        """Where the scheduler's dashboard listens: {"url", "host", "port", "token_required"}."""
        return self._call("dashboard_info")  # type: ignore[no-any-return]

    def serve_dashboard(self, host: str, port: int, token: str | None = None) -> dict[str, Any]:
        """Move the dashboard to host:port (a host other than loopback needs a token, or
        Ray's token auth). Raises ValueError, the dashboard unchanged, when refused."""
        answer: dict[str, Any] = self._call("serve_dashboard", host, port, token)
        if "error" in answer:
            raise ValueError(answer["error"])
        return answer

    def snapshot(self) -> dict[str, Any]:
        """The scheduler's state as a snapshot document (kai_ray.control.snapshotfile)."""
        return self._call("snapshot")  # type: ignore[no-any-return]

    def apply_queues(self, queues: QueuesArg, prune: bool = False) -> dict[str, Any]:
        """Add or update queues, keeping the others (`prune`: remove those not given).
        Returns what changed ({"added", "updated", "unchanged", "removed", "kept",
        "summary"}); raises QueueChangeError, changing nothing, when refused."""
        infos = load_queue_arg(queues) or []
        return _changed(self._signed("apply_queues", [dataclasses.asdict(q) for q in infos], prune))

    def delete_queues(self, names: Sequence[str]) -> dict[str, Any]:
        """Remove queues that hold no workloads; raises QueueChangeError otherwise."""
        return _changed(self._signed("delete_queues", list(names)))

    # ------------------------------------------------------------ tenants (kai_ray.control.tenants)

    def apply_tenants(self, tenants: TenantsArg) -> dict[str, Any]:
        """Replace the tenants file (an admin's token once tenants are configured):
        {"tenants", "admins", "summary"}. ConfigError for a bad file, nothing changed."""
        from kai_ray.config.errors import ConfigError

        answer: dict[str, Any] = self._signed("apply_tenants", load_tenants_arg(tenants))
        if "error" in answer:
            raise ConfigError(answer["error"])
        return answer

    def clear_tenants(self) -> dict[str, Any]:
        """Stop checking tokens (an admin's token): every caller is trusted again."""
        return self._signed("apply_tenants", None)  # type: ignore[no-any-return]

    def tenants(self) -> dict[str, Any]:
        """The tenants and admins configured (names, roles, labels; never the hashes)."""
        return self._call("tenants")  # type: ignore[no-any-return]

    def whoami(self) -> dict[str, Any]:
        """Whom this client's token names: {"configured", "name", "admin", "labels"}."""
        return self._signed("whoami")  # type: ignore[no-any-return]


def _changed(answer: dict[str, Any]) -> dict[str, Any]:
    if "error" in answer:
        raise QueueChangeError(answer["error"])
    return answer


def _upload_job_files(spec: WorkloadSpec) -> WorkloadSpec:
    """A job's working_dir and py_modules go to Ray's GCS now, from the submitter's files."""
    if spec.kind == "job" and spec.runtime_env:
        from kai_ray.ray.jobs import upload_runtime_env

        try:
            spec.runtime_env = upload_runtime_env(spec.runtime_env)
        except ValueError as exc:
            raise SubmitError(str(exc)) from None
    return spec


def check_workload_id(wid: str) -> str:
    """A caller-chosen id (`--submission-id`): it names placement groups and Ray jobs."""
    if not _ID.fullmatch(wid):
        raise SubmitError(
            f"workload id {wid!r}: use 1 to 63 letters, digits, '-' or '_', starting with a letter or digit"
        )
    return wid


def _stamp_owner(spec: WorkloadSpec) -> WorkloadSpec:
    """Functions and blocks live as long as this driver: the scheduler cancels them when
    its Ray job ends. Jobs run on their own and are not stamped."""
    if spec.kind != "job":
        spec.metadata.setdefault(OWNER_KEY, ray.get_runtime_context().get_job_id())
    return spec


def new_workload_id(name: str = "") -> str:
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:24].strip("-")
    return f"{stem + '-' if stem else ''}{uuid.uuid4().hex[:10]}"


def make_spec(
    queue: str,
    priority: str | int = "train",
    *,
    preemptible: bool | None = None,
    workers: int = 1,
    resources_per_worker: Mapping[str, Any] | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    memory: float | str | None = None,
    resources: Mapping[str, Any] | None = None,
    min_workers: int = 0,
    strategy: str = "PACK",
    name: str = "",
    grace_period: float = 5.0,
    on_preempt: Literal["requeue", "fail"] = "requeue",
    admission_timeout: float = 30.0,
    kind: Literal["function", "block", "job"] = "function",
    accelerator_type: str | Sequence[str] | None = None,
    **extra: Any,
) -> WorkloadSpec:
    """A workload spec from what a user writes. A worker's resources come in Ray's names
    (`num_cpus`, `num_gpus`, `memory`, `resources`, as in `@ray.remote`) or as one
    `resources_per_worker` dict; without either, a worker takes one CPU.

    `accelerator_type`: the GPU type its workers need ("A100"), or the types it accepts
    in order of preference (["H100", "A100"]); its gang runs on one of them unless
    `mixed_accelerator_types=True`. Unlike Ray's own option it adds no
    `accelerator_type:` resource to the bundles: kai-ray chooses nodes of the type."""
    from kai_ray.config import PriorityClasses

    unknown = sorted(set(extra) - _SPEC_FIELDS)
    if unknown:
        raise TypeError(
            f"kai_ray.workload(): unknown option {unknown[0]!r}; the options are "
            f"{', '.join(sorted(_OPTIONS))}"
        )
    per_worker = worker_resources(resources_per_worker, num_cpus, num_gpus, memory, resources)
    resolved = PriorityClasses().resolve(priority, preemptible)
    spec = WorkloadSpec(
        queue=queue,
        priority=resolved.value,
        preemptible=resolved.preemptible,
        priority_class=str(priority),
        workers=workers,
        min_workers=min_workers,
        resources_per_worker=per_worker,
        strategy=strategy.upper(),
        kind=kind,
        name=name,
        on_preempt=on_preempt,
        grace_period=grace_period,
        admission_timeout=admission_timeout,
        accelerator_type=accelerator_types(accelerator_type),
        **extra,
    )
    check_runtimes(spec)  # "2h" -> 7200.0 here: a retried submission compares the same
    check_accelerator_types(spec)
    return spec


def worker_resources(
    resources_per_worker: Mapping[str, Any] | None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    memory: float | str | None = None,
    resources: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One worker's resources in Ray's names; a resource given twice is a TypeError."""
    ray_style = {k: v for k, v in (("CPU", num_cpus), ("GPU", num_gpus), ("memory", memory)) if v is not None}
    for key, value in (resources or {}).items():
        if key in ("CPU", "GPU"):
            raise TypeError(f"resources={{{key!r}: ...}}: use num_{key.lower()}s= for {key}, as in Ray")
        ray_style[key] = value
    if resources_per_worker is None:
        return {"CPU": 1, **ray_style} if "CPU" not in ray_style else ray_style
    twice = sorted(set(ray_style) & set(resources_per_worker))
    if twice:
        raise TypeError(
            f"{twice[0]} is given twice (in resources_per_worker and as a Ray-style option); give it once"
        )
    return {**resources_per_worker, **ray_style}


_SPEC_FIELDS = {f.name for f in dataclasses.fields(WorkloadSpec)}
_OPTIONS = (_SPEC_FIELDS - {"priority_class", "kind"}) | {"num_cpus", "num_gpus", "memory", "resources"}
