"""Which GPU types a gang may take, in the order it tries them (docs/gpu-types.md): the
types it accepts, held to its first while the actions run where its queue says
whenCanPreempt Preempt, those within its queue's quota first where it says whenCanBorrow
TryNextType, and none whose per-type limit (or, for non-preemptible work, quota) it
would pass. Part of the Placer (placement.py), apart for its length.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from kai_ray.core.rules.nodeindex import GpuBuckets
from kai_ray.core.rules.typedqueues import blocked, borrows
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.gputypes import GpuTypes, gpus_of
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import BoolArray
from kai_ray.core.state.queues import fungibility_modes

__all__ = ["Selector", "TypeChoices"]

Selector = tuple[tuple[str, str], ...]


class TypeChoices:
    """The Placer's GPU types (a base class: the Placer's masks and indexes serve both)."""

    state: ClusterState
    _selector_masks: dict[Selector, BoolArray]

    def _init_types(self) -> None:
        self._gpu_types: GpuTypes | None = None
        # Per GPU type: the all-nodes mask narrowed to it, and a GPU index of its nodes,
        # so a gang placed on one type keeps the fast paths of the whole cluster's mask.
        self._type_masks: dict[int, BoolArray] = {}
        self._type_buckets: dict[int, GpuBuckets] = {}
        self._type_of_mask: dict[int, int] = {}  # id of a mask of _type_masks -> its type
        self._type_masks_any: set[int] = set()  # types of _type_masks with a node of theirs
        # Jobs are held to their first GPU type while the actions run (queues.
        # first_type_only); `later_types` once the cycle's last step may give them the
        # free room of the others (cycle.take_later_types).
        self.later_types = False

    @property
    def buckets(self) -> GpuBuckets:
        """The whole cluster's GPU index: the Placer's."""
        raise NotImplementedError

    def base_mask(self, job: Job) -> BoolArray:
        """The nodes the job may use: the Placer's."""
        raise NotImplementedError

    @property
    def gpu_types(self) -> GpuTypes:
        if self._gpu_types is None:
            self._gpu_types = GpuTypes(self.state.nodes)
        return self._gpu_types

    def type_mask(self, job: Job) -> BoolArray | None:
        """The nodes whose GPUs the job may use, by type alone: those of the type its
        gang already holds (a gang stays on one type unless it may span them), else of
        the types it accepts; None when types do not narrow it (one type in the
        cluster, or a job that accepts any and holds none)."""
        types = self.gpu_types
        if not types.several:
            return None
        if not job.info.mixed_gpu_types:
            held = types.held_by(job)
            if held is not None:
                return types.of(held)
            first = self.first_type(job)
            if first is not None:
                return types.of(first)
        return types.accepting(job.info.gpu_types) if job.info.gpu_types else None

    @contextlib.contextmanager
    def taking_later_types(self) -> Iterator[None]:
        """While the cycle's last step gives the jobs held to their first type the room of
        their later types (cycle.take_later_types)."""
        self.later_types = True
        try:
            yield
        finally:
            self.later_types = False

    def first_type(self, job: Job) -> int | None:
        """The one type a job held to its first type may take now (None: not held): the
        first it accepts that the cluster has. Kept to it, allocate finds no free room of
        a later type, and the actions that evict take victims on it alone."""
        if not job.first_type_only or self.later_types:
            return None
        return self.gpu_types.first_present(job.info.gpu_types)

    def type_choices(self, job: Job, mask: BoolArray, tasks: Sequence[Task] = ()) -> Iterator[BoolArray]:
        """The node sets a gang may take, in the order it tries them: one GPU type each,
        unless it may span types or asks for no GPU (then `mask` whole). The types it
        accepts in its order of preference; a gang that accepts any type tries the type
        with the fewest free GPUs first, as binpacking does nodes (which leaves the big
        free pools to gangs that accept fewer types). A type whose queue limit (or, for
        non-preemptible work, quota) `tasks` would pass is skipped (typedqueues.py); a
        gang that may span types keeps off every such type (how it would split between
        types is not known before it is placed: as if all of it went to each)."""
        types, typed = self.gpu_types, self.state.usage.typed
        if (typed is None and not types.several) or not types.asks_gpu(job):
            yield mask
            return
        gpus = gpus_of(tasks)
        if job.info.mixed_gpu_types:
            yield self.within_type_limits(job, tasks, mask)
            return
        order = self._fungible(job, self.type_candidates(job, mask), gpus)
        for t in order:
            if typed is not None and blocked(typed, job, t, gpus):
                continue
            narrowed = self._of_type(job, mask, t)
            if t in self._type_masks_any if narrowed is self._type_masks.get(t) else narrowed.any():
                yield narrowed

    def type_candidates(self, job: Job, mask: BoolArray | None = None) -> list[int]:
        """The types a gang that stays on one type may take now, in its order
        (GpuTypes.candidates): its first type alone while it is held to it. One list for
        placing it, for saying why it waits, and for judging a reclaim on types."""
        types = self.gpu_types
        if job.first_type_only and types.held_by(job) is None:
            first = self.first_type(job)
            if first is not None:
                return [first]
        return types.candidates(job, self.base_mask(job) if mask is None else mask)

    def _fungible(self, job: Job, order: list[int], gpus: float) -> list[int]:
        """The types in the order the job's queue has it take them (docs/gpu-types.md,
        "Fungibility"): with whenCanBorrow TryNextType, first those in which its queue
        stays within its quota."""
        typed, borrow = self.state.usage.typed, fungibility_modes(self.state.tree)[0]
        if len(order) < 2 or typed is None or not borrow or not borrow[job.queue]:
            return order
        return sorted(order, key=lambda t: borrows(typed, job.queue, t, gpus))  # stable

    def _of_type(self, job: Job, mask: BoolArray, t: int) -> BoolArray:
        """`mask` narrowed to one GPU type. For a job with no selector or affinity, its
        mask (every node, or every node of the types it accepts) narrowed to a type is
        the cluster's nodes of that type: one array per type, whose identity keys the
        type's GPU index (_indexed)."""
        every = self._selector_masks.get(())
        if every is None or job.selector or job.affinity is not None:
            return mask & self.gpu_types.of(t)
        narrowed = self._type_masks.get(t)
        if narrowed is None:
            narrowed = self._type_masks[t] = every & self.gpu_types.of(t)
            self._type_of_mask[id(narrowed)] = t
            if (narrowed & ~self.gpu_types.no_gpu).any():  # some node of the type to try
                self._type_masks_any.add(t)
        return narrowed

    def _indexed(self, mask: BoolArray) -> GpuBuckets | None:
        """The GPU index that answers for `mask`: the whole cluster's, or one type's."""
        if mask is self._selector_masks.get(()):
            return self.buckets
        t = self._type_of_mask.get(id(mask))
        if t is None or self._type_masks[t] is not mask:
            return None
        buckets = self._type_buckets.get(t)
        if buckets is None:
            if not self._type_buckets:  # one watcher for them all: each node has one type
                self.state.nodes.watchers.append(self._update_type_index)
            buckets = self._type_buckets[t] = GpuBuckets(self.state.nodes, self.gpu_types.ids == t)
        return buckets

    def _update_type_index(self, node: int) -> None:
        """A node changed: the GPU index of its type, if one is kept, follows it."""
        buckets = self._type_buckets.get(self.gpu_types.id_of_node[node])
        if buckets is not None:
            buckets.update(node)

    def within_type_limits(self, job: Job, tasks: Sequence[Task], mask: BoolArray) -> BoolArray:
        """`mask` without the nodes of every type whose queue limit (or quota, for
        non-preemptible work) `tasks` would pass (typedqueues.py): for tasks placed one by
        one (an elastic job's surplus), or a gang that may span types."""
        typed = self.state.usage.typed
        if typed is None:
            return mask
        types, gpus = self.gpu_types, gpus_of(tasks)
        for t in range(len(types.names)):
            if gpus > 0 and blocked(typed, job, t, gpus):
                mask = mask & ~(types.ids == t)
        return mask
