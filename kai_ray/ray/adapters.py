"""Ray's adapters of the control plane's ports (kai_ray.control.ports):

RayCluster    ClusterSource: `ray.nodes()`, with what Ray handed out beyond kai-ray's
              own groups reported as use outside the scheduler
RayActuator   Actuator: pinned placement groups, Ray Jobs, process and actor kills,
              notices in the GCS key-value store
KVStore       Store: records in Ray's GCS key-value store, with revisions
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
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

from kai_ray.control import GROUP_PREFIX, Record, StoreConflict, WorkerPlacement
from kai_ray.core import NodeInfo
from kai_ray.ray.jobs import RayJobRunner
from kai_ray.ray.translate import NODE_ID_LABEL, RAY_NAMES, bundle_for, node_info

__all__ = ["KV_NAMESPACE", "KVStore", "RayActuator", "RayCluster", "notice_key"]

log = logging.getLogger(__name__)
KV_NAMESPACE = "kai-ray"


def notice_key(workload_id: str) -> str:
    return f"notice/{workload_id}"


# ---------------------------------------------------------------- the cluster


class RayCluster:
    """The nodes Ray reports alive, with NVML facts of their GPUs where probed."""

    def __init__(self) -> None:
        self.gpu_devices: dict[str, dict[str, Any]] = {}  # node -> NVML facts
        self.last: dict[str, NodeInfo] = {}  # the latest view, for sizing bundles

    def nodes(self, held: Mapping[str, Mapping[str, float]]) -> list[NodeInfo]:
        """Work outside kai-ray is what Ray has handed out on a node beyond kai-ray's own
        groups (`held`); it comes and goes, so it makes a job wait (and says so), while a
        submission is refused only when no node is big enough."""
        raw = [n for n in ray.nodes() if n.get("Alive")]
        available = _available()
        nodes = []
        for n in raw:
            nid = n["NodeID"]
            ours = {RAY_NAMES.get(k, k): v for k, v in held.get(nid, {}).items()}
            outside = _outside(n, available.get(nid), ours)
            nodes.append(node_info(n, self.gpu_devices.get(nid), outside))
        self.last = {n.name: n for n in nodes}
        return nodes


def _available() -> dict[str, dict[str, float]]:
    from ray._private.state import state

    try:
        return dict(state.available_resources_per_node())
    except Exception as exc:  # no estimate this time: treat every node as ours
        log.debug("available resources: %s", exc)
        return {}


def _outside(
    node: Mapping[str, Any], free: Mapping[str, float] | None, ours: Mapping[str, float]
) -> dict[str, float]:
    if free is None:
        return {}
    total = node.get("Resources", {})
    used = {k: total[k] - free.get(k, 0.0) - ours.get(k, 0.0) for k in ("CPU", "GPU", "memory") if k in total}
    return {k: v for k, v in used.items() if v > 1e-6}


# ---------------------------------------------------------------- the actuator


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


class RayActuator:
    """Reservations are placement groups whose bundle i is pinned to worker i's node
    (`bundle_label_selector` on the node id); runs are Ray jobs; notices are GCS keys."""

    def __init__(self, cluster: RayCluster, store: KVStore, jobs: RayJobRunner | None = None) -> None:
        self.cluster, self.store = cluster, store
        self.jobs = jobs or RayJobRunner()
        self._groups: dict[str, PlacementGroup] = {}
        self._ready_refs: dict[str, Any] = {}  # groups created here and not yet ready

    def reserve(self, group: str, workers: Sequence[WorkerPlacement]) -> str:
        bundles = [bundle_for(w.request, self.cluster.last[w.node]) for w in workers]
        pg = placement_group(
            bundles,
            strategy="PACK",  # the pins decide placement; PACK only orders Ray's own search
            name=group,
            lifetime="detached",  # survives a scheduler restart; we remove it ourselves
            bundle_label_selector=[{NODE_ID_LABEL: w.node} for w in workers],
        )
        self._groups[group] = pg
        ref = pg.ready()
        self._ready_refs[group] = ref
        self._created(group, ref)
        return str(pg.id.hex())

    def _created(self, group: str, ready_ref: Any) -> None:
        """A hook for subclasses (the actor awaits readiness instead of polling)."""

    def is_ready(self, group: str) -> bool:
        ref = self._ready_refs.get(group)
        if ref is not None:  # created here: a local check, no round trip to the GCS
            done, _ = ray.wait([ref], timeout=0)
            return bool(done)
        pg = self._get(group)
        return pg is not None and placement_group_table(pg).get("state") == "CREATED"

    def release(self, group: str, kill: bool = False) -> None:
        if kill:  # a block of code: no driver process of ours to kill, find its actors
            self._kill_actors_in(group)
        pg = self._get(group)
        self._groups.pop(group, None)
        self._ready_refs.pop(group, None)
        if pg is None:
            return
        try:
            remove_placement_group(pg)
        except Exception as exc:  # already gone: nothing to release
            log.debug("remove %s: %s", group, exc)

    def live_groups(self) -> set[str]:
        return {
            info.get("name", "")
            for info in placement_group_table().values()
            if info.get("name", "").startswith(GROUP_PREFIX) and info.get("state") != "REMOVED"
        }

    def start(self, workload: Any) -> str:
        return self.jobs.submit(workload)

    def run_status(self, run_id: str) -> str:
        return self.jobs.status(run_id)

    def run_outcome(self, run_id: str) -> str:
        return self.jobs.outcome(run_id)

    def stop(self, runner: Mapping[str, Any] | None, run_id: str) -> None:
        if runner:  # fire and forget: never block on a node that may be going away
            strategy = NodeAffinitySchedulingStrategy(runner["node"], soft=False)
            _kill_pid.options(scheduling_strategy=strategy).remote(int(runner["pid"]))
        if run_id:
            self.jobs.stop(run_id)

    def notify(self, workload_id: str, notice: Mapping[str, Any] | None) -> None:
        self.store.overwrite(notice_key(workload_id), None if notice is None else dict(notice))

    def _get(self, group: str) -> PlacementGroup | None:
        """By name through the table, by id: Ray's named lookup only sees the namespace of
        the job that created the scheduler, which is not every caller's."""
        pg = self._groups.get(group)
        if pg is None:
            for info in placement_group_table().values():
                if info.get("name") == group and info.get("state") != "REMOVED":
                    pg = PlacementGroup(PlacementGroupID(bytes.fromhex(info["placement_group_id"])))
                    self._groups[group] = pg
                    break
        return pg

    def _kill_actors_in(self, group: str) -> None:
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


# ---------------------------------------------------------------- the store


class KVStore:
    """Ray's GCS key-value store: survives the actor, dies with the cluster. A value is
    kept with its revision ({"rev": n, "value": ...}). The GCS has no compare-and-swap:
    creating a key is atomic (it refuses to overwrite), and an update checks the stored
    revision first, which catches a second writer except inside one read-write window.
    One scheduler actor writes (it is a named singleton), so that window stays closed."""

    def __init__(self, prefix: str = "") -> None:
        self._p = prefix
        self._known: dict[str, int] = {}  # revisions this process last read or wrote
        self._pool: ThreadPoolExecutor | None = None

    def load(self, prefix: str) -> dict[str, Record]:
        keys = internal_kv._internal_kv_list(self._p + prefix, namespace=KV_NAMESPACE)
        out = {}
        for raw_key in keys:
            key = (raw_key.decode() if isinstance(raw_key, bytes) else raw_key)[len(self._p) :]
            record = self.get(key)
            if record is not None:
                out[key] = record
        return out

    def get(self, key: str) -> Record | None:
        raw = internal_kv._internal_kv_get(self._p + key, namespace=KV_NAMESPACE)
        if raw is None:
            return None
        data = json.loads(raw)
        if not (isinstance(data, dict) and "rev" in data and "value" in data):
            return Record(data, 1)  # written before records had revisions
        self._known[key] = int(data["rev"])
        return Record(data["value"], int(data["rev"]))

    def put(self, key: str, value: Any, expected: int) -> int:
        blob = json.dumps({"rev": expected + 1, "value": value})
        if expected == 0:
            # Ray answers whether the key existed already (then it wrote nothing).
            existed = internal_kv._internal_kv_put(
                self._p + key, blob, overwrite=False, namespace=KV_NAMESPACE
            )
            if existed:
                raise StoreConflict(f"{key}: exists already; written by someone else")
        else:
            # Read first unless this process wrote the revision expected itself.
            current = self._known.get(key) or getattr(self.get(key), "revision", None)
            if current != expected:
                found = "missing" if current is None else f"revision {current}"
                raise StoreConflict(f"{key}: {found}, not revision {expected}; written by someone else")
            internal_kv._internal_kv_put(self._p + key, blob, overwrite=True, namespace=KV_NAMESPACE)
        self._known[key] = expected + 1
        return expected + 1

    def put_many(self, items: Sequence[tuple[str, Any, int]]) -> list[int]:
        """Sent concurrently: a cycle's thousand records cost a few round trips, not a
        thousand (the GCS client releases the interpreter while it waits)."""
        if len(items) < 4:
            return [self.put(*item) for item in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="kai-ray-kv")
        return list(self._pool.map(lambda item: self.put(*item), items))

    def delete(self, key: str, expected: int) -> None:
        current = self.get(key)
        if current is None:
            return
        if current.revision != expected:
            raise StoreConflict(
                f"{key}: revision {current.revision}, not {expected}; written by someone else"
            )
        internal_kv._internal_kv_del(self._p + key, namespace=KV_NAMESPACE)
        self._known.pop(key, None)

    def overwrite(self, key: str, value: Any) -> None:
        """A key with one writer and no history (a notice): written as is, or deleted."""
        if value is None:
            internal_kv._internal_kv_del(self._p + key, namespace=KV_NAMESPACE)
        else:
            internal_kv._internal_kv_put(
                self._p + key, json.dumps({"rev": 0, "value": value}), overwrite=True, namespace=KV_NAMESPACE
            )
