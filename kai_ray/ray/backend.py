"""The Ray side of the scheduler's ports (kai_ray.ray.ports): placement groups, nodes,
process kills, and persistence in Ray's GCS key-value store."""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Mapping
from typing import Any

import ray
from ray._raylet import PlacementGroupID
from ray.experimental import internal_kv
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kai_ray.ray.ports import GROUP_PREFIX, KV_NAMESPACE, notice_key
from kai_ray.ray.translate import NODE_ID_LABEL

__all__ = ["GROUP_PREFIX", "KV_NAMESPACE", "KVStore", "RayPlacementBackend", "notice_key"]

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- Ray


@ray.remote(num_cpus=0, max_retries=0)
def _kill_pid(pid: int) -> bool:
    """Runs on the workload's node. Checks the pid is still a Ray worker before killing
    it, so a recycled pid belonging to something else is left alone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        if b"ray::" not in cmdline and b"default_worker" not in cmdline:
            return False
        os.kill(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, FileNotFoundError, PermissionError):
        return False


class RayPlacementBackend:
    """Placement groups, nodes and process kills through Ray's public API."""

    def __init__(self) -> None:
        self._groups: dict[str, PlacementGroup] = {}
        self._ready_refs: dict[str, Any] = {}  # groups created here and not yet ready

    def nodes(self) -> list[dict[str, Any]]:
        return [n for n in ray.nodes() if n.get("Alive")]

    def available(self) -> dict[str, dict[str, float]]:
        from ray._private.state import state

        try:
            return dict(state.available_resources_per_node())
        except Exception as exc:  # no estimate this time: treat every node as ours
            log.debug("available resources: %s", exc)
            return {}

    def create(self, name: str, bundles: list[dict[str, float]], nodes: list[str]) -> str:
        pg = placement_group(
            bundles,
            strategy="PACK",  # the pins decide placement; PACK only orders Ray's own search
            name=name,
            lifetime="detached",  # survives a scheduler restart; we remove it ourselves
            bundle_label_selector=[{NODE_ID_LABEL: n} for n in nodes],
        )
        self._groups[name] = pg
        ref = pg.ready()
        self._ready_refs[name] = ref
        self._created(name, ref)
        return str(pg.id.hex())

    def _created(self, name: str, ready_ref: Any) -> None:
        """A hook for subclasses (the actor awaits readiness instead of polling)."""

    def _get(self, name: str) -> PlacementGroup | None:
        """By name through the table, by id: Ray's named lookup only sees the namespace of
        the job that created the scheduler, which is not every caller's."""
        pg = self._groups.get(name)
        if pg is None:
            for info in placement_group_table().values():
                if info.get("name") == name and info.get("state") != "REMOVED":
                    pg = PlacementGroup(PlacementGroupID(bytes.fromhex(info["placement_group_id"])))
                    self._groups[name] = pg
                    break
        return pg

    def is_ready(self, name: str) -> bool:
        ref = self._ready_refs.get(name)
        if ref is not None:  # created here: a local check, no round trip to the GCS
            done, _ = ray.wait([ref], timeout=0)
            return bool(done)
        pg = self._get(name)
        return pg is not None and placement_group_table(pg).get("state") == "CREATED"

    def remove(self, name: str) -> None:
        pg = self._get(name)
        self._groups.pop(name, None)
        self._ready_refs.pop(name, None)
        if pg is None:
            return
        try:
            remove_placement_group(pg)
        except Exception as exc:  # already gone: nothing to release
            log.debug("remove %s: %s", name, exc)

    def live_groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for info in placement_group_table().values():
            name = info.get("name", "")
            if name.startswith(GROUP_PREFIX) and info.get("state") != "REMOVED":
                nodes = info.get("bundles_to_node_id", {})
                out[name] = [nodes.get(i, "") for i in range(len(info.get("bundles", {})))]
        return out

    def kill_process(self, node: str, pid: int) -> None:
        # Fire and forget: the actor must not block on a node that may be going away.
        _kill_pid.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(pid)

    def kill_actors_in(self, group: str) -> None:
        pg = self._get(group)
        if pg is None:
            return
        try:
            from ray.util.state import list_actors

            actors = list_actors(
                filters=[("placement_group_id", "=", pg.id.hex()), ("state", "=", "ALIVE")],
                timeout=5,
                raise_on_missing_output=False,
            )
        except Exception as exc:  # the state API is best effort (dashboard may be off)
            log.warning("listing actors of %s failed: %s", group, exc)
            return
        for a in actors:
            try:
                ray.kill(ray.get_actor(a.name, namespace=a.ray_namespace)) if a.name else None
            except Exception as exc:
                log.debug("kill actor %s: %s", a.actor_id, exc)


class KVStore:
    """Ray's GCS key-value store: survives the actor, dies with the cluster."""

    def __init__(self, prefix: str = "") -> None:
        self._p = prefix

    def _get(self, key: str) -> Any:
        raw = internal_kv._internal_kv_get(self._p + key, namespace=KV_NAMESPACE)
        return None if raw is None else json.loads(raw)

    def _put(self, key: str, value: Any) -> None:
        internal_kv._internal_kv_put(self._p + key, json.dumps(value), overwrite=True, namespace=KV_NAMESPACE)

    def load(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        keys = internal_kv._internal_kv_list(self._p + "wl/", namespace=KV_NAMESPACE)
        workloads = []
        for key in keys:
            raw = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
            if raw is not None:
                workloads.append(json.loads(raw))
        return workloads, self._get("queues")

    def save(self, workload: dict[str, Any]) -> None:
        self._put("wl/" + workload["id"], workload)

    def delete(self, workload_id: str) -> None:
        internal_kv._internal_kv_del(self._p + "wl/" + workload_id, namespace=KV_NAMESPACE)

    def save_queues(self, queues: list[dict[str, Any]]) -> None:
        self._put("queues", queues)

    def set_notice(self, workload_id: str, notice: Mapping[str, Any] | None) -> None:
        if notice is None:
            internal_kv._internal_kv_del(self._p + notice_key(workload_id), namespace=KV_NAMESPACE)
        else:
            self._put(notice_key(workload_id), dict(notice))
