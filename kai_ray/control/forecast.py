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
  STRICT_SPREAD, on one node for STRICT_PACK, on nodes its selector allows and, for
  GPU work naming GPU types, of a type it accepts (a gang is not held to one of them);
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
import itertools
import math
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

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
from kai_ray.core.cycle import paused_collection
from kai_ray.core.model.runtimes import expected_end
from kai_ray.core.model.words import listed

__all__ = ["FORECAST_EVERY_S", "HORIZON_S", "Eta", "Forecaster", "forecast"]

HORIZON_S = 30 * 86400.0  # no forecast beyond this
FORECAST_EVERY_S = 5.0  # a forecast is made again at most this often
_LISTED = 3  # holders named in a reason
RESOLUTION = 0.01  # ends this close (relative to how far ahead) are taken together
_BIG = 1e18  # tasks a node holds of a shape that needs none of a resource


@dataclass(frozen=True, slots=True)
class Eta:
    """A waiting workload's forecast start: `at` (the scheduler's clock) and, for
    people, `text`; `at` None: it cannot be said, and `text` says why. `why`: what the
    run times it rests on came from (or why there is no start), `made_at`: when the
    forecast was made."""

    at: float | None
    why: str
    made_at: float = 0.0

    @property
    def text(self) -> str:
        if self.at is None:
            return self.why
        return f"expected to start in about {format_duration(self.at - self.made_at)} (run times: {self.why})"

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
    """Each waiting workload of the snapshot (none of its gang placed) -> its Eta.

    Python's cyclic collector is paused meanwhile, as for a cycle (core.paused_collection):
    the forecast makes tens of thousands of small objects, and in a scheduler's process
    (Ray's actor, the operator, with every workload and pod alive) each full collection
    they trigger walks all of those; here that made the forecast 1.5x slower."""
    with paused_collection():
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
        self.gpu_types = [n.gpu_type if n.gpus else "" for n in nodes]  # "": no GPU, any work may go
        self.gpu_memory = nodes[0].gpu_memory if nodes else 0.0
        self.limit = {q.name: q.limit[0] for q in snap.queues if q.limit[0] != UNLIMITED}
        self.weight = {q.name: _weight(q.name, fair_share, q.quota[0]) for q in snap.queues}
        self.priority = {q.name: q.priority for q in snap.queues}
        self.held: dict[str, float] = {}
        # queue -> shape -> its waiting workloads of that shape, (rank, job) in order
        self.lines: dict[str, dict[int, deque[tuple[tuple[int, float], str]]]] = {}
        self.ends: list[tuple[float, int, _End]] = []
        self._order = itertools.count()  # ties in the heap: first pushed first
        self.unknown: dict[str, None] = {}  # running work with no run time known
        self.shapes: list[_Shape] = []
        self._shape_ids: dict[tuple[object, ...], int] = {}
        self.infos: dict[str, JobInfo] = {}  # the waiting ones, until placed
        self.sources: set[str] = set()  # what the ends so far were estimated from
        self.basis = "work being released"
        for job in snap.jobs:
            self._add(job)
        self._fit_arrays()

    # ------------------------------------------------------------ the snapshot

    def _add(self, job: JobInfo) -> None:
        pending = TaskStatus.PENDING
        if all(t.status is pending for t in job.tasks):  # most of a deep line: waiting whole
            if job.tasks:
                self._wait(job)
            return
        holding = [t for t in job.tasks if t.status.holds_capacity and t.node in self.node_index]
        for t in holding:
            self.free[self.node_index[t.node or ""]] -= self._vector(t.request)
        if holding:
            self._ending(job, holding)
        if not any(t.status.is_active for t in job.tasks) and any(t.status is pending for t in job.tasks):
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
        end = expected_end(started, job.ran, estimate.seconds, self.now)
        assert end is not None, "an estimate with seconds gives an end"
        self._push(job, running, end, estimate.source)

    def _push(self, job: JobInfo, tasks: Sequence[TaskInfo], at: float, source: str) -> None:
        nodes = np.array([self.node_index[t.node or ""] for t in tasks], dtype=int)
        amounts = np.array([self._vector(t.request) for t in tasks], dtype=float).reshape(len(tasks), 3)
        gpus = float(amounts[:, 0].sum()) if any(t.status.is_active for t in tasks) else 0.0
        self._hold(job.queue, gpus)
        end = _End(at, job.name, nodes, amounts, job.queue, gpus, source)
        heapq.heappush(self.ends, (at, next(self._order), end))

    def _wait(self, job: JobInfo) -> None:
        first = next(t for t in job.tasks if t.status is TaskStatus.PENDING)
        request = self._vector(first.request)
        tasks = max(1, min(job.gang_size, len(job.tasks)))
        mode = "one" if job.topology is not None else ("spread" if job.spread == "required" else "pack")
        selector = tuple(sorted(job.node_selector.items())) if job.node_selector else ()
        types = job.gpu_types if request[0] > 0 else ()  # work that asks no GPU goes anywhere
        key = (request, tasks, mode, selector, types)
        sid = self._shape_ids.get(key)
        if sid is None:
            sid = self._shape_ids[key] = len(self.shapes)
            eligible = np.array(
                [
                    all(lab.get(k) == v for k, v in selector) and (not types or not t or t in types)
                    for lab, t in zip(self.labels, self.gpu_types, strict=True)
                ],
                dtype=bool,
            )
            self.shapes.append(_Shape(np.array(request), tasks, mode, eligible))
        rank = (-job.priority, job.created_at)
        self.lines.setdefault(job.queue, {}).setdefault(sid, deque()).append((rank, job.name))
        self._hold(job.queue, 0.0)
        self.infos[job.name] = job

    def _vector(self, request: Request) -> tuple[float, float, float]:
        gpu = request.gpu or (request.gpu_fraction(self.gpu_memory) if request.gpu_memory else 0.0)
        return (gpu, request.cpu, request.memory)

    # ------------------------------------------------------------ what fits

    def _hold(self, queue: str, gpus: float) -> None:
        self.held[queue] = self.held.get(queue, 0.0) + gpus
        i = self.qindex.get(queue) if hasattr(self, "order") else None
        if i is not None:
            self.order[i] = self._order_key(queue)

    def _order_key(self, queue: str) -> float:
        """Queues take turns by GPUs held for their fair share; a higher priority first
        between queues that hold alike."""
        return self.held.get(queue, 0.0) / self.weight.get(queue, 1.0) - self.priority.get(queue, 0) * 1e-12

    def _fit_arrays(self) -> None:
        for by_shape in self.lines.values():  # each queue's line in its order
            for sid, line in by_shape.items():
                by_shape[sid] = deque(sorted(line))
        self.request = np.array([s.request for s in self.shapes], dtype=float).reshape(len(self.shapes), 3)
        needed = self.request > 0
        # Tasks a node holds = the least over resources of floor(free / need); a resource
        # a shape does not need counts as unlimited (BIG), without a division by zero.
        self.inverse = np.where(needed, 1.0 / np.where(needed, self.request, 1.0), 0.0)
        self.unneeded = np.where(needed, 0.0, _BIG)
        self.tasks = np.array([s.tasks for s in self.shapes], dtype=float)
        self.strict = [sid for sid, s in enumerate(self.shapes) if s.mode != "pack"]
        self.eligible = np.array([s.eligible for s in self.shapes], dtype=bool).reshape(
            len(self.shapes), len(self.node_index)
        )
        self.units = self._units(np.arange(len(self.node_index)))
        self.total = self.units.sum(axis=1)
        # Per queue: its place in the arrays, and how many of each shape wait in it.
        self.queue_names = list(self.lines)
        self.qindex = {q: i for i, q in enumerate(self.queue_names)}
        self.count = np.zeros((len(self.queue_names), len(self.shapes)), dtype=int)
        for queue, by_shape in self.lines.items():
            for sid, line in by_shape.items():
                self.count[self.qindex[queue], sid] = len(line)
        self.order = np.array([self._order_key(q) for q in self.queue_names], dtype=float)

    def _units(self, nodes: np.ndarray) -> np.ndarray:
        """How many tasks of each shape each of `nodes` could hold now (capped at the
        shape's task count)."""
        free = np.maximum(self.free[nodes], 0.0)[None, :, :]  # 1 x k x 3
        each = np.floor(free * self.inverse[:, None, :] + 1e-9) + self.unneeded[:, None, :]
        units: np.ndarray = np.minimum(each.min(axis=2), self.tasks[:, None]) * self.eligible[:, nodes]
        return units

    def _changed(self, nodes: np.ndarray) -> None:
        """Each shape's room on `nodes` (distinct) again, after their free room changed."""
        new = self._units(nodes)
        self.total += new.sum(axis=1) - self.units[:, nodes].sum(axis=1)
        self.units[:, nodes] = new

    def _fitting(self) -> np.ndarray:
        """Which shapes fit somewhere now."""
        fits: np.ndarray = self.total >= self.tasks
        for sid in self.strict:
            if fits[sid]:
                shape, units = self.shapes[sid], self.units[sid]
                if shape.mode == "one":
                    fits[sid] = units.max() >= shape.tasks
                else:
                    fits[sid] = np.count_nonzero(units >= 1) >= shape.tasks
        return fits

    # ------------------------------------------------------------ forward

    def run(self) -> dict[str, Eta]:
        etas: dict[str, Eta] = {}
        while self.infos and self.ends and self.ends[0][0] <= self.horizon:
            first = self.ends[0][0]
            # Ends close together are taken as one: within 1% of how far ahead they are
            # (a forecast 10 h out is one to about 6 min), which bounds the passes.
            until, t, freed = first + max(1.0, RESOLUTION * (first - self.now)), first, []
            while self.ends and self.ends[0][0] <= until:
                t = self.ends[0][0]
                freed.append(self._end(heapq.heappop(self.ends)[2]))
            self._changed(np.unique(np.concatenate(freed)))
            self._place_all(t, etas)
        return {**etas, **{job: self._no_eta(job) for job in self.infos}}

    def _end(self, end: _End) -> np.ndarray:
        """Its room back; the nodes whose room changed."""
        np.add.at(self.free, end.nodes, end.amounts)
        self._hold(end.queue, -end.gpus)
        if end.source not in self.sources:
            self.sources.add(end.source)
            self.basis = ", ".join(sorted(self.sources - {"releasing"})) or "work being released"
        return end.nodes

    def _place_all(self, t: float, etas: dict[str, Eta]) -> None:
        while True:
            fits = self._fitting()
            if not fits.any():
                return
            pick = self._next(fits)
            if pick is None:
                return
            sid, queue = pick
            by_shape = self.lines[queue]
            _, job = by_shape[sid].popleft()
            self.count[self.qindex[queue], sid] -= 1
            if not by_shape[sid]:
                del by_shape[sid]
                if not by_shape:
                    del self.lines[queue]
            self._start(sid, job, queue, t)
            etas[job] = Eta(t, self.basis, self.now)

    def _next(self, fits: np.ndarray) -> tuple[int, str] | None:
        """The queue whose turn it is (fewest GPUs held for its fair share) with a
        workload that fits, and its first such workload."""
        able = np.asarray((self.count[:, fits] > 0).any(axis=1))
        while able.any():
            i = int(np.flatnonzero(able)[np.argmin(self.order[able])])
            queue = self.queue_names[i]
            limit = self.limit.get(queue)
            room = math.inf if limit is None else limit - self.held.get(queue, 0.0) + 1e-9
            heads = [
                (line[0][0], sid)
                for sid, line in self.lines[queue].items()
                if fits[sid] and self.shapes[sid].request[0] * self.shapes[sid].tasks <= room
            ]
            if heads:
                return min(heads)[1], queue
            able[i] = False  # at its limit for all that fits
        return None

    def _start(self, sid: int, job: str, queue: str, t: float) -> None:
        shape = self.shapes[sid]
        nodes, distinct = self._choose(sid)
        amounts = np.repeat(shape.request[None, :], len(nodes), axis=0)
        np.subtract.at(self.free, nodes, amounts)
        self._changed(distinct)
        gpus = float(shape.request[0] * len(nodes))
        self._hold(queue, gpus)
        estimate = self.runtimes.expected(self.infos.pop(job))
        at = math.inf if estimate.seconds is None else t + estimate.seconds
        if estimate.seconds is None:
            self.unknown[job] = None
        end = _End(at, job, nodes, amounts, queue, gpus, estimate.source)
        heapq.heappush(self.ends, (at, next(self._order), end))

    def _choose(self, sid: int) -> tuple[np.ndarray, np.ndarray]:
        """The node of each of its tasks, the fullest that fit first (binpack), and
        those nodes once each."""
        shape, units = self.shapes[sid], self.units[sid]
        candidates = (units >= (shape.tasks if shape.mode == "one" else 1)).nonzero()[0]
        order = candidates[self.free[candidates, 0].argsort(kind="stable")]
        if shape.mode == "one":
            return np.full(shape.tasks, order[0], dtype=int), order[:1]
        if shape.mode == "spread":
            return order[: shape.tasks], order[: shape.tasks]
        taken = np.minimum(units[order], shape.tasks).astype(int)
        used = int(np.searchsorted(taken.cumsum(), shape.tasks)) + 1
        return np.repeat(order[:used], taken[:used])[: shape.tasks], order[:used]

    # ------------------------------------------------------------ words

    def _no_eta(self, job: str) -> Eta:
        if self.unknown:
            holders = listed(list(self.unknown), _LISTED)
            return Eta(
                None,
                f"no start time can be forecast: the room it needs is held by work with no run time "
                f"known ({holders}); declare expected_runtime or max_runtime on them, or a default on "
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

    def get(self, now: float, wanted: Collection[str] = ()) -> dict[str, Eta]:
        """The forecast; made again when older than its period, or (at most once a
        second) when one of `wanted` is not in it: a workload that just began to wait
        is told its start with its first reason."""
        age = now - self.made_at
        if age >= self.every_s or (age >= 1.0 and any(job not in self.etas for job in wanted)):
            self.etas, self.made_at = self.make(now), now
        return self.etas

    def eta(self, job: str, now: float) -> Eta | None:
        return self.get(now).get(job)
