"""The controller: a workload table the scheduler owns (Ray's, the simulator's), driven by
the one scheduling loop (kai_ray.control.loop).

Requests (submit, cancel, finish, queue changes) change the table between steps. For
the loop the controller is the three ports a backend provides (control/ports.py):

- ClusterSource: `observe` refreshes the nodes, follows every workload that holds
  something (reservations that became ready or timed out, grace periods that ran out,
  lost nodes, finished runs), and describes the live ones to the core;
- Actuator: `apply` turns the plan into lifecycle events, evictions first, with the
  cycle's records written in one batch before any reservation is made (write-ahead);
- Lifecycle: `record` gives the workloads left waiting their reasons and hands out
  the events of the step.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kai_ray.control import lifecycle as lc
from kai_ray.control.cycles import CycleFn, Cycles
from kai_ray.control.events import ControlEvent, WorkloadChanged
from kai_ray.control.forecast import Eta, Forecaster, forecast
from kai_ray.control.loop import CycleListener, SchedulingLoop, StepResult
from kai_ray.control.planner import Plan
from kai_ray.control.ports import Clock, Executor, NodeSource, Store
from kai_ray.control.queues import QueueChange, plan_apply, plan_delete, queue_from_json, queue_holders
from kai_ray.control.snapshot import NODE_TOPOLOGY, Lazily, held_by_workloads, same_nodes
from kai_ray.control.table import WORKLOAD_KEY, WorkloadTable
from kai_ray.control.usage import UsageHistory
from kai_ray.control.validate import (
    SubmitError,
    check_accelerator_types,
    check_access,
    check_runtimes,
    same_spec,
    validate_spec,
)
from kai_ray.control.views import WorkloadView, owned_view, workload_view
from kai_ray.control.workload import HOLDING, SlotState, State, Workload, WorkloadSpec, group_owner
from kai_ray.core import (
    HOSTNAME_LABEL,
    ClusterSnapshot,
    CycleResult,
    NodeInfo,
    QueueInfo,
    QueueStatus,
    SchedulerConfig,
    Topology,
)
from kai_ray.core.state.access import AccessPath, paths_of

__all__ = ["OWNER_KEY", "Controller", "StepResult"]

log = logging.getLogger(__name__)
OWNER_KEY = "kai-ray/owner-job"  # spec.metadata: the driver whose end cancels the workload


class Controller(WorkloadTable):
    def __init__(
        self,
        cluster: NodeSource,
        executor: Executor,
        store: Store,
        clock: Clock,
        queues: Sequence[QueueInfo],
        config: SchedulerConfig | None = None,
        *,
        node_label: str = HOSTNAME_LABEL,
        cycle: CycleFn | None = None,
        pause_gc: bool = False,
        incremental: bool = True,
        listener: CycleListener | None = None,
    ) -> None:
        """`pause_gc`: pause Python's cyclic garbage collector during each cycle (a
        long-lived scheduler process with many live objects: see run_cycle).
        `incremental`: keep the cycle's working state between cycles (core.CycleCache):
        a cycle then costs what changed, which JobInfos tells the core by handing it a
        new JobInfo for each workload that changed. Off: every cycle rebuilds.
        `listener`: hears of every cycle (the dashboard's feed)."""
        super().__init__(executor, store, clock, node_label)
        self.cluster = cluster
        self.queues = list(plan_apply([], queues, {}).queues) if queues else []
        self.runtimes.set_queues(self.queues)
        config = config or SchedulerConfig()
        topologies = {**config.topologies, NODE_TOPOLOGY: Topology(NODE_TOPOLOGY, (node_label,))}
        self.config = dataclasses.replace(config, topologies=topologies)
        self.node_label = node_label
        cycles = Cycles.of(self.config, cycle, pause_gc=pause_gc, incremental=incremental)
        self.loop = SchedulingLoop(self, self, self, self.config, cycles, listener)
        # An autoscaler may add nodes: accept workloads larger than the cluster is now, and
        # let a gang wait for nodes before it evicts (SchedulerConfig.preemption_delay_s).
        self.cluster_grows = False
        self.nodes: dict[str, NodeInfo] = {}
        # Workload shapes validate() accepted on the current nodes and queues -> the
        # normalised resources per worker.
        self._accepted: dict[tuple[Any, ...], dict[str, float]] = {}
        self._paths: tuple[list[QueueInfo] | None, Mapping[str, AccessPath]] = (None, {})
        self._refresh, self._follow = True, True  # what the next observe does
        self.forecaster = Forecaster(self._forecast)  # when waiting workloads start

    # ------------------------------------------------------------ start-up

    def load(self) -> list[ControlEvent]:
        """Rebuild from the store, then make it agree with the live reservations."""
        self.loaded(Workload.from_json(dict(v)) for v in self.records.load(WORKLOAD_KEY).values())
        queues = self.records.get("queues")
        if queues is not None:
            self.queues = [queue_from_json(q) for q in queues]
            self.runtimes.set_queues(self.queues)
        self.refresh_nodes()
        live = self.executor.live_groups()
        now = self.clock.now()
        for w in list(self.workloads.values()):
            missing = set() if w.handed_off or w.state not in HOLDING else w.groups() - live
            if missing:
                self.fire(w, lc.GroupsLost(sorted(missing)[0]), now, "reconciling it")
        self.sweep_orphans(live)
        self.flush()
        return self.drain()

    def sweep_orphans(self, live: set[str] | None = None) -> list[str]:
        """Release reservations of ours that no workload holds: made but never recorded,
        left over by a restart, or whose release failed earlier."""
        live = self.executor.live_groups() if live is None else live
        owned = {g for w in self.workloads.values() if w.state in HOLDING for g in w.groups()}
        orphans = sorted(live - owned)
        for group in orphans:
            log.info("releasing orphan reservation %s", group)
            self.executor.release(group)
        return orphans

    def refresh_nodes(self) -> None:
        workloads, before = list(self.workloads.values()), self.nodes
        held = Lazily(lambda: held_by_workloads(workloads, before, self.infos.request))
        self.nodes = same_nodes(self.nodes, self.cluster.nodes(held))
        self._accepted.clear()

    # ------------------------------------------------------------ requests

    def submit(self, wid: str, spec: WorkloadSpec) -> Workload:
        """Queue a workload. Idempotent by id: a retried call returns the first one; the
        same id with another spec is refused (SubmitError)."""
        if wid in self.workloads:
            first = self.workloads[wid]
            if not same_spec(first.spec, spec):
                raise SubmitError(
                    f"workload id {wid!r} is taken by another workload ({first.state.value}); "
                    "choose another id (--submission-id), or leave it out for a new one"
                )
            return first
        self.validate(spec)
        if spec.max_runtime is None:  # its queue's default, fixed at submission
            spec.max_runtime = self.runtimes.max_runtime_of_queue(spec.queue)
        now = self.clock.now()
        w = Workload(id=wid, spec=spec, created_at=now, since=now, queued_at=now)
        w.history.append((now, "", State.QUEUED.value, "submitted"))
        self.workloads[wid] = w
        self.touch(w, WorkloadChanged(wid, spec.queue, "", State.QUEUED.value, "submitted", now))
        self.prune()
        return w

    def validate(self, spec: WorkloadSpec) -> None:
        """validate_spec against the cluster and queues now. A shape of workload already
        accepted on the same nodes and queues is not checked again (a thousand alike in
        one submission cost one check); its resources are normalised the same way."""
        check_runtimes(spec)
        check_accelerator_types(spec)
        if not self.nodes:
            self.refresh_nodes()
        shape = (
            spec.queue,
            spec.workers,
            spec.min_workers,
            tuple(sorted(spec.resources_per_worker.items())),
            spec.strategy,
            spec.kind,
            bool(spec.entrypoint.strip()),
            spec.handoff,
            # Whether any node could hold it depends on the types it accepts.
            tuple(spec.accelerator_type),
            spec.mixed_accelerator_types,
            self.cluster_grows,
        )
        check_access(spec, self._access_paths(), self.config.closed_queues)
        if shape in self._accepted:
            spec.resources_per_worker = dict(self._accepted[shape])
            return
        validate_spec(
            spec, self.queues, list(self.nodes.values()), self.node_label, cluster_grows=self.cluster_grows
        )
        if len(self._accepted) > 256:
            self._accepted.clear()
        self._accepted[shape] = dict(spec.resources_per_worker)

    def cancel(self, wid: str, reason: str = "cancelled by the user") -> list[ControlEvent]:
        return self.cancel_many([wid], reason)

    def cancel_many(self, wids: Sequence[str], reason: str = "cancelled by the user") -> list[ControlEvent]:
        """Cancel each (one that ended already is left as it is), written in one batch.
        An unknown id is a KeyError before anything changed."""
        targets = [self.get(wid) for wid in wids]
        now = self.clock.now()
        for w in targets:
            if not w.terminal:
                self.fire(w, lc.Cancel(reason), now, "cancelling it")
        self.flush()
        return self.drain()

    def finish(self, wid: str, attempt: int, ok: bool, error: str = "") -> list[ControlEvent]:
        """The workload's code ended. A report from an attempt that was preempted since
        is stale and ignored."""
        w = self.get(wid)
        if w.attempt == attempt and w.state in (State.RUNNING, State.PREEMPTING):
            self.fire(w, lc.Finished(ok, error), self.clock.now(), "finishing it")
        self.flush()
        return self.drain()

    def register_runner(self, wid: str, attempt: int, runner: Mapping[str, Any]) -> bool:
        """Who is about to run the workload's code (the executor's `stop` gets it back);
        False: that attempt is over, do not start it."""
        w = self.get(wid)
        if w.attempt != attempt or w.state not in (State.RUNNING, State.ADMITTING):
            return False
        self.transition(w, lc.RunnerStarted(runner), self.clock.now())
        self.flush()
        return True

    def apply_queues(self, queues: Sequence[QueueInfo], prune: bool = False) -> QueueChange:
        """Add or update the named queues, keeping the others (removing them too with
        `prune`). Checked as a whole first: a refused change changes nothing."""
        change = plan_apply(self.queues, queues, self._queue_holders(), prune=prune)
        self._set_queues(change.queues)
        return change

    def delete_queues(self, names: Sequence[str]) -> QueueChange:
        """Remove queues that hold no workloads (refused, naming them, otherwise)."""
        change = plan_delete(self.queues, names, self._queue_holders())
        self._set_queues(change.queues)
        return change

    def _access_paths(self) -> Mapping[str, AccessPath]:
        """Each queue's access rules (core paths_of), made once per queue list: every
        submission reads them (thousands in one call)."""
        made_from, paths = self._paths
        if made_from is not self.queues:
            paths = paths_of(self.queues)
            self._paths = (self.queues, paths)
        return paths

    def _set_queues(self, queues: Sequence[QueueInfo]) -> None:
        self.queues = list(queues)
        self.runtimes.set_queues(self.queues)
        self._accepted.clear()
        self.records.save("queues", [dataclasses.asdict(q) for q in queues])

    def _queue_holders(self) -> dict[str, list[str]]:
        return queue_holders((w.spec.queue, w.id) for w in self.workloads.values() if not w.terminal)

    def reap_orphans(self, dead_owners: Mapping[str, str]) -> list[ControlEvent]:
        """Cancel non-job workloads whose owner (the driver that submitted them) ended:
        nobody is left to run them or to report their end. `dead_owners`: owner -> why it
        is gone, in the backend's words."""
        for w in list(self.workloads.values()):
            why = dead_owners.get(w.spec.metadata.get(OWNER_KEY, ""))
            if why is not None and not w.terminal and w.spec.kind != "job":
                self.fire(w, lc.Cancel(why), self.clock.now(), "reaping it")
        self.flush()
        return self.drain()

    # ------------------------------------------------------------ the loop

    def step(self, refresh_nodes: bool = True, follow: bool = True) -> StepResult:
        """One step of the loop. `refresh_nodes`: ask the NodeSource for the nodes;
        `follow`: look at every workload that holds something (a backend that reports
        each change as it happens, as the simulator does, leaves it off)."""
        self._refresh, self._follow = refresh_nodes, follow
        return self.loop.step(self.clock.now())

    def group_ready(self, group: str) -> list[ControlEvent]:
        """A reservation became ready: follow only its workload (cheap, for latency)."""
        w = self.workloads.get(group_owner(group))
        if w is not None and group in w.groups() and w.state in (State.ADMITTING, State.RUNNING):
            self._follow_one(w, self.clock.now())
        return self.drain()

    @property
    def usage(self) -> UsageHistory | None:
        """The queues' usage history (time-based fair share); None when off."""
        return self.loop.cycles.usage

    @property
    def queue_status(self) -> dict[str, QueueStatus]:
        return self.loop.queue_status

    @property
    def positions(self) -> dict[str, tuple[int, int]]:
        return self.loop.positions

    def next_deadline(self) -> float | None:
        """The earliest grace period, surplus release or admission retry still ahead."""
        now = self.clock.now()
        times = (t for w in self.workloads.values() if (t := w.next_deadline(now)) is not None)
        return min(times, default=None)

    # ------------------------------------------------------------ ClusterSource

    def observe(self, now: float) -> ClusterSnapshot:
        if self._refresh:
            self.refresh_nodes()
        if self._follow:
            for w in list(self.workloads.values()):
                self._follow_one(w, now)
        self._stop_overrunning(now)
        jobs = []
        for w in self.workloads.values():
            if w.terminal or w.waiting_to_retry(now):  # backing off: keeps its reason
                continue
            try:
                jobs.append(self.infos.get(w))
            except Exception as exc:
                self.failed(w, now, "describing it to the scheduler", exc)
        return ClusterSnapshot(
            nodes=list(self.nodes.values()), queues=self.queues, jobs=jobs, can_grow=self.cluster_grows
        )

    def _stop_overrunning(self, now: float) -> None:
        """Workloads that reached their max runtime get their notice (looked at every
        step, followed or not: only those with a limit that run are kept in `timed`)."""
        for wid in list(self.timed):
            w = self.workloads.get(wid)
            over = w.runtime_over_at() if w is not None else None
            if w is None or over is None:
                self.timed.pop(wid, None)
            elif over <= now:
                self.fire(w, lc.RuntimeOver(), now, "stopping it at its max runtime")

    def _follow_one(self, w: Workload, now: float) -> None:
        """One workload's observations, isolated from the others'. A running workload is
        never stopped because looking at it failed: the next pass looks again."""
        if w.state not in HOLDING:
            return
        try:
            events = self._news(w, now)
        except Exception:
            log.exception("workload %s: observing it failed; looked at again next pass", w.id)
            return
        for event in events:
            self.fire(w, event, now, "admitting it" if w.state is State.ADMITTING else "following it")

    def _news(self, w: Workload, now: float) -> list[lc.Event]:
        nodes = {s.node for s in w.slots.values() if s.node not in self.nodes}  # no `- keys()`: it copies
        if nodes:
            return [lc.NodesLost(frozenset(nodes))]
        if w.state is State.ADMITTING:
            if self.executor.is_ready(w.gang_group):
                return [lc.GangReady()]
            return [lc.AdmissionTimedOut()] if now - w.since > w.spec.admission_timeout else []
        if w.state is State.PREEMPTING:
            return [lc.GraceOver()] if w.deadline is not None and w.deadline <= now else []
        events: list[lc.Event] = []
        for task, s in w.ordered_slots() if w.slots_in_motion() else ():  # most have none
            if s.state is SlotState.RELEASING and s.releasing_at is not None and s.releasing_at <= now:
                events.append(lc.SurplusDue(task))
            elif s.state is SlotState.RESERVING and self.executor.is_ready(s.group):
                events.append(lc.SurplusReady(task))
        if w.spec.kind == "job" and w.submission_id:
            status = self.executor.run_status(w.submission_id)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                events.append(lc.Finished(status == "SUCCEEDED", self._run_outcome(w, status)))
        return events

    def _run_outcome(self, w: Workload, status: str) -> str:
        """How the job's run ended, pointing a failure at its output."""
        said = self.executor.run_outcome(w.submission_id, status)
        return said if status == "SUCCEEDED" else f"{said}; its output: `kai-ray job logs {w.id}`"

    # ------------------------------------------------------------ Actuator

    def apply(self, plan: Plan, result: CycleResult, now: float) -> None:
        """Evictions first (they free what the placements use), then placements, with
        every record written before any reservation is made."""
        todo: list[tuple[Workload, list[lc.Effect], str]] = []
        for wid, jp in plan.jobs.items():
            w = self.workloads.get(wid)
            if w is None:
                continue
            evicted = jp.evicted_tasks
            if evicted and w.state in (State.ADMITTING, State.RUNNING):
                todo.append(
                    (
                        w,
                        self.transition(w, lc.TasksEvicted(evicted, jp.eviction_reason), now),
                        "preempting it",
                    )
                )
        reserving = f"making its {self.words.reservation}"
        for wid, jp in plan.jobs.items():
            w = self.workloads.get(wid)
            if w is None or w.terminal:
                continue
            event = lc.placement_event(w, jp)
            if event is not None:
                todo.append((w, self.transition(w, event, now), reserving))
        self.flush()  # write-ahead, for the whole cycle at once
        for w, effects, doing in todo:
            self.carry_out(w, effects, now, doing)

    # ------------------------------------------------------------ Lifecycle

    def record(
        self, snapshot: ClusterSnapshot, result: CycleResult, plan: Plan, now: float
    ) -> list[ControlEvent]:
        for wid, reason in plan.waiting.items():
            waiting = self.workloads.get(wid)
            if waiting is None or waiting.state is not State.QUEUED or wid in plan.jobs:
                continue
            if (waiting.reason, waiting.reason_code) != (reason.text, reason.code):
                lc.transition(waiting, lc.Waiting(reason.text, reason.code), now, self.words)
        self.flush()
        return self.drain()

    def views(self, now: float) -> list[WorkloadView]:
        etas = self.forecaster.get(now)
        return [owned_view(w, self.nodes, etas.get(w.id)) for w in self.workloads.values()]

    def info(self, wid: str, with_eta: bool = True) -> dict[str, Any]:
        """A workload's view; `with_eta`: with its forecast start while it waits (made
        again when older than the forecaster's period: a caller that asks on every
        event, waiting for a change, leaves it out)."""
        w, now = self.get(wid), self.clock.now()
        eta = self.forecaster.eta(wid, now) if with_eta and w.state is State.QUEUED else None
        return workload_view(w, self.positions.get(wid), eta, now)

    def _forecast(self, now: float) -> dict[str, Eta]:
        """The forecast from the table as it stands (what the last cycle placed is
        admitting, not waiting)."""
        jobs = [self.infos.get(w) for w in self.workloads.values() if not w.terminal]
        snapshot = ClusterSnapshot(nodes=list(self.nodes.values()), queues=self.queues, jobs=jobs)
        return forecast(snapshot, now, self.runtimes, self.queue_status)
