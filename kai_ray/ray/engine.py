"""The scheduler's state machine: workloads in, the core's decisions out, through narrow
interfaces. No Ray import here: the actor wires in Ray's backend, the unit tests fakes.

One `step(now)` = progress (groups that became ready or timed out, grace periods that
ran out, lost nodes, finished jobs), then one core cycle on a snapshot of the cluster and
the workload table, then the decisions applied. Changes are written to the store before
the Ray side effect they lead to (write-ahead), so a restart never admits twice.

Carrying out one workload's decision is isolated from every other: an error there fails
that workload (when trying again cannot help) or re-queues it with a back-off, with the
error in its reason, and the cycle goes on for the rest.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kai_ray.core import (
    Bind,
    ClusterSnapshot,
    CycleResult,
    Evict,
    NodeInfo,
    Pipeline,
    QueueInfo,
    QueueStatus,
    SchedulerConfig,
    Topology,
    run_cycle,
)
from kai_ray.core.queues import build_queue_tree
from kai_ray.ray.checks import SubmitError, same_spec, validate_spec
from kai_ray.ray.nodes import cluster_nodes
from kai_ray.ray.ports import GROUP_PREFIX, ActionFailed, JobRunner, PlacementBackend, Store
from kai_ray.ray.queueadmin import QueueChange, plan_apply, plan_delete, queue_from_json, queue_holders
from kai_ray.ray.translate import NODE_ID_LABEL, NODE_TOPOLOGY, bundle_for, job_info, request_for
from kai_ray.ray.views import queue_positions, workload_view
from kai_ray.ray.workload import HOLDING, TERMINAL, Slot, State, Workload, WorkloadSpec

__all__ = ["OWNER_JOB_KEY", "SchedulerEngine", "SubmitError"]

log = logging.getLogger(__name__)
CycleFn = Callable[[ClusterSnapshot, SchedulerConfig, float], CycleResult]
KEEP_FINISHED = 2000  # finished workloads kept for status queries
OWNER_JOB_KEY = "kai-ray/owner-job"  # spec.metadata: the Ray job id of the submitting driver
# An error the backend did not classify (a bug, an unexpected Ray failure) is retried
# with back-off like a transient one, but only this many times in a row.
MAX_UNEXPECTED_FAILURES = 5


class SchedulerEngine:
    def __init__(
        self,
        backend: PlacementBackend,
        store: Store,
        queues: list[QueueInfo],
        config: SchedulerConfig | None = None,
        jobs: JobRunner | None = None,
        cycle: CycleFn = run_cycle,
    ) -> None:
        build_queue_tree(queues)  # raises QueueTreeError on a bad tree
        self.backend, self.store, self.jobs, self._cycle = backend, store, jobs, cycle
        self.queues = list(queues)
        config = config or SchedulerConfig()
        topologies = {**config.topologies, NODE_TOPOLOGY: Topology(NODE_TOPOLOGY, (NODE_ID_LABEL,))}
        self.config = dataclasses.replace(config, topologies=topologies)
        self.workloads: dict[str, Workload] = {}
        self.queue_status: dict[str, QueueStatus] = {}
        self.positions: dict[str, tuple[int, int]] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.gpu_devices: dict[str, dict[str, Any]] = {}  # node -> NVML facts
        self.changed: set[str] = set()  # state changed since the actor last looked
        self.events: list[tuple[str, str, float]] = []  # (kind, queue, value) for metrics
        self._dirty: set[str] = set()

    # ------------------------------------------------------------ lifecycle

    def load(self, now: float) -> None:
        """Rebuild from the store, then make it agree with the live placement groups."""
        workloads, queues = self.store.load()
        if queues is not None:
            self.queues = [queue_from_json(q) for q in queues]
        for data in workloads:
            w = Workload.from_json(data)
            self.workloads[w.id] = w
        self.refresh_nodes()
        self.reconcile(now)

    def reconcile(self, now: float) -> None:
        live = self.backend.live_groups()
        for w in self.workloads.values():
            if w.state not in HOLDING:
                continue
            missing = set() if w.handed_off else w.groups() - live.keys()
            if missing:
                self._stop(w)
                self._move(
                    w,
                    State.QUEUED,
                    now,
                    f"placement group {sorted(missing)[0]} was lost while the scheduler restarted; re-queued",
                )
        self.sweep_orphans(live)

    def sweep_orphans(self, live: dict[str, list[str]] | None = None) -> list[str]:
        """Remove groups of ours that no workload holds: created but never recorded, left
        over by a restart, or whose removal failed earlier."""
        live = self.backend.live_groups() if live is None else live
        owned = {g for w in self.workloads.values() if w.state in HOLDING for g in w.groups()}
        orphans = sorted(live.keys() - owned)
        for name in orphans:
            log.info("removing orphan placement group %s", name)
            self.backend.remove(name)
        return orphans

    def refresh_nodes(self) -> None:
        self.nodes = cluster_nodes(
            self.backend.nodes(), self.backend.available(), self.gpu_devices, self.workloads.values()
        )

    def flush(self) -> None:
        for wid in sorted(self._dirty):
            w = self.workloads.get(wid)
            if w is None:
                self.store.delete(wid)
            else:
                self.store.save(w.to_json())
        self._dirty.clear()

    # ------------------------------------------------------------ requests

    def submit(self, wid: str, spec: WorkloadSpec, now: float) -> Workload:
        """Queue a workload. Idempotent by id: a retried call returns the first one; the
        same id with another spec is refused."""
        if wid in self.workloads:
            first = self.workloads[wid]
            if not same_spec(first.spec, spec):
                raise SubmitError(
                    f"workload id {wid!r} is taken by another workload ({first.state.value}); "
                    "choose another id (--submission-id), or leave it out for a new one"
                )
            return first
        self.validate(spec)
        w = Workload(id=wid, spec=spec, created_at=now, since=now, queued_at=now)
        w.history.append((now, "", State.QUEUED.value, "submitted"))
        self.workloads[wid] = w
        self._touch(w)
        self._prune()
        return w

    def validate(self, spec: WorkloadSpec) -> None:
        if not self.nodes:
            self.refresh_nodes()
        validate_spec(spec, self.queues, list(self.nodes.values()))

    def cancel(self, wid: str, now: float, reason: str = "cancelled by the user") -> Workload:
        w = self._get(wid)
        if not w.terminal:
            self._stop(w)
            self._move(w, State.CANCELLED, now, reason)
        return w

    def finish(self, wid: str, attempt: int, ok: bool, error: str, now: float) -> Workload:
        """The workload's code ended. A report from an attempt that was preempted since
        is stale and ignored."""
        w = self._get(wid)
        if w.terminal or w.attempt != attempt or w.state not in (State.RUNNING, State.PREEMPTING):
            return w
        w.runner = None  # its body returned: the process is Ray's again, not ours to kill
        self._stop(w)
        w.error = error
        self._move(w, State.SUCCEEDED if ok else State.FAILED, now, "finished" if ok else f"failed: {error}")
        return w

    def register_runner(self, wid: str, attempt: int, node: str, pid: int) -> bool:
        """The process running the workload's code; False: that attempt is over (stop)."""
        w = self._get(wid)
        if w.attempt != attempt or w.state not in (State.RUNNING, State.ADMITTING):
            return False
        w.runner = {"node": node, "pid": pid}
        self._touch(w, changed=False)
        return True

    def apply_queues(self, queues: Sequence[QueueInfo], prune: bool = False) -> QueueChange:
        """Add or update the named queues, keeping the others (removing them too with
        `prune`). Checked as a whole first: a refused change changes nothing."""
        change = plan_apply(self.queues, queues, self._queue_holders(), prune=prune)
        self._set_queue_tree(change.queues)
        return change

    def delete_queues(self, names: Sequence[str]) -> QueueChange:
        """Remove queues that hold no workloads (refused, naming them, otherwise)."""
        change = plan_delete(self.queues, names, self._queue_holders())
        self._set_queue_tree(change.queues)
        return change

    def _set_queue_tree(self, queues: Sequence[QueueInfo]) -> None:
        self.queues = list(queues)
        self.store.save_queues([dataclasses.asdict(q) for q in queues])

    def _queue_holders(self) -> dict[str, list[str]]:
        return queue_holders((w.spec.queue, w.id) for w in self.workloads.values() if not w.terminal)

    # ------------------------------------------------------------ the loop

    def step(self, now: float, refresh_nodes: bool = True) -> CycleResult:
        if refresh_nodes:
            self.refresh_nodes()
        self.progress(now)
        result = self.cycle(now)
        self.flush()
        return result

    def progress(self, now: float) -> None:
        for w in list(self.workloads.values()):
            self._progress_one(w, now)

    def _progress_one(self, w: Workload, now: float) -> None:
        """One workload's step, isolated from the others'. A running workload is never
        stopped because looking at it failed: the next pass looks again."""
        if w.state is State.ADMITTING:
            with self._isolated(w, now, "admitting it"):
                self._progress_admitting(w, now)
        elif w.state is State.RUNNING:
            try:
                self._progress_running(w, now)
            except Exception:
                log.exception("workload %s: following it failed; it keeps running", w.id)
        elif w.state is State.PREEMPTING and w.deadline is not None and w.deadline <= now:
            with self._isolated(w, now, "stopping it"):
                self._end_preemption(w, now)

    def reap_orphans(self, dead_jobs: set[str], now: float) -> list[str]:
        """Cancel function and block workloads whose submitting driver has exited: nobody
        is left to run them or to report their end, and their reservation would hang."""
        reaped = []
        for w in list(self.workloads.values()):
            owner = w.spec.metadata.get(OWNER_JOB_KEY)
            if not w.terminal and w.spec.kind != "job" and owner in dead_jobs:
                self.cancel(w.id, now, f"its driver (Ray job {owner}) exited")
                reaped.append(w.id)
        return reaped

    def next_deadline(self) -> float | None:
        """The earliest grace period, surplus release or admission retry: the loop wakes
        then."""
        return min((t for w in self.workloads.values() if (t := w.next_deadline()) is not None), default=None)

    def group_ready(self, group: str, now: float) -> None:
        """A group became ready: progress only its workload (cheap, for low latency)."""
        w = self.workloads.get(group.removeprefix(GROUP_PREFIX).split("/")[0])
        if w is not None and group in w.groups() and w.state in (State.ADMITTING, State.RUNNING):
            self._progress_one(w, now)

    def cycle(self, now: float) -> CycleResult:
        # A workload backing off after failed admissions sits this cycle out, keeping its
        # reason (which says when it is tried again).
        live = [w for w in self.workloads.values() if not w.terminal]
        tried = []
        for w in live:
            if not w.waiting_to_retry(now):
                with self._isolated(w, now, "describing it to the scheduler"):
                    tried.append(job_info(w))
        live = [w for w in live if not w.terminal]
        snapshot = ClusterSnapshot(nodes=list(self.nodes.values()), queues=self.queues, jobs=tried)
        result = self._cycle(snapshot, self.config, now)
        self._apply(result, now)
        self.queue_status = dict(result.queues)
        self.positions = queue_positions(live)
        return result

    # ------------------------------------------------------------ decisions

    def _apply(self, result: CycleResult, now: float) -> None:
        binds: dict[str, list[Bind]] = defaultdict(list)
        evicts: dict[str, list[Evict]] = defaultdict(list)
        pipelined: dict[str, list[Pipeline]] = defaultdict(list)
        for d in result.decisions:
            if isinstance(d, Bind):
                binds[d.job].append(d)
            elif isinstance(d, Evict):
                evicts[d.job].append(d)
            else:
                pipelined[d.job].append(d)
        for job, evs in evicts.items():
            if job in self.workloads:
                with self._isolated(self.workloads[job], now, "preempting it"):
                    self._evict(self.workloads[job], evs, now)
        for job, bs in binds.items():
            if job in self.workloads:
                with self._isolated(self.workloads[job], now, "reserving its placement group"):
                    self._bind(self.workloads[job], bs, now)
        reasons = {**result.pending_reasons, **result.invalid}
        for job, ps in pipelined.items():
            reasons[job] = f"placed on {_nodes(p.node for p in ps)}; waiting for preempted work to release it"
        for wid, why in reasons.items():
            w = self.workloads.get(wid)
            if w is not None and w.state is State.QUEUED:
                w.reason = _RAY_NODE_ID.sub(lambda m: m.group(0)[:12], why)

    def _bind(self, w: Workload, binds: list[Bind], now: float) -> None:
        binds = sorted(binds, key=lambda b: int(b.task[1:]))
        if w.state is State.QUEUED:
            if len(binds) < w.spec.gang:
                return  # the core places gangs whole; a partial answer is not acted on
            gang, surplus = binds[: w.spec.gang], binds[w.spec.gang :]
            w.attempt += 1
            w.slots = {b.task: Slot(b.node, w.gang_group) for b in gang}
            self._move(w, State.ADMITTING, now, "placement group created; waiting for Ray")
            self._touch(w)
            self.flush()  # write-ahead: the record exists before the group does
            self._create(w.gang_group, gang, w)
            self.events.append(("admitting", w.spec.queue, 0.0))
        elif w.state in (State.ADMITTING, State.RUNNING):
            surplus = [b for b in binds if b.task not in w.slots]
        else:
            return
        for b in surplus:  # elastic workers above the gang: one group each
            group = f"{w.gang_group}/{b.task}"
            w.slots[b.task] = Slot(b.node, group, surplus=True)
            self._touch(w)
            self.flush()
            self._create(group, [b], w)

    def _create(self, group: str, binds: list[Bind], w: Workload) -> None:
        request = request_for(w.spec.resources_per_worker)
        bundles = [bundle_for(request, self.nodes[b.node]) for b in binds]
        w.group_ids[group] = self.backend.create(group, bundles, [b.node for b in binds])

    def _evict(self, w: Workload, evs: list[Evict], now: float) -> None:
        why = f"{evs[0].action}: {evs[0].reason}"
        tasks = {e.task for e in evs}
        if w.state not in (State.ADMITTING, State.RUNNING):
            return
        whole = any(t in w.slots and not w.slots[t].surplus for t in tasks)
        if not whole:  # only elastic surplus: give those groups back after the grace period
            for t in tasks & w.slots.keys():
                w.slots[t].releasing_at = now + max(0.0, w.spec.grace_period)
            self._touch(w)
            self._progress_running(w, now)
            return
        self.events.append(("preempted", w.spec.queue, 1.0))
        w.preemptions += 1
        if w.state is State.ADMITTING:
            self._stop(w)
            self._move(w, State.QUEUED, now, f"evicted before it started ({why})")
            return
        w.deadline = now + max(0.0, w.spec.grace_period)
        self._move(w, State.PREEMPTING, now, f"preempted ({why}); stopping at the deadline")
        self.store.set_notice(w.id, {"reason": why, "deadline": w.deadline, "attempt": w.attempt})
        if w.deadline <= now:
            self._end_preemption(w, now)

    def _end_preemption(self, w: Workload, now: float) -> None:
        self._stop(w)
        why = w.reason.removesuffix("; stopping at the deadline")
        if w.spec.on_preempt == "fail":
            w.error = why
            self._move(w, State.FAILED, now, why)
        else:
            self._move(w, State.QUEUED, now, f"{why}; re-queued")

    def _stop(self, w: Workload) -> None:
        """Release everything the workload holds: its process tree, its job, its groups.
        Best effort, step by step: one failed release must not keep the others (or the
        state change that follows) from happening; a group left behind is removed by
        the orphan sweep."""
        if w.runner:
            self._quietly(w, self.backend.kill_process, w.runner["node"], int(w.runner["pid"]))
        if w.spec.kind == "job" and w.submission_id and self.jobs is not None:
            self._quietly(w, self.jobs.stop, w.submission_id)
        for group in sorted(w.groups()):
            if w.spec.kind == "block":  # no driver process of ours to kill: find its actors
                self._quietly(w, self.backend.kill_actors_in, group)
            self._quietly(w, self.backend.remove, group)
        self._quietly(w, self.store.set_notice, w.id, None)
        w.slots, w.runner, w.deadline, w.group_ids = {}, None, None, {}
        w.handed_off = False

    @staticmethod
    def _quietly(w: Workload, call: Callable[..., Any], *args: Any) -> None:
        try:
            call(*args)
        except Exception as exc:
            log.warning("workload %s: %s%s failed: %s", w.id, call.__name__, args, exc)

    # ------------------------------------------------------------ failures

    @contextmanager
    def _isolated(self, w: Workload, now: float, doing: str) -> Iterator[None]:
        """Carry out a decision for one workload; an error fails or re-queues that one."""
        try:
            yield
        except Exception as exc:
            self._action_failed(w, now, doing, exc)

    def _action_failed(self, w: Workload, now: float, doing: str, exc: Exception) -> None:
        if isinstance(exc, ActionFailed):
            log.warning("workload %s: %s failed: %s", w.id, doing, exc)
            text, permanent = str(exc), exc.permanent
        else:  # not classified by the backend: keep the traceback, retry a few times
            log.exception("workload %s: %s failed", w.id, doing)
            text = f"{type(exc).__name__}: {exc}"
            permanent = w.failed_admissions + 1 >= MAX_UNEXPECTED_FAILURES
        self._stop(w)
        if w.terminal:
            return
        if permanent:
            w.error = text
            self._move(w, State.FAILED, now, f"failed while {doing}: {text}")
            return
        wait = w.admission_failed(now)
        why = (
            f"{doing} failed: {text}; re-queued, next try in {wait:g}s "
            f"({w.failed_admissions} failed in a row)"
        )
        if w.state is State.QUEUED:
            w.reason = why
            self._touch(w)
        else:
            self._move(w, State.QUEUED, now, why)

    # ------------------------------------------------------------ progress

    def _progress_admitting(self, w: Workload, now: float) -> None:
        lost = {s.node for s in w.slots.values()} - self.nodes.keys()
        if lost:
            self._stop(w)
            self._move(w, State.QUEUED, now, f"{_nodes(lost)} left the cluster; re-queued")
        elif all(self.backend.is_ready(g) for g in w.groups()):
            for s in w.slots.values():
                s.ready = True
            if w.spec.kind == "job" and self.jobs is not None:
                if w.spec.handoff:
                    self._hand_off(w)
                w.submission_id = self.jobs.submit(w)
            w.failed_admissions, w.retry_at = 0, None
            self._move(w, State.RUNNING, now, "admitted: its placement group is ready")
            self.events.append(("admitted", w.spec.queue, now - w.queued_at))
        elif now - w.since > w.spec.admission_timeout:
            nodes = _nodes(s.node for s in w.slots.values())
            self._stop(w)
            wait = w.admission_failed(now)
            self._move(
                w,
                State.QUEUED,
                now,
                f"placement group not ready after "
                f"{w.spec.admission_timeout:g}s on {nodes} (Ray could not reserve "
                f"the resources there: used by work outside kai-ray?); re-queued, next try "
                f"in {wait:g}s ({w.failed_admissions} failed in a row)",
            )

    def _hand_off(self, w: Workload) -> None:
        """Release the reserved groups to the job, keeping the slots (the accounting):
        the job reserves the same resources on the same nodes itself."""
        for group in sorted(w.groups()):
            self.backend.remove(group)
        w.group_ids, w.handed_off = {}, True

    def _progress_running(self, w: Workload, now: float) -> None:
        lost = {s.node for s in w.slots.values() if not s.surplus} - self.nodes.keys()
        if lost:
            self._stop(w)
            self._move(w, State.QUEUED, now, f"{_nodes(lost)} left the cluster; re-queued")
            return
        for task, s in list(w.slots.items()):
            gone = s.node not in self.nodes
            if s.surplus and (gone or (s.releasing_at is not None and s.releasing_at <= now)):
                self._quietly(w, self.backend.remove, s.group)  # left behind: the orphan sweep
                del w.slots[task]
                w.group_ids.pop(s.group, None)
                self._touch(w)
            elif s.surplus and not s.ready and self.backend.is_ready(s.group):
                s.ready = True
                self._touch(w)
        if w.spec.kind == "job" and w.submission_id and self.jobs is not None:
            status = self.jobs.status(w.submission_id)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                self.finish(w.id, w.attempt, status == "SUCCEEDED", self._job_outcome(w, status), now)

    def _job_outcome(self, w: Workload, status: str) -> str:
        """How the Ray job ended, pointing a failure at its logs."""
        if status == "SUCCEEDED" or self.jobs is None:
            return f"Ray job {w.submission_id} {status}"
        detail = self.jobs.outcome(w.submission_id) or (
            "stopped outside kai-ray" if status == "STOPPED" else ""
        )
        return (
            f"Ray job {w.submission_id} {status}{f' ({detail})' if detail else ''}; "
            f"its output: `kai-ray job logs {w.id}`"
        )

    # ------------------------------------------------------------ views

    def info(self, wid: str) -> dict[str, Any]:
        return workload_view(self._get(wid), self.positions.get(wid))

    # ------------------------------------------------------------ helpers

    def _get(self, wid: str) -> Workload:
        try:
            return self.workloads[wid]
        except KeyError:
            raise KeyError(f"no workload {wid!r}; `kai-ray status` lists them") from None

    def _move(self, w: Workload, to: State, now: float, reason: str) -> None:
        w.move(to, now, reason)
        if to is State.QUEUED:
            w.queued_at = now
        self._touch(w)

    def _touch(self, w: Workload, changed: bool = True) -> None:
        self._dirty.add(w.id)
        if changed:
            self.changed.add(w.id)

    def _prune(self) -> None:
        done = [w for w in self.workloads.values() if w.state in TERMINAL]
        if len(done) > KEEP_FINISHED:
            done.sort(key=lambda w: w.since)
            for w in done[: len(done) - KEEP_FINISHED]:
                del self.workloads[w.id]
                self._dirty.add(w.id)


# Ray's node ids (56 hex digits) read as their first 12, as `ray status` and the CLI show them.
_RAY_NODE_ID = re.compile(r"\b[0-9a-f]{56}\b")


def _nodes(ids: Iterable[str]) -> str:
    """Node ids for a reason: "node 3a3afee48400", "nodes 3a3afee48400, 9c1d..."."""
    short = sorted({i[:12] for i in ids})
    return f"node{'s' if len(short) != 1 else ''} {', '.join(short)}"
