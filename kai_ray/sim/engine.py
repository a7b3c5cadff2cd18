"""The simulation: a virtual clock, an event heap of run ends, and the controller.

Jobs are submitted to a real `Controller` at their traced time; each controller step runs
the real core; a reservation is ready at once and its run ends after the job's remaining
work (an event in the heap). A preempted run keeps the work up to its last checkpoint
(every `checkpoint_s` of run time) and loses the rest; the job queues again.

Steps: all events at one virtual time are handled together and followed by one step
(with `period_s` > 0, by one step at the next multiple of it, as a scheduler running
every period would see them). A time where only runs ended and nothing waits needs no
step: there is nobody to place. Finished workloads leave the controller's table, so a
step costs what is live, not what has ever run.

Decisions that change with time alone (time-based fair share: a queue's share shrinks
as its usage grows, with no event at all) are seen the way a running scheduler sees
them: while something waits, a step comes at least every `wait_step_s` of virtual time
(by default one a minute when the policy keeps a usage history, none otherwise).

With an autoscaler (Options.autoscale, autoscale.py) nodes join and leave at their own
times, which are events too: a node that became ready is followed by a step when someone
waits, and so is the end of a gang's preemption delay (time alone ends it).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kai_ray.control import Controller
from kai_ray.control.memory import ManualClock, MemoryNodes
from kai_ray.control.usage import cluster_capacity
from kai_ray.control.validate import SubmitError
from kai_ray.control.workload import State, WorkloadSpec, group_owner
from kai_ray.core import CycleResult, Evict, NodeInfo, Pipeline, QueueInfo
from kai_ray.sim.autoscale import Autoscaler, NodeShape, delay_ends, largest_growth, too_big
from kai_ray.sim.gputypes import TypeRoom
from kai_ray.sim.jobs import JobRun, SimJob
from kai_ray.sim.metrics import Metrics
from kai_ray.sim.policies import POOL_QUEUE, SimPolicy
from kai_ray.sim.ports import Amount, ByType, NullStore, SimExecutor

# JobRun lives in jobs.py (metrics.py and gputypes.py name it); named here as before.
__all__ = ["DEFAULT_CHECKPOINT_S", "DEFAULT_PERIOD_S", "JobRun", "Options", "Simulation"]

DEFAULT_CHECKPOINT_S = 1800.0  # a job checkpoints every 30 minutes of its run time
DEFAULT_PERIOD_S = 0.0  # 0: one step per event time
MAX_STEPS_AT_ONCE = 4  # steps at one time: evictions free room the next step fills
DEFAULT_WAIT_STEP_S = 60.0


@dataclass(frozen=True, slots=True)
class Options:
    checkpoint_s: float = DEFAULT_CHECKPOINT_S
    period_s: float = DEFAULT_PERIOD_S
    event_log: bool = False  # keep every submit/start/preempt/finish (tests, events.csv)
    # A step at every run's end even when nobody waits (tests: the shortcut changes nothing).
    step_every_end: bool = False
    # Incremental cycles (the core keeps its state between steps); off: every step builds
    # it afresh (tests: the same decisions).
    incremental: bool = True
    # While something waits, a step at least this often (virtual seconds; 0: only at
    # events); None: DEFAULT_WAIT_STEP_S when the policy keeps a usage history, else 0.
    wait_step_s: float | None = None
    # Run times the scheduler is told (expected_runtime): "" none, "exact" the trace's,
    # "noisy" the trace's times a factor between 0.5 and 2 (log-uniform, seeded). With
    # either, each job's forecast start is taken the step it is submitted (ETA accuracy).
    runtime_estimates: str = ""
    seed: int = 0
    # An autoscaler (autoscale.py): the shape of the nodes it adds, how many at most, after
    # what latency, and when it removes them. None: the cluster is fixed.
    autoscale: NodeShape | None = None


@dataclass
class Simulation:
    jobs: Sequence[SimJob]
    nodes: Sequence[NodeInfo]
    queues: Sequence[QueueInfo]
    policy: SimPolicy
    options: Options = field(default_factory=Options)
    progress: Callable[[Simulation], None] | None = None

    def __post_init__(self) -> None:
        self.clock = ManualClock()
        self.executor = SimExecutor(listener=self, node_types={n.name: n.gpu_type for n in self.nodes})
        self.cluster = MemoryNodes(list(self.nodes))
        self.ctl = Controller(
            self.cluster,
            self.executor,
            NullStore(),
            self.clock,
            self.policy.queues(self.queues),
            self.policy.config,
            cycle=self.policy.cycle(self.options.incremental),
        )
        shape = self.options.autoscale
        self.autoscaler = Autoscaler(shape) if shape is not None else None
        # The snapshot says the cluster can grow (the preemption delay applies), and
        # a workload larger than it is now is accepted, as on Ray with its autoscaler.
        self.ctl.cluster_grows = shape is not None
        self.largest = [*self.nodes, *(largest_growth(shape) if shape is not None else [])]
        self.type_room = TypeRoom(self.largest)
        self.next_delay_end = math.inf  # the next end of a gang's preemption delay
        self.ctl.refresh_nodes()
        self.runs: dict[str, JobRun] = {j.id: JobRun(j, j.queue, j.duration) for j in self.jobs}
        self.queued: set[str] = set()  # submitted, waiting to run
        self.growing: set[str] = set()  # elastic, running below its most workers
        # What each of the controller's leaf queues holds (GPUs, cores, memory).
        self.held_by_queue: dict[str, Amount] = defaultdict(lambda: (0.0, 0.0, 0.0))
        self.heap: list[tuple[float, str]] = []  # (end of a run, run id)
        self.metrics = Metrics(self.queues, self.nodes, self.policy, self.options.event_log)
        self.steps = 0
        self.done = 0
        self.last_step_at = 0.0
        wait = self.options.wait_step_s
        self.wait_step_s = (
            wait if wait is not None else (DEFAULT_WAIT_STEP_S if self.ctl.usage is not None else 0.0)
        )
        self.estimates = RuntimeEstimates(self.options.runtime_estimates, self.options.seed)

    # ------------------------------------------------------------ the loop

    def run(self) -> Metrics:
        started = time.perf_counter()
        jobs, i = self.jobs, 0
        while i < len(jobs) or self.heap or self._nodes_coming():
            t = min(jobs[i].submit if i < len(jobs) else math.inf, self.heap[0][0] if self.heap else math.inf)
            due = self._wait_step_due()
            t = min(self._step_time(min(t, self._autoscale_due())), due)
            self.clock.t = t
            ended = self._end_runs(t)
            rescaled = self._rescale(t)
            first = i
            while i < len(jobs) and jobs[i].submit <= t:
                self._submit(jobs[i], t)
                i += 1
            # Room freed by runs that ended (or by new nodes) is of use only to someone
            # waiting (or to an elastic job below its most workers): otherwise no step.
            if (
                i > first
                or t >= due
                or ((ended or rescaled) and (self.queued or self.growing or self.options.step_every_end))
            ):
                self._steps(t)
                if i > first and self.estimates.on:
                    self._forecast(jobs[first:i], t)
            elif ended:
                self._settled(t)
            self._ask_for_nodes(t)
            if self.progress is not None:
                self.progress(self)
        self.metrics.close(self.clock.t, self.runs.values(), time.perf_counter() - started, self.steps)
        if self.autoscaler is not None:
            self.metrics.summary["autoscale"] = self.autoscaler.figures(self.metrics.summary["makespan_s"])
        return self.metrics

    # ------------------------------------------------------------ the autoscaler

    def _nodes_coming(self) -> bool:
        """Nodes are on their way for someone waiting: the run is not over."""
        return self.autoscaler is not None and bool(self.autoscaler.launching) and bool(self.queued)

    def _autoscale_due(self) -> float:
        """When the autoscaler changes the cluster next, or a gang's preemption delay ends
        (then it may evict: time alone ends the delay)."""
        if self.autoscaler is None:
            return math.inf
        return min(self.autoscaler.next_due(), self.next_delay_end if self.queued else math.inf)

    def _rescale(self, t: float) -> bool:
        """Nodes that are ready join, idle ones it added leave; whether a step is due (a
        node came, or a preemption delay ended)."""
        if self.autoscaler is None:
            return False
        came, gone = self.autoscaler.arrive(t), self.autoscaler.leave(t)
        if came or gone:
            names = {n.name for n in gone}
            self.cluster.node_list = [n for n in self.cluster.node_list if n.name not in names] + came
            self.executor.node_types.update({n.name: n.gpu_type for n in came})
            self.metrics.cluster_changed(t, came, 1.0)
            self.metrics.cluster_changed(t, gone, -1.0)
            self.ctl.refresh_nodes()
        return bool(came) or t >= self.next_delay_end

    def _ask_for_nodes(self, t: float) -> None:
        """After a step: the gangs waiting for room ask for nodes, and the nodes it added
        that hold nothing start their idle time."""
        scaler = self.autoscaler
        if scaler is None:
            return
        held_on = self.executor.held_on
        scaler.note_use(t, held_on)
        if not self.queued:
            self.next_delay_end = math.inf
            return
        waiting = [w for w in self.ctl.workloads.values() if w.state is State.QUEUED]
        scaler.ask(t, waiting, held_on)
        self.next_delay_end = delay_ends(waiting, self.policy.config.preemption_delay_s, t)

    def _forecast(self, submitted: Sequence[SimJob], t: float) -> None:
        """The forecast start of the jobs just submitted, as the scheduler would give it
        to them now (placed at once: now)."""
        waiting = [j for j in submitted if j.id in self.queued and not self.runs[j.id].rejected]
        etas = self.ctl.forecaster.make(t) if waiting else {}
        for job in submitted:
            run = self.runs[job.id]
            if run.rejected:
                continue
            run.forecast_taken = True
            eta = etas.get(job.id)
            run.forecast = t if job.id not in self.queued else (eta.at if eta is not None else None)

    def _wait_step_due(self) -> float:
        """When the next step comes without an event: something waits, and time alone
        may change what the scheduler decides (the usage history)."""
        every = self.wait_step_s
        return self.last_step_at + every if every > 0 and self.queued else math.inf

    def _step_time(self, t: float) -> float:
        period = self.options.period_s
        return math.ceil(t / period) * period if period > 0 else t

    def _steps(self, t: float) -> None:
        self.last_step_at = t
        for _ in range(MAX_STEPS_AT_ONCE):
            result = self._step(t)
            self.steps += 1
            self.metrics.sample_queues(t, result, self._team_requests())
            # Evictions free their room at once (no grace period): what the step could
            # only pipeline onto it is placed by another step at the same time.
            if not any(isinstance(d, Pipeline) for d in result.decisions):
                break

    def _step(self, t: float) -> CycleResult:
        """One step of the loop without the controller's pass over every live workload
        (`follow`): this backend reports each change as it happens instead, as Ray's
        watch does through group_ready(): runs' ends through finish(), reservations ready
        at once. The pass would cost O(running jobs) per step, more than the cycle
        itself. Nodes are refreshed only when the autoscaler changes them (_rescale)."""
        result = self.ctl.step(refresh_nodes=False, follow=False).result
        evictions = [d for d in result.decisions if isinstance(d, Evict)]
        self.metrics.stopped_by({d.job: d.action for d in evictions})
        self._start_reserved()
        for d in evictions:
            w = self.ctl.workloads.get(d.job)
            if w is not None and w.state is State.RUNNING:
                # An elastic job's surplus taken back: given up now (no grace period).
                self.ctl.group_ready(w.gang_group)
        return result

    def _settled(self, t: float) -> None:
        """Runs ended, nobody waits, no step: what the step would have recorded. Every
        queue's request is met, so its fair share is what it holds; a usage history
        (time-based fair share) records what each queue holds from now on, as the
        controller's cycle would (the core's allocated: subtree sums)."""
        self.metrics.settled(t)
        if self.ctl.usage is None:
            return
        allocated = {q.name: [0.0, 0.0, 0.0] for q in self.ctl.queues}
        parent = {q.name: q.parent for q in self.ctl.queues}
        for leaf, amount in self.held_by_queue.items():
            q: str | None = leaf
            while q is not None:
                row = allocated[q]
                row[0], row[1], row[2] = row[0] + amount[0], row[1] + amount[1], row[2] + amount[2]
                q = parent[q]
        rows = {name: (a[0], a[1], a[2]) for name, a in allocated.items()}
        self.ctl.usage.record(t, rows, cluster_capacity(self.ctl.nodes.values()))

    def _team_requests(self) -> dict[str, float] | None:
        """GPUs asked for per team (held + waiting): a pooled policy's fair shares are
        computed from them, as the core would for the trace's queues."""
        if not self.policy.pooled:
            return None
        return self.metrics.requested_gpus()

    # ------------------------------------------------------------ events

    def _submit(self, job: SimJob, now: float) -> None:
        run = self.runs[job.id]
        never = self.type_room.why_not(job.gpus, job.min_workers or job.workers, job.gpu_types)
        if not never and self.autoscaler is not None:
            never = too_big(job.gpus, job.min_workers or job.workers, self.largest)
        if never:
            self._reject(run, now, never)
            return
        spec = WorkloadSpec(
            queue=POOL_QUEUE if self.policy.pooled else job.queue,
            priority=job.priority,
            preemptible=job.priority < 100,
            workers=job.workers,
            min_workers=job.min_workers,
            resources_per_worker=_resources(job),
            kind="job",
            entrypoint="simulated",
            grace_period=0.0,
            admission_timeout=math.inf,
            expected_runtime=self.estimates.of(job),
            accelerator_type=list(job.gpu_types),  # as on Ray: the controller makes the JobInfo
        )
        try:
            self.ctl.submit(job.id, spec)
        except SubmitError as exc:
            self._reject(run, now, str(exc))
            return
        self.queued.add(job.id)
        self.metrics.submitted(run, now)

    def _reject(self, run: JobRun, now: float, reason: str) -> None:
        run.rejected = reason
        self.metrics.rejected(run, now)
        self.done += 1

    def _start_reserved(self) -> None:
        """Reservations are ready at once: tell the controller, which starts the run."""
        reserved, self.executor.reserved = self.executor.reserved, []
        for group in reserved:
            self.ctl.group_ready(group)

    def started(self, wid: str, run_id: str) -> None:
        now = self.clock.t
        run = self.runs[wid]
        run.started = now
        if run.first_start is None:
            run.first_start = now
        self.queued.discard(wid)
        heapq.heappush(self.heap, (now + run.remaining, run_id))
        self.metrics.started(run, now)

    def _end_runs(self, t: float) -> bool:
        ended = False
        while self.heap and self.heap[0][0] <= t:
            end, run_id = heapq.heappop(self.heap)
            if self.executor.runs.get(run_id) != "RUNNING":
                continue  # preempted since: a stale end
            wid = group_owner(run_id)
            run = self.runs[wid]
            self.executor.succeed(run_id)
            held = run.gpus
            w = self.ctl.workloads[wid]
            self.ctl.finish(wid, w.attempt, ok=True)
            run.finished, run.remaining = end, 0.0
            del self.ctl.workloads[wid]  # keep the table to what is live
            self.metrics.finished(run, end, held)
            self.done += 1
            ended = True
        return ended

    def stopped(self, wid: str, run_id: str) -> None:
        """A run stopped before its end: preempted. It keeps its checkpointed work."""
        now = self.clock.t
        run = self.runs[wid]
        assert run.started is not None
        ran = now - run.started
        every = self.options.checkpoint_s
        kept = math.floor(ran / every) * every if every > 0 else ran
        lost = ran - kept
        run.remaining -= kept
        run.preemptions += 1
        run.lost_gpu_s += lost * run.gpus
        run.started = None
        self.queued.add(wid)
        self.metrics.preempted(run, now, lost, run.gpus)

    def held(self, wid: str, amount: Amount, by_type: ByType) -> None:
        run = self.runs[wid]
        run.ran_on.update(t for t, gpus in by_type if gpus > 0)
        gpus = amount[0]
        run.gpus += gpus
        queue = POOL_QUEUE if self.policy.pooled else run.team
        h = self.held_by_queue[queue]
        self.held_by_queue[queue] = (h[0] + amount[0], h[1] + amount[1], h[2] + amount[2])
        if run.job.min_workers and 0 < run.gpus < run.job.total_gpus:
            self.growing.add(wid)  # room that frees up may let it grow
        else:
            self.growing.discard(wid)
        self.metrics.held(run, self.clock.t, gpus)
        self.metrics.types.held(self.clock.t, by_type)


class RuntimeEstimates:
    """The run time a job declares: none, the trace's own, or the trace's off by a
    factor between 0.5 and 2 (log-uniform; the same jobs get the same factors for a seed)."""

    def __init__(self, mode: str, seed: int) -> None:
        if mode not in ("", "exact", "noisy"):
            raise ValueError(f"runtime estimates {mode!r}: use exact or noisy")
        self.mode, self.on = mode, bool(mode)
        self._rng = np.random.default_rng(seed)

    def of(self, job: SimJob) -> float | None:
        if not self.on or job.duration <= 0:
            return None
        factor = 2.0 ** self._rng.uniform(-1.0, 1.0) if self.mode == "noisy" else 1.0
        return job.duration * factor


def _resources(job: SimJob) -> dict[str, Any]:
    out: dict[str, Any] = {"GPU": job.gpus, "CPU": job.cpu}
    if job.memory:
        out["memory"] = job.memory
    return out
