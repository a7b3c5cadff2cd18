"""Ray Tune under a queue: every trial is a kai-ray workload of its own.

    tuner = tune.Tuner(trainable, param_space=..., tune_config=tune.TuneConfig(num_samples=100))
    results = kai_ray.tune.fit(tuner, queue="ml", priority="train")

Why trials and not one elastic workload: a trial is already Tune's unit of resources (its
own placement group today), of failure (retried on its own) and of checkpoint (restored on
its own). As workloads of their own, trials wait in line with the sweep's priority; as many
run at once as the queue grants (its quota, limit and fair share), with no concurrency to
pick up front; and a trial taken back by preemption or reclaim is paused by Tune, which
keeps its last checkpoint, and runs again from it once the queue admits it again. One
elastic workload would pin the sweep's concurrency when Tune starts, and Tune has no way
to give back a running trial's resources when the workload shrinks.

How it plugs in: Tune asks a resource manager for each trial's bundles; kai-ray's turns
each request into a workload (kind "block", so its placement group is handed to Tune's
trial actor) and hands Tune the group once the scheduler admits it. Tune keeps at most
TUNE_MAX_PENDING_TRIALS_PG requests waiting (200 by default), so a sweep of thousands of
trials puts at most that many in the queue's line at once. A trial's bundles must all be
the same (kai-ray's workers are alike); say so otherwise, before anything is queued.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import ray
from ray.air.execution.resources.placement_group import PlacementGroupAcquiredResources
from ray.air.execution.resources.request import AcquiredResources, ResourceRequest
from ray.air.execution.resources.resource_manager import ResourceManager

from kai_ray.api.client import Scheduler, get_scheduler
from kai_ray.api.notice import group_by_id
from kai_ray.ray.client import make_spec

__all__ = ["QueuedTrials", "fit", "trials_in_queue"]

UPDATE_S = 0.2  # how often Tune's questions look the workloads up at the scheduler


class QueuedTrials(ResourceManager):  # type: ignore[misc]
    """Tune's resource manager on kai-ray: a request is a queued workload, resources are
    ready once it is admitted, acquired ones are its placement group, freed ones end it."""

    def __init__(self, scheduler: Scheduler, **options: Any) -> None:
        self._sched = scheduler
        self._options = {"priority": "train", "grace_period": 30.0, **options, "on_preempt": "fail"}
        self._requested: dict[ResourceRequest, list[str]] = {}  # oldest first
        self._state: dict[str, dict[str, Any]] = {}  # workload -> as last looked up
        self._acquired: dict[int, tuple[AcquiredResources, str, int]] = {}  # id -> (it, wid, attempt)
        self._waits: dict[ray.ObjectRef, str] = {}  # ready when a workload runs
        self._looked = 0.0

    # ------------------------------------------------------------ Tune's calls

    def request_resources(self, resource_request: ResourceRequest) -> None:
        wid = self._sched.submit(self._spec(resource_request))
        self._requested.setdefault(resource_request, []).append(wid)
        self._state[wid] = {"state": "Queued"}
        self._waits[self._sched.handle.wait.remote(wid, ["Running"], None)] = wid

    def cancel_resource_request(self, resource_request: ResourceRequest) -> None:
        wids = self._requested.get(resource_request, [])
        if wids:  # the newest that waits, else the newest
            waiting = [w for w in wids if self._state[w]["state"] != "Running"]
            wid = (waiting or wids)[-1]
            wids.remove(wid)
            self._forget(wid)
            self._sched.handle.cancel.remote(wid, token=self._sched.token)

    def has_resources_ready(self, resource_request: ResourceRequest) -> bool:
        self._look()
        return any(self._state[w]["state"] == "Running" for w in self._requested.get(resource_request, []))

    def acquire_resources(self, resource_request: ResourceRequest) -> AcquiredResources | None:
        wids = self._requested.get(resource_request, [])
        wid = next((w for w in wids if self._state[w]["state"] == "Running"), None)
        if wid is None:
            return None
        wids.remove(wid)
        info = self._state[wid]
        acquired = PlacementGroupAcquiredResources(resource_request, group_by_id(info["group_id"]))
        self._acquired[id(acquired)] = (acquired, wid, info["attempt"])
        return acquired

    def free_resources(self, acquired_resource: AcquiredResources) -> None:
        _, wid, attempt = self._acquired.pop(id(acquired_resource))
        self._state.pop(wid, None)
        self._sched.handle.finish.remote(wid, attempt, True)

    def get_resource_futures(self) -> list[ray.ObjectRef]:
        return list(self._waits)

    def update_state(self) -> None:
        self._look(force=True)

    def clear(self) -> None:
        for wids in self._requested.values():
            for wid in wids:
                self._sched.handle.cancel.remote(wid, token=self._sched.token)
        for _, wid, attempt in self._acquired.values():
            self._sched.handle.finish.remote(wid, attempt, True)
        self._requested.clear()
        self._acquired.clear()
        self._state.clear()
        self._waits.clear()

    # ------------------------------------------------------------ kai-ray's side

    def preempting(self) -> list[AcquiredResources]:
        """Acquired resources whose workload is being preempted (its notice is out)."""
        self._look()
        return [acq for acq, wid, _ in self._acquired.values() if self._state[wid]["state"] == "Preempting"]

    def _spec(self, request: ResourceRequest) -> Any:
        bundles = request.bundles
        if any(b != bundles[0] for b in bundles):
            raise ValueError(
                f"kai_ray.tune: a trial asks for bundles of different sizes ({bundles}); kai-ray's "
                "workers are alike, so give every bundle the same resources "
                "(tune.with_resources(trainable, PlacementGroupFactory([{...}] * n)))"
            )
        return make_spec(
            kind="block",
            name="tune-trial",
            workers=len(bundles),
            resources_per_worker={k: v for k, v in bundles[0].items() if v},
            strategy=request.strategy,
            **self._options,
        )

    def _look(self, force: bool = False) -> None:
        """The workloads Tune waits for or holds, as the scheduler has them now (at most
        every UPDATE_S, one call for all). A requested one that ended without running
        (its admission failed, it was evicted first) is replaced by a new request."""
        if not force and time.monotonic() - self._looked < UPDATE_S:
            return
        self._looked = time.monotonic()
        done, _ = ray.wait(list(self._waits), num_returns=len(self._waits), timeout=0)
        for ref in done:
            self._waits.pop(ref, None)
        ids = [w for wids in self._requested.values() for w in wids]
        ids += [wid for _, wid, _ in self._acquired.values()]
        if not ids:
            return
        for report in ray.get(self._sched.handle.reports.remote(ids)):
            self._state[report["id"]] = report
        for request, wids in self._requested.items():
            for wid in [w for w in wids if self._state[w]["ended"]]:
                wids.remove(wid)
                self._forget(wid)
                self.request_resources(request)

    def _forget(self, wid: str) -> None:
        self._state.pop(wid, None)
        for ref in [r for r, w in self._waits.items() if w == wid]:
            del self._waits[ref]


def _controller_class(options: dict[str, Any]) -> type:
    """Tune's controller with kai-ray's resource manager, pausing (with a checkpoint) a
    trial whose workload got its preemption notice, so that it gives its resources back
    before the deadline and runs again from the checkpoint once re-admitted."""
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    class QueuedTuneController(TuneController):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.kai_trials = QueuedTrials(get_scheduler(), **options)
            kwargs["resource_manager_factory"] = lambda: self.kai_trials
            super().__init__(*args, **kwargs)

        def step(self) -> None:
            for acquired in self.kai_trials.preempting():
                trial = self._trial_holding(acquired)
                if trial is not None and trial.status == Trial.RUNNING:
                    self.pause_trial(trial, should_checkpoint=True)
            super().step()

        def __getstate__(self) -> dict[str, Any]:
            # Tune saves its controller's state to resume an experiment: not the manager.
            state: dict[str, Any] = super().__getstate__()
            state.pop("kai_trials", None)
            return state

        def _trial_holding(self, acquired: AcquiredResources) -> Any:
            live = self._actor_manager._live_actors_to_ray_actors_resources
            for tracked, trial in self._actor_to_trial.items():
                held = live.get(tracked)
                if held is not None and held[1] is acquired:
                    return trial
            return None

    return QueuedTuneController


@contextlib.contextmanager
def trials_in_queue(queue: str, priority: str | int = "train", **options: Any) -> Iterator[None]:
    """Inside the block, Tune runs each trial as a kai-ray workload of `queue` at
    `priority` (`options`: preemptible, grace_period, admission_timeout...)."""
    import ray.tune.tune as tune_module

    make_spec(queue=queue, priority=priority, kind="block", **options)  # a bad option fails here
    original = tune_module.TuneController
    tune_module.TuneController = _controller_class({"queue": queue, "priority": priority, **options})
    try:
        yield
    finally:
        tune_module.TuneController = original


def fit(tuner: Any, queue: str, priority: str | int = "train", **options: Any) -> Any:
    """`tuner.fit()`, each trial a workload of `queue` (see the module doc)."""
    with trials_in_queue(queue, priority, **options):
        return tuner.fit()
