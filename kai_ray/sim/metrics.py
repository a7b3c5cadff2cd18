"""What one simulation measures, per policy, overall and per queue (the trace's queues):
job completion time and queueing delay, GPU utilisation over time, fairness (GPUs held
against fair share over time, Jain's index), preemptions and GPU-hours lost, makespan.

Fairness is in GPUs. A queue's fair share at a time is the core's (CycleResult.queues)
from the last step; a pooled policy (FIFO) has no queues of its own, so the same
function the core uses (compute_fair_shares) is applied to the trace's queues with what
each asks for then. Jain's index is over the queues that ask for something:
x = held / fair share, J = (sum x)^2 / (n sum x^2); 1 when every such queue holds
exactly its fair share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kai_ray.core import CycleResult, NodeInfo, QueueInfo
from kai_ray.core.rules.fairshare import compute_fair_shares
from kai_ray.core.state.queues import build_queue_tree
from kai_ray.sim.gputypes import TypeUsage, held_share
from kai_ray.sim.policies import SimPolicy
from kai_ray.sim.series import StepSeries

if TYPE_CHECKING:
    from kai_ray.sim.jobs import JobRun

__all__ = ["EVENT_COLUMNS", "Metrics", "stats"]

SERIES_BINS = 200  # windows of the series over time in summary.json
LONG_WAIT_S = 600.0  # forecast accuracy counts the jobs that waited longer than this
BIG_GANG_GPUS = 32.0  # waits by size: a big gang asks for this many GPUs or more
SMALL_JOB_GPUS = 8.0  # ... a small job for fewer (less than one node of 8)
EVENT_COLUMNS = ("time", "event", "job", "queue", "gpus", "detail")
Event = tuple[float, str, str, str, float, str]


def stats(values: Sequence[float] | np.ndarray[Any, Any]) -> dict[str, float | None]:
    """mean, p50, p95, p99 (None for no values)."""
    a = np.asarray(values, dtype=np.float64)
    if not len(a):
        return {"mean": None, "p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p95": float(p95), "p99": float(p99)}


class Metrics:
    def __init__(
        self, queues: Sequence[QueueInfo], nodes: Sequence[NodeInfo], policy: SimPolicy, event_log: bool
    ) -> None:
        self.policy = policy
        self.queue_list = list(queues)
        parents = {q.parent for q in queues}
        self.teams = [q.name for q in queues if q.name not in parents]
        self.total_gpus = float(sum(n.gpus for n in nodes))  # now (an autoscaler changes it)
        self.capacity = StepSeries()  # the cluster's GPUs over time
        self.capacity.record(0.0, self.total_gpus)
        self.types = TypeUsage(nodes)  # GPUs held per GPU type (the engine records them)
        self.held_now = dict.fromkeys(self.teams, 0.0)
        self.waiting_now = dict.fromkeys(self.teams, 0.0)  # GPUs of the gangs still waiting
        self.fair_now = dict.fromkeys(self.teams, 0.0)
        self.used = StepSeries()
        self.held_series = {t: StepSeries() for t in self.teams}
        self.fair_series = {t: StepSeries() for t in self.teams}
        self.jain = StepSeries()  # NaN-free: only times with a queue asking are weighted
        self.asking = StepSeries()  # 1 while some queue asks for GPUs (Jain's weight)
        self._total = 0.0
        self.events: list[Event] | None = [] if event_log else None
        self._unnamed_stops: list[int] = []  # preempt events whose action is not known yet
        self.preemptions = 0
        self.summary: dict[str, Any] = {}
        self.end = 0.0
        self._tree = build_queue_tree(self.queue_list)
        self._pooled_key: tuple[float, ...] = ()
        self.jct: list[float] = []  # per completed job, for the plots
        self.delays: list[float] = []

    # ------------------------------------------------------------ recording

    def _log(self, t: float, event: str, run: JobRun, gpus: float, detail: str = "") -> None:
        if self.events is not None:
            self.events.append((t, event, run.job.id, run.team, gpus, detail))

    def submitted(self, run: JobRun, t: float) -> None:
        self.waiting_now[run.team] += run.job.gpus * (run.job.min_workers or run.job.workers)
        self._log(t, "submit", run, run.job.total_gpus)

    def rejected(self, run: JobRun, t: float) -> None:
        self._log(t, "reject", run, run.job.total_gpus, run.rejected)

    def started(self, run: JobRun, t: float) -> None:
        self.waiting_now[run.team] -= run.job.gpus * (run.job.min_workers or run.job.workers)
        self._log(t, "start", run, run.gpus, f"remaining={run.remaining:g}")

    def preempted(self, run: JobRun, t: float, lost_s: float, held: float) -> None:
        """`held`: the GPUs it gives back. Which action stopped it is known once the step
        that stopped it is over (`stopped_by`)."""
        self.preemptions += 1
        self.waiting_now[run.team] += run.job.gpus * (run.job.min_workers or run.job.workers)
        self._log(t, "preempt", run, held, f"lost={lost_s!r}")
        if self.events is not None:
            self._unnamed_stops.append(len(self.events) - 1)

    def stopped_by(self, actions: Mapping[str, str]) -> None:
        """The preemptions logged during the step just over get the action of the core's
        eviction that stopped each (job -> reclaim, preempt, consolidation, ...): `lost=S
        by=ACTION` (a consolidation moves a job: it stops and starts again elsewhere)."""
        events = self.events
        if events is None:
            return
        for i in self._unnamed_stops:
            t, event, job, team, gpus, detail = events[i]
            if job in actions:
                events[i] = (t, event, job, team, gpus, f"{detail} by={actions[job]}")
        self._unnamed_stops.clear()

    def finished(self, run: JobRun, t: float, held: float) -> None:
        self._log(t, "finish", run, held)

    def held(self, run: JobRun, t: float, delta: float) -> None:
        team = run.team
        self.held_now[team] += delta
        self._total += delta
        self.used.record(t, self._total)
        self.held_series[team].record(t, self.held_now[team])
        self._fairness(t)

    def cluster_changed(self, t: float, nodes: Sequence[NodeInfo], sign: float) -> None:
        """Nodes joined (sign 1) or left (-1) the cluster: an autoscaler's."""
        for node in nodes:
            self.total_gpus += sign * node.gpus
            self.types.grow(t, node, sign)
        self.capacity.record(t, self.total_gpus)
        self._pooled_key = ()  # a pooled policy's fair shares split another total now

    def requested_gpus(self) -> dict[str, float]:
        return {t: self.held_now[t] + self.waiting_now[t] for t in self.teams}

    def sample_queues(self, t: float, result: CycleResult, requested: Mapping[str, float] | None) -> None:
        """Fair shares after a step: the core's, or (pooled) computed for the trace's queues."""
        if requested is None:
            fair = {t_: result.queues[t_].fair_share[0] for t_ in self.teams if t_ in result.queues}
        else:
            fair = self._pooled_fair_shares(requested)
        for team, value in fair.items():
            if value != self.fair_now[team]:
                self.fair_now[team] = value
                self.fair_series[team].record(t, value)
        self._fairness(t)

    def settled(self, t: float) -> None:
        """Runs ended and nobody waits: no step runs. Every queue's request is then met
        (it asks for what it holds), so its fair share is what it holds."""
        for team in self.teams:
            if self.fair_now[team] != self.held_now[team]:
                self.fair_now[team] = self.held_now[team]
                self.fair_series[team].record(t, self.held_now[team])
        self._fairness(t)

    def _pooled_fair_shares(self, requested: Mapping[str, float]) -> dict[str, float]:
        key = tuple(requested[t] for t in self.teams)
        if key == self._pooled_key:  # the same requests: the same shares
            return self.fair_now
        self._pooled_key = key
        tree = self._tree
        leaf = np.zeros((len(tree), 3))
        for team, gpus in requested.items():
            leaf[tree.index[team], 0] = gpus
        for q in sorted(range(len(tree)), key=lambda q: -len(tree.ancestors[q])):
            if tree.parent[q] >= 0:
                leaf[tree.parent[q]] += leaf[q]
        total = np.array([self.total_gpus, 0.0, 0.0])
        shares = compute_fair_shares(tree, total, leaf, None, self.policy.config.k_value)
        return {team: float(shares.fair_share[tree.index[team], 0]) for team in self.teams}

    def _fairness(self, t: float) -> None:
        xs = [
            self.held_now[q] / self.fair_now[q]
            for q in self.teams
            if self.fair_now[q] > 1e-9 and self.held_now[q] + self.waiting_now[q] > 1e-9
        ]
        if xs:
            total, squares = sum(xs), sum(x * x for x in xs)
            self.jain.record(t, total * total / (len(xs) * squares) if squares > 0 else 0.0)
        else:
            self.jain.record(t, 0.0)
        self.asking.record(t, 1.0 if xs else 0.0)

    # ------------------------------------------------------------ the figures

    def close(self, end: float, runs: Iterable[JobRun], wall_s: float, steps: int) -> dict[str, Any]:
        self.end = end
        runs = list(runs)
        done = [r for r in runs if r.finished is not None]
        self.jct = [r.finished - r.job.submit for r in done if r.finished is not None]
        self.delays = [r.first_start - r.job.submit for r in runs if r.first_start is not None]
        makespan = max((r.finished for r in done if r.finished is not None), default=0.0)
        self.end = max(end, makespan)
        span = np.array([0.0, makespan])
        asking_time = float(np.diff(self.asking.integral(span))[0])
        self.summary = {
            "policy": self.policy.name,
            "about": self.policy.about,
            **self._job_figures(runs),
            "makespan_s": makespan,
            "gpu_utilisation": held_share(self.used, self.capacity, makespan),
            "per_gpu_type": self.types.figures(runs, makespan, _type_jobs),
            "jain_index": float(np.diff(self.jain.integral(span))[0]) / asking_time if asking_time else None,
            "queues": {team: self._queue_figures(team, runs, makespan) for team in self.teams},
            "series": self.series(makespan),
            "wall_s": wall_s,
            "steps": steps,
        }
        accuracy = self.forecast_accuracy(runs)
        if accuracy is not None:
            self.summary["forecast_accuracy"] = accuracy
        return self.summary

    def series(self, end: float, bins: int = SERIES_BINS) -> dict[str, Any]:
        """The figures over time: time-weighted means over `bins` equal windows of [0, end]
        (Jain's index: over the part of each window when some queue asked; null if none)."""
        edges = np.linspace(0.0, end, bins + 1) if end > 0 else np.array([0.0, 1.0])
        asking = self.asking.means(edges)
        jain = np.divide(self.jain.means(edges), asking, out=np.full(len(asking), np.nan), where=asking > 0)

        def rounded(values: np.ndarray[Any, Any], digits: int = 4) -> list[float | None]:
            return [None if np.isnan(v) else round(float(v), digits) for v in values]

        return {
            "window_s": float(edges[1] - edges[0]),
            "gpu_utilisation": rounded(self.utilisation_over(edges)),
            "jain_index": rounded(jain),
            "gpus_held": {t: rounded(self.held_series[t].means(edges), 2) for t in self.teams},
            "fair_share_gpus": {t: rounded(self.fair_series[t].means(edges), 2) for t in self.teams},
        }

    def utilisation_over(self, edges: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """GPUs held over the cluster's GPUs in each window [edges[i], edges[i+1])."""
        there = self.capacity.means(edges)
        return np.divide(self.used.means(edges), there, out=np.zeros(len(there)), where=there > 0)

    def _job_figures(self, runs: Sequence[JobRun]) -> dict[str, Any]:
        done = [r for r in runs if r.finished is not None]
        jct = [r.finished - r.job.submit for r in done if r.finished is not None]
        delay = [r.first_start - r.job.submit for r in runs if r.first_start is not None]
        return {
            "jobs": len(runs),
            "completed": len(done),
            "rejected": sum(1 for r in runs if r.rejected),
            "jct_s": stats(jct),
            "queueing_delay_s": stats(delay),
            "queueing_delay_by_size_s": _by_size(runs),
            "preemptions": sum(r.preemptions for r in runs),
            "gpu_hours_lost": sum(r.lost_gpu_s for r in runs) / 3600.0,
        }

    def forecast_accuracy(self, runs: Sequence[JobRun]) -> dict[str, Any] | None:
        """How far each job's forecast start (taken when it was submitted) was from its
        start, for jobs that waited longer than LONG_WAIT_S: |forecast - start| / wait.
        A job given no forecast is counted apart. None when no forecast was taken."""
        taken = [r for r in runs if r.forecast_taken and r.first_start is not None]
        if not taken:
            return None
        long = [r for r in taken if r.first_start is not None and r.first_start - r.job.submit > LONG_WAIT_S]
        errors = [
            abs(r.forecast - r.first_start) / (r.first_start - r.job.submit)
            for r in long
            if r.forecast is not None and r.first_start is not None
        ]
        p50, p90 = np.percentile(errors, [50, 90]) if errors else (None, None)
        return {
            "jobs_waited_over_10m": len(long),
            "forecast": len(errors),
            "no_forecast": len(long) - len(errors),
            "relative_error_p50": None if p50 is None else float(p50),
            "relative_error_p90": None if p90 is None else float(p90),
        }

    def _queue_figures(self, team: str, runs: Sequence[JobRun], makespan: float) -> dict[str, Any]:
        mine = [r for r in runs if r.team == team]
        held = self.held_series[team].mean(0.0, makespan)
        fair = self.fair_series[team].mean(0.0, makespan)
        return {
            **self._job_figures(mine),
            "mean_gpus_held": held,
            "mean_fair_share_gpus": fair,
            "held_over_fair_share": held / fair if fair > 1e-9 else None,
        }


def _type_jobs(runs: Sequence[JobRun]) -> dict[str, Any]:
    """The job figures of one GPU type's block (runs: the jobs that held GPUs of it)."""
    done = [r.finished - r.job.submit for r in runs if r.finished is not None]
    delay = [r.first_start - r.job.submit for r in runs if r.first_start is not None]
    return {
        "jobs": len(runs),
        "completed": len(done),
        "jct_s": stats(done),
        "queueing_delay_s": stats(delay),
        "queueing_delay_by_size_s": _by_size(runs),
    }


def _by_size(runs: Sequence[JobRun]) -> dict[str, dict[str, float | int | None]]:
    """Queueing delay of big gangs and of small jobs apart (what reservations trade)."""
    out: dict[str, dict[str, float | int | None]] = {}
    for name, low, high in (("big_gangs", BIG_GANG_GPUS, math.inf), ("small_jobs", 0.0, SMALL_JOB_GPUS)):
        delay = [
            r.first_start - r.job.submit
            for r in runs
            if r.first_start is not None and low <= r.job.total_gpus < high
        ]
        out[name] = {"jobs": len(delay), **stats(delay)}
    return out
