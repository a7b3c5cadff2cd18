"""Where tasks go: node filters and scores (vectorised over nodes), GPU device choice,
and topology domains (topologyrule.py). Placement changes state only through the Statement it is given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar, cast

import numpy as np

from kai_ray.core.model.gpushare import device_shares
from kai_ray.core.model.snapshot import NodeAffinity, SchedulerConfig, TaskStatus
from kai_ray.core.rules.nodeindex import GpuBuckets
from kai_ray.core.rules.nodesets import (
    Domains,
    affinity_mask,
    domain_ids,
    selector_mask,
)
from kai_ray.core.rules.roomfacts import RoomFacts
from kai_ray.core.rules.topologyrule import TopologyRule
from kai_ray.core.rules.typechoices import Selector, TypeChoices
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import EPS, BoolArray, FloatArray
from kai_ray.core.state.statement import Statement

__all__ = ["Placer", "Spot"]

T = TypeVar("T")
Spot = tuple[int, int, bool]  # node, device (-1 unless fractional), pipelined
_NONE_FITS, _UNSURE, _MAX_SCAN = -1, -2, 64


def fraction_room(
    shared: FloatArray | float, whole: FloatArray | float, need: FloatArray | float
) -> BoolArray | bool:
    """Whether a share `need` of one device has room on a node (arrays: on each node;
    numbers: on one): on a shared device whose best room is `shared` (its releasing part
    included: a fraction waits for the shared device rather than opening a fresh one, as
    KAI), or on a fresh device, if a whole one is free (`whole` idle devices) and the
    share is no more than a device (a memory slice larger than a device's usable memory
    fits none: gpushare.py). One rule for Placer.fits and Placer.fits_at."""
    return (shared >= need - EPS) | ((whole >= 1 - EPS) & (need <= 1 + EPS))


class Placer(TopologyRule, TypeChoices):
    def __init__(self, state: ClusterState, config: SchedulerConfig) -> None:
        self.state = state
        self.config = config
        # Base masks: per selector for the usual job (no affinity), per selector and
        # affinity for a job whose tasks share one; `()` keys every schedulable node.
        self._selector_masks: dict[Selector, BoolArray] = {}
        self._base_masks: dict[tuple[Selector, NodeAffinity | None, tuple[str, ...]], BoolArray] = {}
        self._affinity_masks: dict[NodeAffinity, BoolArray] = {}  # per affinity (by value)
        self._domains: dict[str, Domains] = {}
        self._buckets: GpuBuckets | None = None
        # Per demand vector (shared by tasks of one request): its non-GPU columns.
        self._other_needs: dict[int, list[tuple[int, float]]] = {}
        self._demand_columns: dict[int, list[tuple[int, float]]] = {}
        # Answers that depend on the nodes as built alone (capacity, labels), never on
        # what runs there: kept as long as the Placer, which a cycle cache keeps while
        # the nodes are the same (reasons.py keeps whether a gang could ever fit here).
        self._node_facts: dict[tuple[object, ...], object] = {}
        # While the solver plays allocate over a scenario (solver.py): each node's idle
        # room as the play began. KAI places every task of the scenario pipelined, taking
        # it from the node's releasing room alone, so to its node scores (which prefer a
        # node the task fits in idle room) a node keeps the idle room it had.
        self.all_room: FloatArray | None = None
        self._room_facts: RoomFacts | None = None
        self._init_types()

    @property
    def buckets(self) -> GpuBuckets:
        if self._buckets is None:
            self._buckets = GpuBuckets(self.state.nodes)
            self.state.nodes.watchers.append(self._buckets.update)
        return self._buckets

    @property
    def room_facts(self) -> RoomFacts:
        """Answers that read the free room of some nodes, kept while those stand (roomfacts.py)."""
        if self._room_facts is None:
            self._room_facts = RoomFacts(self.state.nodes, self.gpu_types)
        return self._room_facts

    # ------------------------------------------------------------ filters

    def base_mask(self, job: Job) -> BoolArray:
        """Schedulable nodes that match the job's node selector, the affinity all its
        tasks share and the GPU types it accepts (cached per all three)."""
        return self._base_mask(job.selector, job.affinity, job.info.gpu_types)

    def _base_mask(
        self, selector: tuple[tuple[str, str], ...], affinity: NodeAffinity | None, types: tuple[str, ...]
    ) -> BoolArray:
        mask = self._selector_masks.get(selector)
        if mask is None:
            mask = self._selector_masks[selector] = selector_mask(self.state.nodes, selector)
        if affinity is None and not types:
            return mask
        key = (selector, affinity, types)
        narrowed = self._base_masks.get(key)
        if narrowed is None:
            narrowed = mask if affinity is None else mask & self.affinity_mask(affinity)
            if types:
                narrowed = narrowed & self.gpu_types.accepting(types)
            self._base_masks[key] = narrowed
        return narrowed

    def affinity_mask(self, affinity: NodeAffinity) -> BoolArray:
        """Schedulable nodes the affinity admits (cached per distinct affinity)."""
        mask = self._affinity_masks.get(affinity)
        if mask is None:
            mask = self._affinity_masks[affinity] = affinity_mask(self.state.nodes, affinity)
        return mask

    def task_mask(self, task: Task, mask: BoolArray) -> BoolArray:
        """`mask` narrowed to the nodes the task's own affinity admits, for a job whose
        tasks differ (a head without one, GPU workers with one); else `mask` itself, so
        the usual job pays nothing and keeps the fast paths keyed on the mask's identity."""
        if not task.job.per_task:
            return mask
        own = task.info.node_affinity
        return mask if own is None else mask & self.affinity_mask(own)

    def job_mask(self, job: Job) -> BoolArray:
        """Like base_mask, but a job with a required topology level stays in the domain
        where its active tasks already run (elastic growth keeps the gang together), or in
        some domain of that level when none runs, and
        a job that requires spreading keeps off the nodes its tasks already hold."""
        mask = self.base_mask(job)
        by_type = self.type_mask(job)
        if by_type is not None:
            mask = mask & by_type
        constraint = job.info.topology
        if constraint is not None and self.refused_topology(constraint) is not None:
            return np.zeros_like(mask)  # KAI's topology plugin refuses it: no node, ever
        if constraint is not None and constraint.required:
            mask = self._in_held_domain(job, constraint, mask)
        if job.info.spread == "required":
            held = list(self.own_counts(job))
            if held:
                mask = mask.copy()
                mask[held] = False
        return mask

    def node_fact(self, key: tuple[object, ...], work_out: Callable[[], T]) -> T:
        """An answer that depends on the nodes alone (not on what runs there), worked out
        once per `key` (which must hold every other input) and kept with the Placer."""
        if key not in self._node_facts:
            self._node_facts[key] = work_out()
        return cast(T, self._node_facts[key])

    def domains(self, level: str) -> Domains:
        """Per node, the id of its domain at a topology level (cached per level)."""
        cached = self._domains.get(level)
        if cached is None:
            cached = self._domains[level] = domain_ids(self.state.nodes, level)
        return cached

    def fits(self, task: Task, mask: BoolArray, future: bool) -> BoolArray:
        """Nodes in `mask` with room for the task now (or once releasing capacity is free)."""
        nodes = self.state.nodes
        idle, releasing = nodes.idle, nodes.releasing
        ok = mask.copy()
        for col in np.flatnonzero(task.demand):  # column by column: the rest is not read
            room = idle[:, col] + releasing[:, col] if future else idle[:, col]
            ok &= room >= task.demand[col] - EPS
        if task.fraction_request:
            ok &= self._fraction_room(task, future)
        return ok

    def _fraction_room(self, task: Task, future: bool) -> BoolArray:
        nodes = self.state.nodes
        whole = nodes.idle[:, 0] + (nodes.releasing[:, 0] if future else 0.0)
        return np.asarray(
            fraction_room(nodes.frac_future, whole, np.asarray(self._fractions(task))), dtype=bool
        )

    def _fractions(self, task: Task) -> FloatArray | float:
        """The task's share of one device, per node (gpushare.py)."""
        return device_shares(task.request, self.state.nodes.device_memory)

    # ------------------------------------------------------------ scores

    def best_node(self, task: Task, candidates: BoolArray) -> int:
        nodes = self.state.nodes
        gpu_task = task.fraction_request or task.demand[0] > 0
        spread = (self.config.gpu_placement if gpu_task else self.config.cpu_placement) == "spread"
        # As KAI scores nodes: by what is not allocated, room being released included (a
        # node whose work is leaving counts as emptier).
        col = 0 if gpu_task else 1
        free = nodes.idle[:, col] + nodes.releasing[:, col]
        score = -free if spread else free
        if task.fraction_request:
            # Prefer nodes already sharing a device the task fits on.
            shared_fit = nodes.frac_future >= self._fractions(task) - EPS
            score = score + np.where(shared_fit, 0.0, 1e12)
        return int(np.argmin(np.where(candidates, score, np.inf)))

    def choose(self, task: Task, mask: BoolArray, allow_pipeline: bool) -> Spot | None:
        if self.all_room is not None and allow_pipeline:
            return self._best_of_all_room(task, mask, self.all_room)
        buckets = self._indexed(mask) if not task.fraction_request and task.demand[0] >= 1 else None
        if buckets is not None:
            node = self._first_in_buckets(task, buckets)
            if node >= 0:
                return node, -1, False
            if node == _NONE_FITS:
                return self._pipelined(task, mask) if allow_pipeline else None
        now = self.fits(task, mask, future=False)
        if now.any():
            node = self.best_node(task, now)
            return self._on_node(task, node, cpu_now=True)
        if not allow_pipeline:
            return None
        return self._pipelined(task, mask)

    def _first_in_buckets(self, task: Task, buckets: GpuBuckets) -> int:
        """The best node for a whole-GPU task from the GPU index: a node, or _NONE_FITS,
        or _UNSURE when too many candidates failed on other resources (then scan)."""
        idle = self.state.nodes.idle
        demand = task.demand
        others = self._other_needs.get(id(demand))
        if others is None:
            others = [(int(c), float(demand[c]) - EPS) for c in np.flatnonzero(demand) if c > 0]
            self._other_needs[id(demand)] = others
        spread = self.config.gpu_placement == "spread"
        first = buckets.first(float(demand[0]), spread)
        if first < 0:
            return _NONE_FITS
        for c, need in others:
            if idle[first, c] < need:
                break
        else:
            return first  # the usual case: the best node by GPUs fits the rest too
        tried = 0
        walk = buckets.candidates(float(demand[0]), spread)
        try:
            for node in walk:
                for c, need in others:
                    if idle[node, c] < need:
                        break
                else:
                    return node
                tried += 1
                if tried >= _MAX_SCAN:
                    return _UNSURE
        finally:
            walk.close()  # puts the passed entries back into their heaps
        return _NONE_FITS

    def _best_of_all_room(self, task: Task, mask: BoolArray, idle_before: FloatArray) -> Spot | None:
        """As KAI's pipeline-only allocation: of the nodes the task fits once releasing
        work is gone, the best of those it fits in the idle room they had as the play
        began, else the best of all."""
        later = self.fits(task, mask, future=True)
        if not later.any():
            return None
        soon = later.copy()
        for col in np.flatnonzero(task.demand):
            soon &= idle_before[:, col] >= task.demand[col] - EPS
        node = self.best_node(task, soon if soon.any() else later)
        return self._on_node(task, node, cpu_now=self.fits_at(task, node))

    def fits_at(self, task: Task, node: int) -> bool:
        """`fits` for one node, now: its row alone read."""
        nodes = self.state.nodes
        idle, demand = nodes.idle, task.demand
        for col, need in self._needs(demand):
            if idle.item(node, col) < need - EPS:
                return False
        if not task.fraction_request:
            return True
        return bool(
            fraction_room(nodes.frac_future.item(node), idle.item(node, 0), task.fraction_on(nodes, node))
        )

    def _pipelined(self, task: Task, mask: BoolArray) -> Spot | None:
        later = self.fits(task, mask, future=True)
        if not later.any():
            return None
        return self._on_node(task, self.best_node(task, later), cpu_now=False)

    def _on_node(self, task: Task, node: int, cpu_now: bool) -> Spot:
        if not task.fraction_request:
            return node, -1, not cpu_now
        device, device_now = self.choose_device(task, node)
        return node, device, not (cpu_now and device_now)

    def choose_device(self, task: Task, node: int) -> tuple[int, bool]:
        """The device for a fraction, and whether it has room now (else: pipelined)."""
        nodes = self.state.nodes
        f = task.fraction_on(nodes, node)
        shared = sorted(nodes.devices[node].items())
        now = [(d.idle, i) for i, d in shared if d.idle >= f - EPS]
        later = [(d.idle + d.releasing, i) for i, d in shared if d.idle + d.releasing >= f - EPS]
        fresh = nodes.idle[node, 0] >= 1 - EPS
        if self.config.gpu_device_order == "spread":
            if fresh:
                return nodes.new_device_index(node), True
            if now:
                return max(now, key=lambda x: (x[0], -x[1]))[1], True
        elif now:
            return min(now)[1], True
        if later:
            return min(later)[1], False
        if not fresh:  # opened on a GPU being released: a released device's, by its name
            # (not the one a victim left: KAI gives it a new group, so it moved).
            for i, d in shared:
                if d.released and task.evicted_from != (node, i):
                    return i, False
        return nodes.new_device_index(node), fresh

    # ------------------------------------------------------------ gangs

    def place_all(
        self,
        stmt: Statement,
        tasks: Sequence[Task],
        mask: BoolArray,
        action: str,
        allow_pipeline: bool = True,
    ) -> bool:
        """Place every task or none (the caller's checkpoint is rolled back on failure)."""
        checkpoint = stmt.checkpoint()
        spreading = bool(tasks) and bool(tasks[0].job.info.spread)
        buckets = self._indexed(mask)
        if not spreading and self.all_room is None and buckets is not None and self._can_fill_blocks(tasks):
            if self._short_of_room(tasks, buckets, allow_pipeline):
                return False
            tasks = self._fill_blocks(stmt, tasks, action, buckets)
        # A spreading gang counts its tasks per node as it goes, rather than per task.
        counts = self.own_counts(tasks[0].job) if spreading else None
        for task in tasks:
            spot = self.spot(task, mask, allow_pipeline, counts)
            if spot is None:
                stmt.rollback(checkpoint)
                return False
            stmt.place(task, spot[0], spot[1], spot[2], action)
            if counts is not None:
                counts[spot[0]] = counts.get(spot[0], 0) + 1
        return True

    def spot(
        self, task: Task, mask: BoolArray, allow_pipeline: bool, counts: dict[int, int] | None = None
    ) -> Spot | None:
        """Where one task goes: the usual choice, or the spreading rule for a job that
        spreads. Every action places through here, so they all spread alike, and all
        keep a task to the nodes its own affinity admits. `counts`: the job's tasks per
        node, when the caller keeps them (else counted now)."""
        if task.job.per_task:
            mask = self.task_mask(task, mask)
        if not task.job.info.spread:
            return self.choose(task, mask, allow_pipeline)
        return self._spread_spot(
            task, mask, allow_pipeline, self.own_counts(task.job) if counts is None else counts
        )

    def own_counts(self, job: Job) -> dict[int, int]:
        """The nodes holding the job's active tasks (those just placed too), and how many.
        A dict, not an array over all nodes: a job holds few nodes, and the spreading rule
        below then costs per task about one pass over the nodes, as a plain choice does."""
        counts: dict[int, int] = {}
        for t in job.tasks:
            if t.node >= 0 and t.status.is_active:
                counts[t.node] = counts.get(t.node, 0) + 1
        return counts

    def _spread_spot(
        self, task: Task, mask: BoolArray, allow_pipeline: bool, counts: dict[int, int]
    ) -> Spot | None:
        """Spreading is as even as the room allows: among the nodes with room now (else,
        when allowed, once released), those holding the fewest of the job's tasks, the
        best of them by the usual score. "required" only takes nodes holding none.

        Room now comes first, as everywhere: an even spread is not worth waiting for."""
        held = list(counts)
        tries = (False, True) if allow_pipeline else (False,)
        for future in (True,) if self.all_room is not None and allow_pipeline else tries:
            room = self.fits(task, mask, future)  # a fresh array: ours to narrow
            fewest = _fewest(room, counts, held, task.job.info.spread == "required")
            if fewest is not None:
                return self._on_node(task, self.best_node(task, fewest), cpu_now=not future)
        return None

    def _needs(self, demand: FloatArray) -> list[tuple[int, float]]:
        """The demand's non-zero columns as plain numbers (cached per shared demand)."""
        needs = self._demand_columns.get(id(demand))
        if needs is None:
            needs = [(int(c), float(demand[c])) for c in np.flatnonzero(demand)]
            self._demand_columns[id(demand)] = needs
        return needs

    def _can_fill_blocks(self, tasks: Sequence[Task]) -> bool:
        """Under binpack a node that took a task only scores better, so the greedy
        task-by-task choice fills the best node before moving on: place in blocks. A
        single task is a block of one under either scoring (the GPU index's best node)."""
        first = tasks[0]
        return (
            (len(tasks) == 1 or self.config.gpu_placement == "binpack")
            and first.status is TaskStatus.PENDING
            and not first.job.per_task
            and not first.fraction_request
            and first.demand[0] >= 1
            and (first.job.uniform or all(t.demand is first.demand for t in tasks))
        )

    def _short_of_room(self, tasks: Sequence[Task], buckets: GpuBuckets, allow_pipeline: bool) -> bool:
        """The gang asks for more whole GPUs than the index's nodes have idle, and none of
        them is releasing any it could wait for: it fails whatever the order, so no task
        is placed to be taken back (a GPU type run dry, gang after gang)."""
        gpus = float(tasks[0].demand[0])
        if gpus != int(gpus) or buckets.whole >= len(tasks) * gpus:
            return False
        return not allow_pipeline or buckets.releasing_nodes == 0

    def _fill_blocks(
        self, stmt: Statement, tasks: Sequence[Task], action: str, buckets: GpuBuckets
    ) -> list[Task]:
        """Bind blocks while nodes have room now; return the tasks still to place."""
        rest = list(tasks)
        idle = self.state.nodes.idle
        need = self._needs(rest[0].demand)
        while rest:
            node = self._first_in_buckets(rest[0], buckets)
            if node < 0:
                break
            if len(rest) == 1:  # the node fits one: that is what the index answers
                block, rest = rest, []
            else:
                row = idle[node].tolist()
                room = max(1, int(min((row[c] + EPS) // d for c, d in need)))
                block, rest = rest[:room], rest[room:]
            stmt.place_block(block, node, action)
        return rest

    def place_gang(
        self, stmt: Statement, job: Job, tasks: Sequence[Task], action: str, allow_pipeline: bool = True
    ) -> bool:
        constraint = job.info.topology
        for mask in self.type_choices(job, self.base_mask(job), tasks):
            if constraint is None:
                if self.place_all(stmt, tasks, mask, action, allow_pipeline):
                    return True
                continue
            for domain_mask in self.topology_masks(job, tasks, mask):
                if self.place_all(stmt, tasks, domain_mask, action, allow_pipeline):
                    return True
        return False


def _fewest(room: BoolArray, counts: dict[int, int], held: list[int], required: bool) -> BoolArray | None:
    """The nodes of `room` holding the fewest of the job's tasks (`counts`, over the nodes
    `held`); with `required`, only nodes holding none. None when there is none."""
    in_room = [n for n in held if room[n]]
    if in_room and (required or len(in_room) < np.count_nonzero(room)):
        room[in_room] = False  # some node with room holds none of its tasks: those
    elif in_room:  # every node with room holds some: those holding the fewest
        least = min(counts[n] for n in in_room)
        room[[n for n in in_room if counts[n] > least]] = False
    return room if room.any() else None
