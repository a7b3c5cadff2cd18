"""What the Ray scheduler looks after beside its cycles (`after_step`): drivers and
dispatchers that went away (their workloads are cancelled), reservations nobody holds,
its store's journal, job packages waiting jobs still need in the GCS, new GPU nodes to
probe with NVML, and Ray's autoscaler, told about gangs that wait for room."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import ray

from kai_ray.control import ControlEvent, Controller, State
from kai_ray.control.demand import autoscaler_bundles
from kai_ray.ray.adapters import RayNodes
from kai_ray.ray.feed import NAMESPACE, AdmissionFeed, by_dispatcher, dispatcher_name
from kai_ray.ray.kvstore import KVStore
from kai_ray.ray.translate import autoscaler_request

__all__ = ["Upkeep", "autoscaler_runs"]

log = logging.getLogger(__name__)

AUTOSCALER_CHECK_S = 5.0  # how often to look whether an autoscaler appeared
REAP_S = 5.0  # how often drivers that exited, and groups nobody holds, are looked for
PIN_S = 300.0  # how often uploaded job packages of waiting jobs are pinned again
PIN_FOR_S = 1800  # how long each pin of a waiting job's package lasts (Ray drops it after 10 min)


def autoscaler_runs() -> bool:
    """Whether an autoscaler manages this Ray cluster (KAI_RAY_AUTOSCALING=1 or 0 says so
    outright). Ray's monitor runs on every head and publishes its status in the GCS; on
    a cluster without an autoscaling config it runs read-only, naming each node's type
    after the node itself (`node_<id>`), while a real config names its node types."""
    forced = os.environ.get("KAI_RAY_AUTOSCALING")
    if forced is not None:
        return forced == "1"
    from ray.experimental import internal_kv

    try:
        raw = internal_kv._internal_kv_get("__autoscaling_status")
        report = (json.loads(raw).get("autoscaler_report") or {}) if raw else {}
    except Exception:
        return False
    types = report.get("node_type_mapping") or {}
    return any(kind != f"node_{node}" for node, kind in types.items())


@ray.remote(num_cpus=0, max_retries=0)
def _probe_gpus() -> list[dict[str, Any]]:
    from kai_ray.ray.gpus import local_gpus

    return local_gpus()


class Upkeep:
    def __init__(self, engine: Controller, cluster: RayNodes, store: KVStore, feed: AdmissionFeed) -> None:
        self.engine, self.cluster, self.store, self.feed = engine, cluster, store, feed
        self._probed: set[str] = set()
        self._asked: list[dict[str, float]] = []  # what Ray's autoscaler was last asked for
        self.engine.cluster_grows = autoscaler_runs()
        self._autoscaler_checked = time.time()
        self._reaped_at = self._pinned_at = 0.0

    def after_step(self, now: float, refreshed: bool, found_gpus: Callable[[], None]) -> list[ControlEvent]:
        """What is due after a step (`refreshed`: it looked at the nodes again); the
        events of workloads it cancelled."""
        events: list[ControlEvent] = []
        if refreshed:
            self.probe_new_nodes(found_gpus)
            self.ask_autoscaler()
        if now - self._reaped_at > REAP_S:
            self._reaped_at = now
            events = self.reap()
            self.feed.forget_idle(now)
            self.engine.sweep_orphans()
            # Journaled records move to their own keys while nothing is being admitted
            # (the writes would otherwise compete with placement groups at the GCS).
            quiet = not any(w.state is State.ADMITTING for w in self.engine.workloads.values())
            if self.store.compaction_due(quiet):
                self.store.compact()
        if now - self._pinned_at > PIN_S:
            self._pinned_at = now
            self.pin_packages()
        return events

    def reap(self) -> list[ControlEvent]:
        """Cancel the workloads nobody is left to run: those of drivers that exited (see
        Controller.reap_orphans), and those whose driver's dispatcher is gone for good
        (one that restarts has them cancelled itself: Dispatcher.__init__)."""
        from ray._private.state import state

        try:
            dead = {
                j["JobID"]: f"its driver (Ray job {j['JobID']}) exited"
                for j in state.job_table()
                if j.get("IsDead")
            }
        except Exception as exc:  # the GCS is busy or restarting: try again later
            log.debug("job table: %s", exc)
            return []
        events = self.engine.reap_orphans(dead)
        for did, ids in by_dispatcher(self.engine.workloads.values(), live_only=True).items():
            try:
                ray.get_actor(dispatcher_name(did), namespace=NAMESPACE)
            except ValueError:  # no live actor of that name
                events += self.engine.cancel_many(ids, f"its driver's dispatcher ({did}) exited")
            except Exception as exc:  # the GCS is busy: look again next time
                log.debug("dispatcher %s: %s", did, exc)
        return events

    def pin_packages(self) -> None:
        """Keep the working_dir / py_modules a job uploaded at submission in Ray's GCS
        until the job is admitted: Ray garbage-collects an unreferenced package after 10
        minutes, and a job may wait in its queue far longer."""
        from ray.experimental.internal_kv import _pin_runtime_env_uri

        from kai_ray.ray.jobs import package_uris

        for w in self.engine.workloads.values():
            if w.spec.kind == "job" and not w.terminal:
                for uri in package_uris(w.spec.runtime_env):
                    try:
                        _pin_runtime_env_uri(uri, expiration_s=PIN_FOR_S)
                    except Exception as exc:
                        log.warning("pinning %s for %s: %s", uri, w.id, exc)

    def probe_new_nodes(self, found_some: Callable[[], None]) -> None:
        """NVML on each new GPU node, once: model and memory per device (`found_some` is
        called when a probe brought facts back)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from kai_ray.ray.gpus import summarize

        for node in self.engine.nodes.values():
            if node.gpus == 0 or node.name in self._probed:
                continue
            self._probed.add(node.name)
            ref = _probe_gpus.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.name, soft=False)
            ).remote()

            async def record(ref: Any = ref, node_id: str = node.name) -> None:
                try:
                    found = summarize(await asyncio.wait_for(ref, timeout=60))
                except Exception as exc:  # a node that went away, a broken driver
                    log.warning("GPU discovery on %s failed: %s", node_id[:12], exc)
                    return
                if found:
                    self.cluster.gpu_devices[node_id] = found
                    found_some()

            asyncio.get_running_loop().create_task(record())

    def ask_autoscaler(self) -> None:
        """Tell Ray's autoscaler about gangs that wait for room, and only those: work
        held back by its queue must never make the cluster grow (kai_ray.control.demand)."""
        if not self.engine.cluster_grows:
            # The autoscaler may publish its first status after the scheduler started.
            if time.time() - self._autoscaler_checked < AUTOSCALER_CHECK_S:
                return
            self._autoscaler_checked = time.time()
            self.engine.cluster_grows = autoscaler_runs()
            if not self.engine.cluster_grows:
                return
        bundles = autoscaler_request(autoscaler_bundles(self.engine.workloads.values(), self.engine.nodes))
        if bundles == self._asked:
            return
        from ray.autoscaler.sdk import request_resources

        try:
            request_resources(bundles=bundles)
            self._asked = bundles
        except Exception:  # an autoscaler that went away: nothing to ask
            log.warning("asking Ray's autoscaler for %d bundles failed", len(bundles), exc_info=True)
