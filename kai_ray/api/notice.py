"""What a workload sees of the scheduler from the inside: who it is, whether it is being
preempted (time to checkpoint), and the reservation to put its work in."""

from __future__ import annotations

import json
import os
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, get_current_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from kai_ray.control import GROUP_PREFIX, group_owner
from kai_ray.ray.jobs import ENV_GROUP, ENV_PLACEMENT, ENV_WORKLOAD
from kai_ray.ray.kvstore import KVStore, notice_key

__all__ = [
    "current_workload",
    "group_by_id",
    "notice_for",
    "preemption_notice",
    "reservation_placement",
    "reservation_strategy",
    "train_scaling_config",
]

_by_group: dict[str, str | None] = {}  # placement group id -> workload id, per process


def current_workload() -> str | None:
    """The workload this code runs for: the body's process, a Ray job we submitted, or
    any task or actor inside the workload's placement group."""
    wid = os.environ.get(ENV_WORKLOAD)
    if wid:
        return wid
    pg = get_current_placement_group() if ray.is_initialized() else None
    if pg is None:
        return None
    key = pg.id.hex()
    if key not in _by_group:
        from ray.util.placement_group import placement_group_table

        name = placement_group_table(pg).get("name", "")
        _by_group[key] = group_owner(name) if name.startswith(GROUP_PREFIX) else None
    return _by_group[key]


def group_by_id(group_id: str) -> PlacementGroup:
    """A placement group from its hex id (lookups by name only work in the namespace of
    the scheduler's creator)."""
    from ray._raylet import PlacementGroupID

    return PlacementGroup(PlacementGroupID(bytes.fromhex(group_id)))


def notice_for(wid: str) -> dict[str, Any] | None:
    _connect()
    record = KVStore().get(notice_key(wid))  # through the store port: the layout is the store's
    return None if record is None else dict(record.value)  # type: ignore[arg-type]


def preemption_notice() -> dict[str, Any] | None:
    """None while the workload may keep running; else {"reason", "deadline" (epoch
    seconds), "attempt"}: checkpoint now, the reservation goes at the deadline.
    In a Ray job admitted by kai-ray it connects to Ray if the job has not yet."""
    wid = current_workload()
    return notice_for(wid) if wid else None


def _connect() -> None:
    """Code of a workload may ask before its own `ray.init()` (a Ray job's first lines):
    connect as `ray.init()` would there, or say what to do."""
    if ray.is_initialized():
        return
    try:
        ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False)
    except ConnectionError as exc:
        raise RuntimeError(
            f"kai-ray needs a connection to the Ray cluster and found none ({exc}); call ray.init() first"
        ) from None


def reservation_strategy(bundle_index: int = -1) -> PlacementGroupSchedulingStrategy | None:
    """Inside a Ray job admitted by `kai-ray job submit`: a strategy that puts tasks and
    actors into the job's reservation (None when not running under kai-ray)."""
    group_id = os.environ.get(ENV_GROUP)
    pg = group_by_id(group_id) if group_id else get_current_placement_group()
    if pg is None:
        return None
    return PlacementGroupSchedulingStrategy(pg, bundle_index, placement_group_capture_child_tasks=True)


def reservation_placement() -> dict[str, Any] | None:
    """Inside a job admitted by kai-ray: {"nodes": node id per worker,
    "resources_per_worker", "handed_off"}; None outside one."""
    raw = os.environ.get(ENV_PLACEMENT)
    return None if raw is None else dict(json.loads(raw))


def train_scaling_config(**overrides: Any) -> Any:
    """A Ray Train ScalingConfig for the workers this job was admitted with, each pinned
    (by label selector) to the node kai-ray accounted it on. For `--handoff` jobs."""
    from ray.train import ScalingConfig

    placement = reservation_placement()
    if placement is None:
        raise RuntimeError("not inside a job admitted by kai-ray (KAI_RAY_PLACEMENT unset)")
    resources = dict(placement["resources_per_worker"])
    gpus = resources.pop("GPU", 0)
    cfg: dict[str, Any] = {
        "num_workers": len(placement["nodes"]),
        "use_gpu": gpus > 0,
        "resources_per_worker": {**resources, **({"GPU": gpus} if gpus else {})},
        "label_selector": [{"ray.io/node-id": n} for n in placement["nodes"]],
    }
    return ScalingConfig(**{**cfg, **overrides})
