"""When will my job start? A forecast, from the live snapshot, of when each waiting
workload starts: time runs forward over the running work's expected ends, and at each
end the waiting work is placed the way allocate places it.

The model, and what it leaves out (docs/semantics.md, "Forecast"):
- a running workload ends at its start plus its expected run time (kai_ray.control.
  runtime: declared, history, queue default, max runtime), its earlier runs counted; one
  past its expected end ends at once; a releasing one is gone now;
- at each end, waiting gangs are placed whole, each queue taking its turn by its GPUs
  held against its fair share (the last cycle's), each queue's line in its order
  (priority, then age); a gang that does not fit does not stop those behind it, as in
  allocate; a leaf queue's GPU limit is kept;
- tasks are placed binpacked (the fullest nodes that fit first), one per node for
  STRICT_SPREAD, on one node for STRICT_PACK, on nodes its selector allows;
- reclaim, preemption and consolidation are not foreseen, nor work yet to be submitted;
  a forecast is a best guess, made again every few seconds (`Forecaster`).
- Work whose run time is not known holds its room for ever: a workload that waits for
  that room gets no time, but the reason (which workloads, and what to declare).

Cost: a pass over the shapes of waiting work (queue, task count, request) at each end,
with what each node could hold of each shape kept as an array and updated for the
nodes that changed; ten thousand waiting workloads take well under a second
(`kai-ray bench forecast`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kai_ray.control.runtime import Runtimes, format_duration
from kai_ray.core import (
    UNLIMITED,
    ClusterSnapshot,
    JobInfo,
    NodeInfo,
    QueueStatus,
    Request,
    TaskInfo,
    TaskStatus,
)

__all__ = ["FORECAST_EVERY_S", "HORIZON_S", "Eta", "Forecaster", "forecast"]

HORIZON_S = 30 * 86400.0  # no forecast beyond this
FORECAST_EVERY_S = 5.0  # a forecast is made again at most this often
_LISTED = 3  # holders named in a reason


@dataclass(frozen=True, slots=True)
class Eta:
    """A waiting workload's forecast start: `at` (the scheduler's clock) and, for
    people, `text`; `at` None: it cannot be said, and `text` says why."""

    at: float | None
    text: str

    def as_dict(self, now: float) -> dict[str, object]:
        return {
            "at": self.at,
            "in_s": None if self.at is None else max(0.0, self.at - now),
            "text": self.text,
        }


@dataclass(slots=True)
class _Shape:
    request: np.ndarray  # per task: gpu, cpu, memory
    tasks: int
    mode: str  # "pack", "spread" (one task per node) or "one" (all on one node)
    eligible: np.ndarray  # nodes its selector allows
    lines: dict[str, deque[tuple[tuple[int, float], str]]] = field(
        default_factory=dict
    )  # queue -> (rank, job)


@dataclass(slots=True)
class _End:
    at: float
    job: str
    nodes: np.ndarray
    amounts: np.ndarray  # per node in `nodes`: gpu, cpu, memory
    queue: str
    gpus: float
    source: str


def forecast(
    snapshot: ClusterSnapshot,
    now: float,
    runtimes: Runtimes,
    fair_share: Mapping[str, QueueStatus] | None = None,
    horizon_s: float = HORIZON_S,
) -> dict[str, Eta]:
    """Each waiting workload of the snapshot (none of its gang placed) -> its Eta."""
    return _Forward(snapshot, now, runtimes, fair_share or {}, horizon_s).run()


class _Forward:
    def __init__(
        self,
        snap: ClusterSnapshot,
        now: float,
        runtimes: Runtimes,
        fair_share: Mapping[str, QueueStatus],
        horizon_s: float,
    ) -> None:
        self.now, self.runtimes, self.horizon = now, runtimes, now + horizon_s
        nodes = [n for n in snap.nodes if not n.unschedulable]
        self.node_index = {n.name: i for i, n in enumerate(nodes)}
        self.free = np.array([_capacity(n) for n in nodes], dtype=float).reshape(len(nodes), 3)
        self.labels = [n.labels for n in nodes]
        self.gpu_memory = nodes[0].gpu_memory if nodes else 0.0
        self.limit = {q.name: q.limit[0] for q in snap.queues if q.limit[0] != UNLIMITED}
        self.weight = {q.name: _weight(q.name, fair_share, q.quota[0]) for q in snap.queues}
        self.priority = {q.name: q.priority for q in snap.queues}
        self.held: dict[str, float] = {}
        self.ends: list[tuple[float, int, _End]] = []
        self.unknown: dict[str, None] = {}  # running work with no run time known
        self.shapes: list[_Shape] = []
        self._shape_ids: dict[tuple[object, ...], int] = {}
        self.waiting: dict[str, str] = {}  # job -> its queue
        self.infos: dict[str, JobInfo] = {}  # the waiting ones
        self.sources: set[str] = set()  # what the ends so far were estimated from
        for job in snap.jobs:
            self._add(job)
        self._fit_arrays()

    # ------------------------------------------------------------ the snapshot

    def _add(self, job: JobInfo) -> None:
        holding = [t for t in job.tasks if t.status.holds_capacity and t.node in self.node_index]
        active = any(t.status.is_active for t in job.tasks)
        for t in holding:
            self.free[self.node_index[t.node or ""]] -= self._vector(t.request)
        if holding:
            self._ending(job, holding)
        if active or not any(t.status is TaskStatus.PENDING for t in job.tasks):
            return
        self._wait(job)

    def _ending(self, job: JobInfo, holding: Sequence[TaskInfo]) -> None:
        releasing = [t for t in holding if t.status is TaskStatus.RELEASING]
        running = [t for t in holding if t.status is not TaskStatus.RELEASING]
        if releasing:
            self._push(job, releasing, self.now, "releasing")
        if not running:
            return
        estimate = self.runtimes.expected(job)
        if estimate.seconds is None:
            self._push(job, running, math.inf, "unknown")
            self.unknown[job.name] = None
            return
        started = min((t.since for t in running if t.status is TaskStatus.RUNNING), default=self.now)
        end = started + max(0.0, estimate.seconds - job.ran)
        self._push(job, running, max(end, self.now), estimate.source)

    def _push(self, job: JobInfo, tasks: Sequence[TaskInfo], at: float, source: str) -> None:
        nodes = np.array([self.node_index[t.node or ""] for t in tasks], dtype=int)
        amounts = np.array([self._vector(t.request) for t in tasks], dtype=float).reshape(len(tasks), 3)
        gpus = float(amounts[:, 0].sum()) if any(t.status.is_active for t in tasks) else 0.0
        self.held[job.queue] = self.held.get(job.queue, 0.0) + gpus
        end = _End(at, job.name, nodes, amounts, job.queue, gpus, source)
        heapq.heappush(self.ends, (at, len(self.ends), end))

    def _wait(self, job: JobInfo) -> None:
        pending = [t for t in job.tasks if t.status is TaskStatus.PENDING]
        request = self._vector(pending[0].request)
        tasks = max(1, min(job.gang_size, len(job.tasks)))
        mode = "one" if job.topology is not None else ("spread" if job.spread == "required" else "pack")
        selector = tuple(sorted(job.node_selector.items()))
        key = (tuple(request), tasks, mode, selector)
        sid = self._shape_ids.get(key)
        if sid is None:
            sid = self._shape_ids[key] = len(self.shapes)
            eligible = np.array(
                [all(lab.get(k) == v for k, v in selector) for lab in self.labels], dtype=bool
            )
            self.shapes.append(_Shape(np.array(request), tasks, mode, eligible))
        rank = (-job.priority, job.created_at)
        self.shapes[sid].lines.setdefault(job.queue, deque()).append((rank, job.name))
        self.waiting[job.name] = job.queue
        self.infos[job.name] = job

    def _vector(self, request: Request) -> tuple[float, float, float]:
        gpu = request.gpu or (request.gpu_fraction(self.gpu_memory) if request.gpu_memory else 0.0)
        return (gpu, request.cpu, request.memory)

    # ------------------------------------------------------------ what fits

    def _fit_arrays(self) -> None:
        for shape in self.shapes:  # each queue's line in its order
            for q, line in shape.lines.items():
                shape.lines[q] = deque(sorted(line))
        self.request = np.array([s.request for s in self.shapes], dtype=float).reshape(len(self.shapes), 3)
        self.tasks = np.array([s.tasks for s in self.shapes], dtype=float)
        self.eligible = np.array([s.eligible for s in self.shapes], dtype=bool).reshape(
            len(self.shapes), len(self.node_index)
        )
        self.units = self._units(np.arange(len(self.node_index)))
        self.total = self.units.sum(axis=1)

    def _units(self, nodes: np.ndarray) -> np.ndarray:
        """How many tasks of each shape each of `nodes` could hold now (capped at the
        shape's task count)."""
        free = np.maximum(self.free[nodes], 0.0)[None, :, :]  # 1 x k x 3
        need = self.request[:, None, :]  # s x 1 x 3
        with np.errstate(divide="ignore", invalid="ignore"):
            each = np.where(need > 0, np.floor(free / np.where(need > 0, need, 1.0) + 1e-9), np.inf)
        units = np.minimum(each.min(axis=2), self.tasks[:, None])
        return np.where(self.eligible[:, nodes], units, 0.0)

    def _changed(self, nodes: np.ndarray) -> None:
        nodes = np.unique(nodes)
        new = self._units(nodes)
        self.total += new.sum(axis=1) - self.units[:, nodes].sum(axis=1)
        self.units[:, nodes] = new

    def _fits(self, sid: int) -> bool:
        shape = self.shapes[sid]
        if self.total[sid] < shape.tasks:
            return False
        if shape.mode == "one":
            return bool(self.units[sid].max() >= shape.tasks)
        if shape.mode == "spread":
            return bool(np.count_nonzero(self.units[sid] >= 1) >= shape.tasks)
        return True

    # ------------------------------------------------------------ forward

    def run(self) -> dict[str, Eta]:
        etas: dict[str, Eta] = {}
        while self.waiting and self.ends and self.ends[0][0] <= self.horizon:
            t = self.ends[0][0]
            while self.ends and self.ends[0][0] <= t:
                self._end(heapq.heappop(self.ends)[2])
            self._place_all(t, etas)
        return {**etas, **{job: self._no_eta(job) for job in self.waiting}}

    def _end(self, end: _End) -> None:
        np.add.at(self.free, end.nodes, end.amounts)
        self.held[end.queue] = self.held.get(end.queue, 0.0) - end.gpus
        self.sources.add(end.source)
        self._changed(end.nodes)

    def _place_all(self, t: float, etas: dict[str, Eta]) -> None:
        while True:
            fitting = [sid for sid in range(len(self.shapes)) if self.shapes[sid].lines and self._fits(sid)]
            pick = self._next(fitting)
            if pick is None:
                return
            sid, queue = pick
            _, job = self.shapes[sid].lines[queue].popleft()
            if not self.shapes[sid].lines[queue]:
                del self.shapes[sid].lines[queue]
            del self.waiting[job]
            self._start(sid, job, queue, t)
            etas[job] = Eta(t, self._text(t))

    def _next(self, fitting: Sequence[int]) -> tuple[int, str] | None:
        """The queue whose turn it is (fewest GPUs held for its fair share), and its
        first workload that fits."""
        best: tuple[tuple[float, int], tuple[object, ...], int, str] | None = None
        for sid in fitting:
            shape = self.shapes[sid]
            for queue, line in shape.lines.items():
                limit = self.limit.get(queue)
                held = self.held.get(queue, 0.0)
                if limit is not None and held + shape.request[0] * shape.tasks > limit + 1e-9:
                    continue
                turn = (self.held.get(queue, 0.0) / self.weight.get(queue, 1.0), -self.priority.get(queue, 0))
                if best is None or (turn, line[0][0]) < (best[0], best[1]):
                    best = (turn, line[0][0], sid, queue)
        return None if best is None else (best[2], best[3])

    def _start(self, sid: int, job: str, queue: str, t: float) -> None:
        shape = self.shapes[sid]
        nodes = self._choose(sid)
        amounts = np.repeat(shape.request[None, :], len(nodes), axis=0)
        np.subtract.at(self.free, nodes, amounts)
        self._changed(nodes)
        gpus = float(shape.request[0] * len(nodes))
        self.held[queue] = self.held.get(queue, 0.0) + gpus
        estimate = self.runtimes.expected(self.infos.pop(job))
        at = math.inf if estimate.seconds is None else t + estimate.seconds
        if estimate.seconds is None:
            self.unknown[job] = None
        end = _End(at, job, nodes, amounts, queue, gpus, estimate.source)
        heapq.heappush(self.ends, (at, len(self.ends) + 1_000_000, end))

    def _choose(self, sid: int) -> np.ndarray:
        """The nodes its tasks go to: the fullest that fit first (binpack)."""
        shape, units = self.shapes[sid], self.units[sid]
        candidates = np.flatnonzero(units >= (shape.tasks if shape.mode == "one" else 1))
        order = candidates[np.argsort(self.free[candidates, 0], kind="stable")]
        if shape.mode == "one":
            return np.full(shape.tasks, order[0], dtype=int)
        if shape.mode == "spread":
            return order[: shape.tasks]
        taken = np.minimum(units[order], shape.tasks).astype(int)
        picks = np.repeat(order, taken)
        return picks[: shape.tasks]

    # ------------------------------------------------------------ words

    def _text(self, t: float) -> str:
        wait = t - self.now
        basis = ", ".join(sorted(self.sources - {"releasing"})) or "work being released"
        return f"expected to start in about {format_duration(wait)} (run times: {basis})"

    def _no_eta(self, job: str) -> Eta:
        if self.unknown:
            names = list(self.unknown)
            more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
            listed = ", ".join(names[:_LISTED]) + more
            return Eta(
                None,
                f"no start time can be forecast: the room it needs is held by work with no run time "
                f"known ({listed}); declare expected_runtime or max_runtime on them, or a default on "
                "their queue",
            )
        if not self.ends:
            return Eta(None, "no start time can be forecast: nothing that runs now would make room for it")
        return Eta(None, f"not expected to start within {format_duration(self.horizon - self.now)}")


def _capacity(node: NodeInfo) -> tuple[float, float, float]:
    outside = dict(node.used_outside)
    return (
        node.gpus - outside.get("gpu", 0.0),
        node.cpu - outside.get("cpu", 0.0),
        node.memory - outside.get("memory", 0.0),
    )


def _weight(queue: str, fair_share: Mapping[str, QueueStatus], quota_gpu: float) -> float:
    status = fair_share.get(queue)
    share = status.fair_share[0] if status is not None else quota_gpu
    return max(share, 1.0)


class Forecaster:
    """A forecast kept for readers and made again at most every `every_s` (off the
    scheduling path: a reader's call makes it when the last one is older)."""

    def __init__(self, make: Callable[[float], dict[str, Eta]], every_s: float = FORECAST_EVERY_S) -> None:
        self.make, self.every_s = make, every_s
        self.made_at = -math.inf
        self.etas: dict[str, Eta] = {}

    def get(self, now: float) -> dict[str, Eta]:
        if now - self.made_at >= self.every_s:
            self.etas, self.made_at = self.make(now), now
        return self.etas

    def eta(self, job: str, now: float) -> Eta | None:
        return self.get(now).get(job)
