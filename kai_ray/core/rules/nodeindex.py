"""An exact index of nodes by whole idle GPUs, so a whole-GPU placement need not scan
every node: binpack walks the buckets from the fewest idle GPUs that fit upward, spread
from the most downward, each bucket in node order. The first node that also fits in cpu,
memory and the rest is the one the vectorised argmin would pick (same score, same tie).

Buckets are lazy min-heaps of node indices: a node moving between buckets is pushed to
its new bucket and its old entry is dropped when it reaches the top (its level no longer
matches). Pushing is far cheaper than keeping sorted lists, and a scan rarely looks past
the first live entry."""

from __future__ import annotations

import heapq
import math
from collections.abc import Generator

import numpy as np
import numpy.typing as npt

from kai_ray.core.state.nodes import EPS, Nodes

__all__ = ["GpuBuckets"]


class GpuBuckets:
    """`members`: the nodes to index (the nodes of one GPU type); None: every node."""

    def __init__(self, nodes: Nodes, members: npt.NDArray[np.bool_] | None = None) -> None:
        self.nodes = nodes
        top = int(nodes.gpus.max()) if len(nodes) else 0
        self.size = top + 1
        self.level = np.full(len(nodes), -1, dtype=np.int64).tolist()
        indexed = nodes.schedulable if members is None else nodes.schedulable & members
        self.indexed: list[bool] = indexed.tolist()
        heaps: list[list[int]] = [[] for _ in range(self.size)]
        # The whole idle GPUs of the indexed nodes together: a gang asking for more cannot
        # have them now, whatever the nodes (Placer._short_of_room).
        self.whole = 0
        # Which indexed nodes are releasing GPUs, and how many: a gang short of idle GPUs
        # may still wait for those (Placer._short_of_room), asked with no pass over the nodes.
        self.releasing: list[bool] = [False] * len(nodes)
        self.releasing_nodes = 0
        for node in np.flatnonzero(indexed).tolist():
            level = self._level_of(node)
            self.level[node] = level
            if level >= 0:
                heaps[level].append(node)  # ascending already: a valid heap
                self.whole += level
            self._count_releasing(node)
        self.heaps = heaps

    def _level_of(self, node: int) -> int:
        idle = float(self.nodes.idle[node, 0])
        return min(int(idle + EPS), self.size - 1) if idle > -EPS else -1

    def update(self, node: int) -> None:
        """Call after the node's idle GPUs changed."""
        if not self.indexed[node]:
            return
        self._count_releasing(node)
        new, old = self._level_of(node), self.level[node]
        if new != old:
            self.level[node] = new
            self.whole += max(new, 0) - max(old, 0)
            if new >= 0:
                heapq.heappush(self.heaps[new], node)

    def _count_releasing(self, node: int) -> None:
        now = self.nodes.releasing.item(node, 0) > EPS
        if now != self.releasing[node]:
            self.releasing[node] = now
            self.releasing_nodes += 1 if now else -1

    def levels(self, gpus: float, spread: bool) -> range:
        low = max(0, math.ceil(gpus - EPS))
        return range(self.size - 1, low - 1, -1) if spread else range(low, self.size)

    def first(self, gpus: float, spread: bool) -> int:
        """The best node with at least `gpus` idle whole GPUs, or -1 (no walk needed)."""
        level_of = self.level
        for level in self.levels(gpus, spread):
            heap = self.heaps[level]
            while heap:
                node = heap[0]
                if level_of[node] == level:
                    return node
                heapq.heappop(heap)  # stale: the node moved to another bucket
        return -1

    def candidates(self, gpus: float, spread: bool) -> Generator[int, None, None]:
        """Nodes with at least `gpus` idle whole GPUs, best first. Stop iterating as soon
        as one suits: the walk pops the entries it passes and puts live ones back."""
        for level in self.levels(gpus, spread):
            heap = self.heaps[level]
            passed: list[int] = []
            try:
                while heap:
                    node = heapq.heappop(heap)
                    if self.level[node] != level or (passed and passed[-1] == node):
                        continue  # stale entry, or a duplicate of one just passed
                    passed.append(node)
                    yield node
            finally:
                for node in passed:
                    heapq.heappush(heap, node)
