"""Ray's adapters of the workload table's ports (kai_ray.control.ports):

RayNodes      NodeSource: `ray.nodes()`, with what Ray handed out beyond kai-ray's
              own groups reported as use outside the scheduler
RayExecutor   Executor: pinned placement groups, Ray Jobs, process and actor kills,
              notices in the GCS key-value store
KVStore       Store: records in Ray's GCS key-value store, with revisions
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import ray
from ray._raylet import PlacementGroupID
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

from kai_ray.control import GROUP_PREFIX, WorkerPlacement
from kai_ray.control.lifecycle import Words
from kai_ray.core import NodeInfo
from kai_ray.ray.feed import NAMESPACE, dispatcher_name
from kai_ray.ray.jobs import RayJobRunner
from kai_ray.ray.kvstore import KVStore, notice_key
from kai_ray.ray.translate import NODE_ID_LABEL, RAY_NAMES, bundle_for, node_info

__all__ = ["RAY_WORDS", "RayExecutor", "RayNodes"]

log = logging.getLogger(__name__)
RAY_WORDS = Words(reservation="placement group", backend="Ray")  # in the reasons people read


# ---------------------------------------------------------------- the cluster


class RayNodes:
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


# ---------------------------------------------------------------- the executor


class RayExecutor:
    """Reservations are placement groups whose bundle i is pinned to worker i's node
    (`bundle_label_selector` on the node id); runs are Ray jobs; notices are GCS keys."""

    words = RAY_WORDS

    def __init__(self, cluster: RayNodes, store: KVStore, jobs: RayJobRunner | None = None) -> None:
        self.cluster, self.store = cluster, store
        self.jobs = jobs or RayJobRunner()
        self._groups: dict[str, PlacementGroup] = {}
        self._ready_refs: dict[str, Any] = {}  # groups created here and not yet ready
        self._dispatchers: dict[str, Any] = {}  # dispatcher id -> its actor handle
        self.released_at = 0.0  # when a group was last removed (time.monotonic)

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
        self._created(group)
        return str(pg.id.hex())

    def _created(self, group: str) -> None:
        """A hook for subclasses (the actor awaits readiness instead of polling)."""

    def ready_ref(self, group: str) -> Any:
        """An object that is ready with the group. Asked for only when someone waits:
        each is a small Ray task, and a cycle's groups are all created first (as Ray
        alone would), so that the GCS is not asked to schedule both at once."""
        ref = self._ready_refs.get(group)
        pg = self._groups.get(group)
        if ref is None and pg is not None:
            ref = self._ready_refs[group] = pg.ready()
        return ref

    def is_ready(self, group: str) -> bool:
        ref = self.ready_ref(group)
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
            self.released_at = time.monotonic()
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

    def run_outcome(self, run_id: str, status: str) -> str:
        if status == "SUCCEEDED":
            return f"Ray job {run_id} {status}"
        detail = self.jobs.outcome(run_id) or ("stopped outside kai-ray" if status == "STOPPED" else "")
        return f"Ray job {run_id} {status}{f' ({detail})' if detail else ''}"

    def stop(self, runner: Mapping[str, Any] | None, run_id: str) -> None:
        if runner:  # the dispatcher that started the body kills it (through Ray)
            dispatcher = self._dispatcher(runner["dispatcher"])
            if dispatcher is not None:  # fire and forget: it may be going away
                dispatcher.stop.remote(runner["workload"], runner["attempt"])
        if run_id:
            self.jobs.stop(run_id)

    def _dispatcher(self, did: str) -> Any:
        """A driver's dispatcher by its id (None: gone, and the bodies it ran with it)."""
        handle = self._dispatchers.get(did)
        if handle is None:
            try:
                handle = ray.get_actor(dispatcher_name(did), namespace=NAMESPACE)
            except ValueError:
                return None
            if len(self._dispatchers) > 1024:  # drivers come and go
                self._dispatchers.clear()
            self._dispatchers[did] = handle
        return handle

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
            actors = _alive_actors_in(pg.id.hex())
        except Exception as exc:  # best effort: removing the group stops them too
            log.warning("listing actors of %s failed: %s", group, exc)
            return
        for name, namespace in actors:
            try:
                ray.kill(ray.get_actor(name, namespace=namespace))
            except Exception as exc:
                log.debug("kill actor %s: %s", name, exc)


def _alive_actors_in(group_id: str) -> list[tuple[str, str]]:
    """The named actors alive in a placement group, as (name, namespace), read from the GCS
    of the cluster this process is connected to. Not Ray's state API: that one finds its
    cluster again from the machine's files (with two Ray instances on one machine, the
    newest, not necessarily its own) and answers only through the dashboard, which a
    cluster may run without (each call then waited out its timeouts: minutes per stop)."""
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    alive = []
    for blob in state._connect_and_get_accessor().get_actor_table(None, "ALIVE"):
        actor = gcs_pb2.ActorTableData.FromString(blob)
        if actor.name and actor.placement_group_id.hex() == group_id:
            alive.append((actor.name, actor.ray_namespace))
    return alive
