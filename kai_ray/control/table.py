"""The workload table: the workloads a scheduler owns (Ray's, the simulator's), their
lifecycle and their write-ahead records.

Every change goes through `lifecycle.transition`, whose effects the table carries out
through the backend's Executor; records are written to the Store before the effects
they lead to (write-ahead), so a restart never admits twice. Carrying out one
workload's effects is isolated from every other: an error there fails that workload
(when trying again cannot help) or re-queues it with a back-off, with the error in its
reason. Every change is also an event (kai_ray.control.events), handed out by `drain`.

Kubernetes has no such table: its API server holds the lifecycle
(kai_ray.control.observed reads it back).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kai_ray.control import lifecycle as lc
from kai_ray.control.events import Admitted, ControlEvent, Preempted, WorkloadChanged
from kai_ray.control.ports import BackendError, Clock, Executor, Store, WorkerPlacement
from kai_ray.control.runtime import Runtimes, shape_key
from kai_ray.control.snapshot import JobInfos, request_for
from kai_ray.control.store import Records
from kai_ray.control.workload import TERMINAL, State, Workload

__all__ = ["KEEP_FINISHED", "MAX_UNEXPECTED_FAILURES", "WORKLOAD_KEY", "WorkloadTable"]

log = logging.getLogger(__name__)
KEEP_FINISHED = 2000  # finished workloads kept for status queries
# An error an adapter did not classify (a bug, an unexpected failure) is retried with
# back-off like a transient one, but only this many times in a row.
MAX_UNEXPECTED_FAILURES = 5
WORKLOAD_KEY = "wl/"  # the store's key prefix of a workload's record


class WorkloadTable:
    def __init__(self, executor: Executor, store: Store, clock: Clock, node_label: str) -> None:
        self.executor, self.clock = executor, clock
        self.records = Records(store)
        self.words: lc.Words = getattr(executor, "words", lc.NEUTRAL)
        self.workloads: dict[str, Workload] = {}
        self.infos = JobInfos(node_label)  # each live workload as the core's JobInfo
        self._dirty: set[str] = set()
        self._finished: dict[str, None] = {}  # finished workloads, longest finished first
        self.runtimes = Runtimes()  # expected run times: declared, the history, queue defaults
        self.timed: dict[str, None] = {}  # running workloads with a max runtime
        self._events: list[ControlEvent] = []

    def get(self, wid: str) -> Workload:
        try:
            return self.workloads[wid]
        except KeyError:
            raise KeyError(f"no workload {wid!r}; `kai-ray status` lists them") from None

    def loaded(self, workloads: Iterable[Workload]) -> None:
        """Rows read back from the store after a restart."""
        for w in workloads:
            self.workloads[w.id] = w
        done = sorted((w for w in self.workloads.values() if w.terminal), key=lambda w: w.since)
        self._finished = dict.fromkeys(w.id for w in done)
        self.timed = dict.fromkeys(w.id for w in self.workloads.values() if _runs_timed(w))

    # ------------------------------------------------------------ transitions and effects

    def fire(self, w: Workload, event: lc.Event, now: float, doing: str) -> None:
        self.carry_out(w, self.transition(w, event, now), now, doing)

    def transition(self, w: Workload, event: lc.Event, now: float) -> list[lc.Effect]:
        old, preemptions, workers = w.state, w.preemptions, _workers(w)
        effects = lc.transition(w, event, now, self.words)
        self.changed(w.id)
        if w.terminal and old not in TERMINAL:
            self._finished[w.id] = None
        if w.state is not old or _workers(w) != workers:
            self._events.append(WorkloadChanged(w.id, w.spec.queue, old.value, w.state.value, w.reason, now))
        if old is State.ADMITTING and w.state is State.RUNNING:
            self._events.append(Admitted(w.id, w.spec.queue, now - w.queued_at))
        if w.state is not old:
            self._timed(w, old)
        if w.preemptions > preemptions and isinstance(event, lc.TasksEvicted):
            self._events.append(Preempted(w.id, w.spec.queue, event.why))
        return effects

    def _timed(self, w: Workload, old: State) -> None:
        """Keep `timed` to the running workloads with a max runtime (the controller
        looks at them each step), and learn how long a workload took when it succeeds."""
        if _runs_timed(w):
            self.timed[w.id] = None
        else:
            self.timed.pop(w.id, None)
        if w.state is State.SUCCEEDED and old in (State.RUNNING, State.PREEMPTING):
            request = self.infos.request(w)
            self.runtimes.history.finished(shape_key(w.spec.queue, w.spec.workers, request), w.ran)

    def carry_out(self, w: Workload, effects: list[lc.Effect], now: float, doing: str) -> None:
        for effect in effects:
            try:
                self._do(w, effect, now)
            except Exception as exc:
                if isinstance(effect, lc.Release | lc.Stop | lc.Notify):
                    # Best effort: a release that failed is retried by the orphan sweep.
                    log.warning("workload %s: %s failed: %s", w.id, type(effect).__name__, exc)
                    continue
                self.failed(w, now, doing, exc)
                return

    def _do(self, w: Workload, effect: lc.Effect, now: float) -> None:
        if isinstance(effect, lc.Reserve):
            request = request_for(w.spec.resources_per_worker)
            workers = [WorkerPlacement(p.node, request) for p in effect.placements]
            w.group_ids[effect.group] = self.executor.reserve(effect.group, workers)
        elif isinstance(effect, lc.Release):
            self.executor.release(effect.group, effect.kill)
        elif isinstance(effect, lc.Start):
            self.fire(w, lc.Started(self.executor.start(w)), now, "starting it")
        elif isinstance(effect, lc.Stop):
            self.executor.stop(effect.runner, effect.run_id)
        else:
            self.executor.notify(w.id, effect.notice)

    def failed(self, w: Workload, now: float, doing: str, exc: Exception) -> None:
        """An effect failed: fail the workload, or re-queue it with back-off."""
        if isinstance(exc, BackendError):
            log.warning("workload %s: %s failed: %s", w.id, doing, exc)
            text, permanent = str(exc), exc.permanent
        else:  # not classified by the adapter: keep the traceback, retry a few times
            log.error("workload %s: %s failed", w.id, doing, exc_info=exc)
            text = f"{type(exc).__name__}: {exc}"
            permanent = w.failed_admissions + 1 >= MAX_UNEXPECTED_FAILURES
        if not w.terminal:
            self.fire(w, lc.ActionFailed(doing, text, permanent), now, doing)

    # ------------------------------------------------------------ records and events

    def flush(self) -> None:
        """Write every changed record, as one batch."""
        changed = {}
        for wid in sorted(self._dirty):
            w = self.workloads.get(wid)
            if w is None:
                self.records.delete(WORKLOAD_KEY + wid)
            else:
                changed[WORKLOAD_KEY + wid] = w.to_json()
        if changed:
            self.records.save_many(changed)
        self._dirty.clear()

    def changed(self, wid: str) -> None:
        self._dirty.add(wid)  # to write
        self.infos.changed(wid)  # to describe to the core afresh

    def touch(self, w: Workload, event: ControlEvent) -> None:
        self.changed(w.id)
        self._events.append(event)

    def drain(self) -> list[ControlEvent]:
        events, self._events = self._events, []
        return events

    def prune(self) -> None:
        """Forget the longest-finished workloads beyond KEEP_FINISHED (O(1) a submission:
        with ten thousand waiting, a scan for them would cost more than the submission)."""
        while len(self._finished) > KEEP_FINISHED:
            wid = next(iter(self._finished))
            del self._finished[wid]
            if self.workloads.pop(wid, None) is not None:
                self.changed(wid)


def _runs_timed(w: Workload) -> bool:
    """Running with a max runtime: looked at each step (WorkloadTable.timed)."""
    return w.state is State.RUNNING and w.spec.max_runtime is not None


def _workers(w: Workload) -> list[tuple[str, str, float | None]]:
    return [(t, s.state.value, s.releasing_at) for t, s in w.ordered_slots()]
