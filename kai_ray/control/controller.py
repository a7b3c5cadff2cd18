"""The controller: one scheduling loop over the ports, the same for every backend.

One `step()` = observe (reservations that became ready or timed out, grace periods that
ran out, lost nodes, finished runs), then one core cycle on a snapshot of the cluster and
the workload table, then the cycle's plan applied. Every change goes through
`lifecycle.transition`, whose effects the controller carries out through the Actuator;
records are written to the Store before the effects they lead to (write-ahead), a
cycle's records in one batch before its reservations, so a restart never admits twice.

Carrying out one workload's effects is isolated from every other: an error there fails
that workload (when trying again cannot help) or re-queues it with a back-off, with the
error in its reason, and the cycle goes on for the rest. Every call that changes
something returns the events it caused (kai_ray.control.events).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kai_ray.control import lifecycle as lc
from kai_ray.control.cycles import CycleFn, Cycles
from kai_ray.control.events import Admitted, ControlEvent, Preempted, WorkloadChanged
from kai_ray.control.planner import JobPlan, plan_cycle
from kai_ray.control.ports import ActionFailed, Actuator, Clock, ClusterSource, Store, WorkerPlacement
from kai_ray.control.queues import QueueChange, plan_apply, plan_delete, queue_from_json, queue_holders
from kai_ray.control.snapshot import (
    NODE_TOPOLOGY,
    JobInfos,
    Lazily,
    held_by_workloads,
    request_for,
    same_nodes,
)
from kai_ray.control.store import Records
from kai_ray.control.usage import UsageHistory
from kai_ray.control.validate import SubmitError, same_spec, validate_spec
from kai_ray.control.views import workload_view
from kai_ray.control.workload import (
    HOLDING,
    TERMINAL,
    SlotState,
    State,
    Workload,
    WorkloadSpec,
    group_owner,
)
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

__all__ = ["OWNER_KEY", "Controller", "StepResult"]

log = logging.getLogger(__name__)
KEEP_FINISHED = 2000  # finished workloads kept for status queries
OWNER_KEY = "kai-ray/owner-job"  # spec.metadata: the driver whose end cancels the workload
# An error an adapter did not classify (a bug, an unexpected failure) is retried with
# back-off like a transient one, but only this many times in a row.
MAX_UNEXPECTED_FAILURES = 5
_WL = "wl/"


@dataclasses.dataclass(slots=True)
class StepResult:
    result: CycleResult
    events: list[ControlEvent]


class Controller:
    def __init__(
        self,
        cluster: ClusterSource,
        actuator: Actuator,
        store: Store,
        clock: Clock,
        queues: Sequence[QueueInfo],
        config: SchedulerConfig | None = None,
        *,
        node_label: str = HOSTNAME_LABEL,
        cycle: CycleFn | None = None,
        pause_gc: bool = False,
        incremental: bool = True,
    ) -> None:
        """`pause_gc`: pause Python's cyclic garbage collector during each cycle (a
        long-lived scheduler process with many live objects: see run_cycle).
        `incremental`: keep the cycle's working state between cycles (core.CycleCache):
        a cycle then costs what changed, which JobInfos tells the core by handing it a
        new JobInfo for each workload that changed. Off: every cycle rebuilds."""
        self.cluster, self.actuator, self.clock = cluster, actuator, clock
        self.records = Records(store)
        self.queues = list(plan_apply([], queues, {}).queues) if queues else []
        config = config or SchedulerConfig()
        topologies = {**config.topologies, NODE_TOPOLOGY: Topology(NODE_TOPOLOGY, (node_label,))}
        self.config = dataclasses.replace(config, topologies=topologies)
        self.node_label = node_label
        self._infos = JobInfos(node_label)
        self._cycles = Cycles.of(self.config, cycle, pause_gc=pause_gc, incremental=incremental)
        # An autoscaler may add nodes: accept workloads larger than the cluster is now.
        self.cluster_grows = False
        self.workloads: dict[str, Workload] = {}
        self.queue_status: dict[str, QueueStatus] = {}
        self.positions: dict[str, tuple[int, int]] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self._dirty: set[str] = set()
        self._finished: dict[str, None] = {}  # finished workloads, longest finished first
        self._events: list[ControlEvent] = []
        # Workload shapes validate() accepted on the current nodes and queues -> the
        # normalised resources per worker.
        self._accepted: dict[tuple[Any, ...], dict[str, float]] = {}

    # ------------------------------------------------------------ start-up

    def load(self) -> list[ControlEvent]:
        """Rebuild from the store, then make it agree with the live reservations."""
        for value in self.records.load(_WL).values():
            w = Workload.from_json(dict(value))
            self.workloads[w.id] = w
        done = sorted((w for w in self.workloads.values() if w.terminal), key=lambda w: w.since)
        self._finished = dict.fromkeys(w.id for w in done)
        queues = self.records.get("queues")
        if queues is not None:
            self.queues = [queue_from_json(q) for q in queues]
        self.refresh_nodes()
        live = self.actuator.live_groups()
        now = self.clock.now()
        for w in list(self.workloads.values()):
            missing = set() if w.handed_off or w.state not in HOLDING else w.groups() - live
            if missing:
                self._fire(w, lc.GroupsLost(sorted(missing)[0]), now, "reconciling it")
        self.sweep_orphans(live)
        self.flush()
        return self._drain()

    def sweep_orphans(self, live: set[str] | None = None) -> list[str]:
        """Release reservations of ours that no workload holds: made but never recorded,
        left over by a restart, or whose release failed earlier."""
        live = self.actuator.live_groups() if live is None else live
        owned = {g for w in self.workloads.values() if w.state in HOLDING for g in w.groups()}
        orphans = sorted(live - owned)
        for group in orphans:
            log.info("releasing orphan reservation %s", group)
            self.actuator.release(group)
        return orphans

    def refresh_nodes(self) -> None:
        workloads, before = list(self.workloads.values()), self.nodes
        held = Lazily(lambda: held_by_workloads(workloads, before, self._infos.request))
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
        now = self.clock.now()
        w = Workload(id=wid, spec=spec, created_at=now, since=now, queued_at=now)
        w.history.append((now, "", State.QUEUED.value, "submitted"))
        self.workloads[wid] = w
        self._touch(w, WorkloadChanged(wid, spec.queue, "", State.QUEUED.value, "submitted", now))
        self._prune()
        return w

    def validate(self, spec: WorkloadSpec) -> None:
        """validate_spec against the cluster and queues now. A shape of workload already
        accepted on the same nodes and queues is not checked again (a thousand alike in
        one submission cost one check); its resources are normalised the same way."""
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
            self.cluster_grows,
        )
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
                self._fire(w, lc.Cancel(reason), now, "cancelling it")
        self.flush()
        return self._drain()

    def finish(self, wid: str, attempt: int, ok: bool, error: str = "") -> list[ControlEvent]:
        """The workload's code ended. A report from an attempt that was preempted since
        is stale and ignored."""
        w = self.get(wid)
        if w.attempt == attempt and w.state in (State.RUNNING, State.PREEMPTING):
            self._fire(w, lc.Finished(ok, error), self.clock.now(), "finishing it")
        self.flush()
        return self._drain()

    def register_runner(self, wid: str, attempt: int, runner: Mapping[str, Any]) -> bool:
        """Who is about to run the workload's code (the actuator's `stop` gets it back);
        False: that attempt is over, do not start it."""
        w = self.get(wid)
        if w.attempt != attempt or w.state not in (State.RUNNING, State.ADMITTING):
            return False
        lc.transition(w, lc.RunnerStarted(runner), self.clock.now())
        self._changed(w.id)
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

    def _set_queues(self, queues: Sequence[QueueInfo]) -> None:
        self.queues = list(queues)
        self._accepted.clear()
        self.records.save("queues", [dataclasses.asdict(q) for q in queues])

    def _queue_holders(self) -> dict[str, list[str]]:
        return queue_holders((w.spec.queue, w.id) for w in self.workloads.values() if not w.terminal)

    def reap_orphans(self, dead_owners: set[str]) -> list[ControlEvent]:
        """Cancel non-job workloads whose owner (the driver that submitted them) ended:
        nobody is left to run them or to report their end."""
        for w in list(self.workloads.values()):
            owner = w.spec.metadata.get(OWNER_KEY)
            if not w.terminal and w.spec.kind != "job" and owner in dead_owners:
                self._fire(
                    w, lc.Cancel(f"its driver (Ray job {owner}) exited"), self.clock.now(), "reaping it"
                )
        self.flush()
        return self._drain()

    # ------------------------------------------------------------ the loop

    def step(self, refresh_nodes: bool = True) -> StepResult:
        now = self.clock.now()
        if refresh_nodes:
            self.refresh_nodes()
        for w in list(self.workloads.values()):
            self._progress(w, now)
        result = self.cycle(now)
        self.flush()
        return StepResult(result, self._drain())

    def group_ready(self, group: str) -> list[ControlEvent]:
        """A reservation became ready: progress only its workload (cheap, for latency)."""
        w = self.workloads.get(group_owner(group))
        if w is not None and group in w.groups() and w.state in (State.ADMITTING, State.RUNNING):
            self._progress(w, self.clock.now())
        return self._drain()

    @property
    def usage(self) -> UsageHistory | None:
        """The queues' usage history (time-based fair share); None when off."""
        return self._cycles.usage

    def next_deadline(self) -> float | None:
        """The earliest grace period, surplus release or admission retry still ahead."""
        now = self.clock.now()
        times = (t for w in self.workloads.values() if (t := w.next_deadline(now)) is not None)
        return min(times, default=None)

    def cycle(self, now: float) -> CycleResult:
        live = [w for w in self.workloads.values() if not w.terminal]
        jobs = []
        for w in live:
            if not w.waiting_to_retry(now):  # backing off: keeps its reason, sits this out
                try:
                    jobs.append(self._infos.get(w))
                except Exception as exc:
                    self._failed(w, now, "describing it to the scheduler", exc)
        snapshot = ClusterSnapshot(nodes=list(self.nodes.values()), queues=self.queues, jobs=jobs)
        result = self._cycles(snapshot, self.config, now)
        plan = plan_cycle(result, jobs)
        self.queue_status, self.positions = dict(result.queues), plan.positions
        self._apply(plan.jobs, now)
        for wid, reason in plan.waiting.items():
            waiting = self.workloads.get(wid)
            if waiting is None or waiting.state is not State.QUEUED or wid in plan.jobs:
                continue
            if (waiting.reason, waiting.reason_code) != (reason.text, reason.code):
                lc.transition(waiting, lc.Waiting(reason.text, reason.code), now)
        return result

    # ------------------------------------------------------------ applying a plan

    def _apply(self, plans: dict[str, JobPlan], now: float) -> None:
        """Evictions first (they free what the placements use), then placements, with
        every record written before any reservation is made."""
        todo: list[tuple[Workload, list[lc.Effect], str]] = []
        for wid, jp in plans.items():
            w = self.workloads.get(wid)
            if w is None:
                continue
            evicted = jp.evicted_tasks
            if evicted and w.state in (State.ADMITTING, State.RUNNING):
                todo.append((w, self._transition(w, lc.Evict(evicted, _why(jp)), now), "preempting it"))
        for wid, jp in plans.items():
            w = self.workloads.get(wid)
            if w is None or w.terminal:
                continue
            event = lc.placement_event(w, jp)
            if event is not None:
                todo.append((w, self._transition(w, event, now), "reserving its placement group"))
        self.flush()  # write-ahead, for the whole cycle at once
        for w, effects, doing in todo:
            self._carry_out(w, effects, now, doing)

    # ------------------------------------------------------------ observing

    def _progress(self, w: Workload, now: float) -> None:
        """One workload's observations, isolated from the others'. A running workload is
        never stopped because looking at it failed: the next pass looks again."""
        if w.state not in HOLDING:
            return
        try:
            events = self._observe(w, now)
        except Exception:
            log.exception("workload %s: observing it failed; looked at again next pass", w.id)
            return
        for event in events:
            self._fire(w, event, now, "admitting it" if w.state is State.ADMITTING else "following it")

    def _observe(self, w: Workload, now: float) -> list[lc.Event]:
        nodes = {s.node for s in w.slots.values() if s.node not in self.nodes}  # no `- keys()`: it copies
        if nodes:
            return [lc.NodesLost(frozenset(nodes))]
        if w.state is State.ADMITTING:
            if self.actuator.is_ready(w.gang_group):
                return [lc.GangReady()]
            return [lc.AdmissionTimedOut()] if now - w.since > w.spec.admission_timeout else []
        if w.state is State.PREEMPTING:
            return [lc.GraceOver()] if w.deadline is not None and w.deadline <= now else []
        events: list[lc.Event] = []
        for task, s in w.ordered_slots() if w.slots_in_motion() else ():  # most have none
            if s.state is SlotState.RELEASING and s.releasing_at is not None and s.releasing_at <= now:
                events.append(lc.SurplusDue(task))
            elif s.state is SlotState.RESERVING and self.actuator.is_ready(s.group):
                events.append(lc.SurplusReady(task))
        if w.spec.kind == "job" and w.submission_id:
            status = self.actuator.run_status(w.submission_id)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                events.append(lc.Finished(status == "SUCCEEDED", self._run_outcome(w, status)))
        return events

    def _run_outcome(self, w: Workload, status: str) -> str:
        """How the job's run ended, pointing a failure at its output."""
        if status == "SUCCEEDED":
            return f"Ray job {w.submission_id} {status}"
        detail = self.actuator.run_outcome(w.submission_id) or (
            "stopped outside kai-ray" if status == "STOPPED" else ""
        )
        return (
            f"Ray job {w.submission_id} {status}{f' ({detail})' if detail else ''}; "
            f"its output: `kai-ray job logs {w.id}`"
        )

    # ------------------------------------------------------------ transitions and effects

    def _fire(self, w: Workload, event: lc.Event, now: float, doing: str) -> None:
        self._carry_out(w, self._transition(w, event, now), now, doing)

    def _transition(self, w: Workload, event: lc.Event, now: float) -> list[lc.Effect]:
        old, preemptions, workers = w.state, w.preemptions, _workers(w)
        effects = lc.transition(w, event, now)
        self._changed(w.id)
        if w.terminal and old not in TERMINAL:
            self._finished[w.id] = None
        if w.state is not old or _workers(w) != workers:
            self._events.append(WorkloadChanged(w.id, w.spec.queue, old.value, w.state.value, w.reason, now))
        if old is State.ADMITTING and w.state is State.RUNNING:
            self._events.append(Admitted(w.id, w.spec.queue, now - w.queued_at))
        if w.preemptions > preemptions and isinstance(event, lc.Evict):
            self._events.append(Preempted(w.id, w.spec.queue, event.why))
        return effects

    def _carry_out(self, w: Workload, effects: list[lc.Effect], now: float, doing: str) -> None:
        for effect in effects:
            try:
                self._do(w, effect, now)
            except Exception as exc:
                if isinstance(effect, lc.Release | lc.Stop | lc.Notify):
                    # Best effort: a release that failed is retried by the orphan sweep.
                    log.warning("workload %s: %s failed: %s", w.id, type(effect).__name__, exc)
                    continue
                self._failed(w, now, doing, exc)
                return

    def _do(self, w: Workload, effect: lc.Effect, now: float) -> None:
        if isinstance(effect, lc.Reserve):
            request = request_for(w.spec.resources_per_worker)
            workers = [WorkerPlacement(p.node, request) for p in effect.placements]
            w.group_ids[effect.group] = self.actuator.reserve(effect.group, workers)
        elif isinstance(effect, lc.Release):
            self.actuator.release(effect.group, effect.kill)
        elif isinstance(effect, lc.Start):
            self._fire(w, lc.Started(self.actuator.start(w)), now, "starting it")
        elif isinstance(effect, lc.Stop):
            self.actuator.stop(effect.runner, effect.run_id)
        else:
            self.actuator.notify(w.id, effect.notice)

    def _failed(self, w: Workload, now: float, doing: str, exc: Exception) -> None:
        """An effect failed: fail the workload, or re-queue it with back-off."""
        if isinstance(exc, ActionFailed):
            log.warning("workload %s: %s failed: %s", w.id, doing, exc)
            text, permanent = str(exc), exc.permanent
        else:  # not classified by the adapter: keep the traceback, retry a few times
            log.error("workload %s: %s failed", w.id, doing, exc_info=exc)
            text = f"{type(exc).__name__}: {exc}"
            permanent = w.failed_admissions + 1 >= MAX_UNEXPECTED_FAILURES
        if not w.terminal:
            self._fire(w, lc.ActionFailed(doing, text, permanent), now, doing)

    # ------------------------------------------------------------ records and views

    def flush(self) -> None:
        """Write every changed record, as one batch."""
        changed = {}
        for wid in sorted(self._dirty):
            w = self.workloads.get(wid)
            if w is None:
                self.records.delete(_WL + wid)
            else:
                changed[_WL + wid] = w.to_json()
        if changed:
            self.records.save_many(changed)
        self._dirty.clear()

    def get(self, wid: str) -> Workload:
        try:
            return self.workloads[wid]
        except KeyError:
            raise KeyError(f"no workload {wid!r}; `kai-ray status` lists them") from None

    def info(self, wid: str) -> dict[str, Any]:
        return workload_view(self.get(wid), self.positions.get(wid))

    def _changed(self, wid: str) -> None:
        self._dirty.add(wid)  # to write
        self._infos.changed(wid)  # to describe to the core afresh

    def _touch(self, w: Workload, event: ControlEvent) -> None:
        self._changed(w.id)
        self._events.append(event)

    def _drain(self) -> list[ControlEvent]:
        events, self._events = self._events, []
        return events

    def _prune(self) -> None:
        """Forget the longest-finished workloads beyond KEEP_FINISHED (O(1) a submission:
        with ten thousand waiting, a scan for them would cost more than the submission)."""
        while len(self._finished) > KEEP_FINISHED:
            wid = next(iter(self._finished))
            del self._finished[wid]
            if self.workloads.pop(wid, None) is not None:
                self._changed(wid)


def _workers(w: Workload) -> list[tuple[str, str, float | None]]:
    return [(t, s.state.value, s.releasing_at) for t, s in w.ordered_slots()]


def _why(jp: JobPlan) -> str:
    first = (jp.evicted or [e for e, _ in jp.moved])[0]
    return f"{first.action}: {first.reason}"
