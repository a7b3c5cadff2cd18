"""GPU types (H100, A100, ...): which nodes have which, as masks over the nodes.

The rule (docs/gpu-types.md): a job places its GPU tasks only on nodes of a type it
accepts (JobInfo.gpu_types; none listed: any), and its gang runs on one type unless it
says it may span them (JobInfo.mixed_gpu_types). A node without GPUs has no type that
matters: every mask here admits it, so a gang's CPU-only head goes where it went before.
A cluster whose GPU nodes are all of one type is not narrowed at all (`several` False):
it decides exactly as one without types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from kai_ray.core.state.jobs import Job, Task, Unit
from kai_ray.core.state.nodes import BoolArray, Nodes

__all__ = ["GpuTypes", "gpus_of", "usable_victim"]


def gpus_of(tasks: Sequence[Task]) -> float:
    """The GPUs these tasks count against their queue: whole devices, or a share of one
    (a slice of device memory counted as a whole device: its device is not known yet)."""
    first = tasks[0] if tasks else None
    if first is not None and first.job.uniform and first.amount is not None:
        return first.amount.item(0) * len(tasks)  # alike: n times the first one's
    return sum(
        float(t.amount[0]) if t.amount is not None else 1.0
        for t in tasks
        if t.demand[0] > 0 or t.fraction_request
    )


def usable_victim(type_mask: BoolArray | None) -> Callable[[Unit], bool]:
    """Whether evicting a unit frees room the job may use, by GPU type alone (`type_mask`:
    Placer.type_mask, None when types do not narrow the job): some task of the unit is
    on a node of a type the job may take. Reclaim, preemption and consolidation never
    stop work on GPUs the waiting job could not run on."""
    if type_mask is None:
        return _any
    return lambda u: any(t.node >= 0 and type_mask[t.node] for t in u.tasks)


def _any(u: Unit) -> bool:
    return True


class GpuTypes:
    """Per node, its GPU type as an id (node order of first appearance), and the masks
    built from it, each worked out once: the nodes are fixed for as long as the Placer
    that keeps this."""

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        index: dict[str, int] = {}
        self.ids = np.array([index.setdefault(n.gpu_type, len(index)) for n in nodes.infos], dtype=np.intp)
        self.names = list(index)
        self.index = index
        self.no_gpu: BoolArray = nodes.gpus == 0
        on_gpu_nodes = set(self.ids[~self.no_gpu].tolist())
        self.several = len(on_gpu_nodes) > 1
        self._of: dict[int, BoolArray] = {}
        self._accepting: dict[tuple[str, ...], BoolArray] = {}
        self._room: _TypeRoom | None = None
        self._id_of_node: list[int] | None = None
        self._whole: dict[int, tuple[BoolArray, bool]] = {}
        self._named: dict[tuple[str, ...], tuple[int, ...]] = {}  # types accepted -> ids

    @property
    def id_of_node(self) -> list[int]:
        """Per node, its type's id as a plain list (read a node at a time by watchers)."""
        if self._id_of_node is None:
            self._id_of_node = self.ids.tolist()
        return self._id_of_node

    @property
    def room(self) -> _TypeRoom:
        """Free GPUs per type over every schedulable node, kept in step with the nodes."""
        if self._room is None:
            self._room = _TypeRoom(self)
            self.nodes.watchers.append(self._room.update)
        return self._room

    def of(self, type_id: int) -> BoolArray:
        """Nodes of this type, and nodes without GPUs."""
        mask = self._of.get(type_id)
        if mask is None:
            mask = self._of[type_id] = (self.ids == type_id) | self.no_gpu
        return mask

    def accepting(self, types: Sequence[str]) -> BoolArray:
        """Nodes of any of these types, and nodes without GPUs."""
        mask = self._accepting.get(tuple(types))
        if mask is None:
            known = [self.index[t] for t in types if t in self.index]
            mask = self._accepting[tuple(types)] = np.isin(self.ids, known) | self.no_gpu
        return mask

    def name_of(self, node: int) -> str:
        return self.names[int(self.ids[node])]

    def asks_gpu(self, job: Job) -> bool:
        if job.uniform:  # its tasks ask alike: the first says (asked for every gang tried)
            first = job.tasks[0]
            return first.fraction_request or first.demand.item(0) > 0
        return any(t.demand[0] > 0 or t.fraction_request for t in job.tasks)

    def first_present(self, names: Sequence[str]) -> int | None:
        """The first of these types the cluster has (a job's first type: queues.first_type_only)."""
        index = self.index
        for name in names:
            if name in index:
                return index[name]
        return None

    def held_by(self, job: Job) -> int | None:
        """The type of the GPUs its active tasks hold (the first found), if any: one it
        accepts (a task that runs on another, placed before the job named its types, binds
        nothing). A task that asks for no GPU holds no type, wherever it runs."""
        if not job.active_count:
            return None
        accepted = job.info.gpu_types
        for t in job.tasks:
            asks = t.demand[0] > 0 or t.fraction_request
            if asks and t.node >= 0 and t.status.is_active and not self.no_gpu[t.node]:
                held = int(self.ids[t.node])
                if not accepted or self.names[held] in accepted:
                    return held
        return None

    def candidates(self, job: Job, mask: BoolArray) -> list[int]:
        """The types a gang that stays on one type may take, in the order it tries them:
        the type it holds, else order_for. One list for placing it, for saying why it
        waits, and for judging a reclaim on types."""
        held = self.held_by(job)
        return [held] if held is not None else self.order_for(job, mask)

    def order_for(self, job: Job, mask: BoolArray) -> list[int]:
        """The types a gang tries, first to last: those it accepts in its order, or every
        type, the one with the fewest free GPUs (now or being released) first."""
        accepted = job.info.gpu_types
        if accepted:
            named = self._named.get(accepted)
            if named is None:
                named = self._named[accepted] = tuple(self.index[t] for t in accepted if t in self.index)
            return list(named)
        if mask is self._everywhere(mask):  # the usual job: the totals kept in step
            return self._by_future_room(self.room)
        nodes = self.nodes
        usable = mask & ~self.no_gpu
        free = np.bincount(
            self.ids[usable],
            weights=nodes.idle[usable, 0] + nodes.releasing[usable, 0],
            minlength=len(self.names),
        )
        present = set(self.ids[usable].tolist())
        return sorted(present, key=lambda t: (float(free[t]), self.names[t]))

    def _by_future_room(self, room: _TypeRoom) -> list[int]:
        """The types present, the fewest free GPUs (now or being released) first."""
        keys = []
        for t in room.present:
            free = room.future[t]
            # Rounded: totals kept in step by differences must order as totals summed anew.
            # round() is slow, and a whole number is its own rounding (the usual total).
            keys.append((free if free.is_integer() else round(free, 6), self.names[t], t))
        keys.sort()
        return [t for _, _, t in keys]

    def _everywhere(self, mask: BoolArray) -> BoolArray | None:
        """`mask` itself when it admits every schedulable node (checked once per array)."""
        known = self._whole.get(id(mask))
        if known is None or known[0] is not mask:
            known = self._whole[id(mask)] = (mask, bool((mask == self.nodes.schedulable).all()))
        return mask if known[1] else None

    def free_by_type(self) -> dict[str, float]:
        """Free GPUs per type over every schedulable node, for reasons."""
        room = self.room
        return {self.names[t]: room.now[t] for t in sorted(room.present)}

    def describe(self, types: Iterable[str]) -> str:
        names = list(types)
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


class _TypeRoom:
    """Free GPUs per type, now and once releasing work is gone, over the schedulable GPU
    nodes: worked out once, then node by node as the Statement changes them (a node
    watcher), so that choosing a type for a gang costs no pass over the nodes."""

    def __init__(self, types: GpuTypes) -> None:
        nodes = types.nodes
        self.types, self.nodes = types, nodes
        self.counted: list[bool] = (nodes.schedulable & ~types.no_gpu).tolist()
        self.type_of = types.id_of_node
        self.idle: list[float] = nodes.idle[:, 0].tolist()
        self.releasing: list[float] = nodes.releasing[:, 0].tolist()
        counted = nodes.schedulable & ~types.no_gpu
        ids, size = types.ids[counted], len(types.names)
        idle = nodes.idle[counted, 0]
        self.now: list[float] = np.bincount(ids, weights=idle, minlength=size).tolist()
        future = idle + nodes.releasing[counted, 0]
        self.future: list[float] = np.bincount(ids, weights=future, minlength=size).tolist()
        self.present = sorted(set(ids.tolist()))

    def update(self, node: int) -> None:
        if not self.counted[node]:
            return
        idle, releasing = self.nodes.idle.item(node, 0), self.nodes.releasing.item(node, 0)
        t = self.type_of[node]
        self.now[t] += idle - self.idle[node]
        self.future[t] += idle + releasing - self.idle[node] - self.releasing[node]
        self.idle[node], self.releasing[node] = idle, releasing
