"""Answers that read the free room of a set of nodes (a waiting gang's room reason), kept
while none of those nodes changed: a cache behind the rules that read room, so that a
rule stays one plain function of the state.

Why: allocate says again why a look-alike gang waits each time the state moved
(actions/allocate.py), and with GPU types the state mostly moves on the nodes of other
types: a gang of H100s that found no room says the same of the H100 nodes after a
hundred placements on A100s. Reading those nodes' rows anew cost most of its words.

How it knows: every change to a node's room goes through `Nodes.changed` (the GPU
indexes rely on the same), which counts it against the node's GPU type (its group: the
nodes without GPUs are a group too). An answer keeps the counts of the groups its nodes
belong to; while they are the same, none of its nodes changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

import numpy as np

from kai_ray.core.state.gputypes import GpuTypes
from kai_ray.core.state.nodes import BoolArray, Nodes

__all__ = ["RoomFacts"]

T = TypeVar("T")


class RoomFacts:
    def __init__(self, nodes: Nodes, types: GpuTypes) -> None:
        """A node's group is its GPU type (GpuTypes.ids)."""
        self._group_of = types.id_of_node
        self._groups = types.ids
        self._changes = [0] * (max(self._group_of, default=-1) + 1)
        self._members: dict[bytes, tuple[int, ...]] = {}  # per mask: the groups of its nodes
        self._facts: dict[tuple[object, ...], tuple[tuple[int, ...], object]] = {}
        nodes.watchers.append(self._changed)

    def _changed(self, node: int) -> None:
        self._changes[self._group_of[node]] += 1

    def get(self, key: tuple[object, ...], mask: BoolArray, mask_key: bytes, work_out: Callable[[], T]) -> T:
        """`work_out()`, which reads the room of the mask's nodes and nothing else that
        changes (`key` holds its other inputs); the answer kept while none of those nodes
        changed. `mask_key`: the mask's bytes (the caller has them already)."""
        groups = self._members.get(mask_key)
        if groups is None:
            groups = self._members[mask_key] = tuple(np.unique(self._groups[mask]).tolist())
        changes = self._changes
        seen = tuple([changes[g] for g in groups])
        full = (mask_key, *key)
        kept = self._facts.get(full)
        if kept is not None and kept[0] == seen:
            return cast(T, kept[1])
        answer = work_out()
        self._facts[full] = (seen, answer)
        return answer
