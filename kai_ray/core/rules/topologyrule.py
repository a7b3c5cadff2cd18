"""Topology: the node sets a gang with a topology constraint is placed in, best first,
as KAI's topology plugin gives them to every action, and the constraints KAI refuses.
A part of the Placer (placement.py), which reads it for every gang, victim and task a
job grows by; apart here because it is one rule with its own tree of domains."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np

from kai_ray.core.model.snapshot import SchedulerConfig, TopologyConstraint
from kai_ray.core.rules.nodesets import Domains, IntArray, TreeLevel, topology_tree
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import EPS, BoolArray, FloatArray, Nodes

__all__ = ["TopologyRule"]

T = TypeVar("T")


class TopologyRule:
    """The topology part of the Placer: it reads the Placer's state, settings, node
    facts kept while the nodes stand, and per-level domains."""

    state: ClusterState
    config: SchedulerConfig

    def node_fact(self, key: tuple[object, ...], work_out: Callable[[], T]) -> T:
        raise NotImplementedError  # the Placer's

    def domains(self, level: str) -> Domains:
        raise NotImplementedError  # the Placer's

    def topology_masks(self, job: Job, tasks: Sequence[Task], mask: BoolArray) -> Iterator[BoolArray]:
        """The node sets of `mask` to place `tasks` of the job in, best first, as KAI's
        topology plugin gives them to every action (a gang, a task the job grows by, a
        victim placed again): `mask` itself without a constraint; none for a constraint
        KAI refuses (refused_topology); else, inside the domain of the required level
        where the job's active tasks run (any while none runs), domain_masks."""
        constraint = job.info.topology
        if constraint is None or not (constraint.required or constraint.preferred):
            if constraint is None or self.refused_topology(constraint) is None:
                yield mask
            return
        if self.refused_topology(constraint) is not None:
            return
        if constraint.required:
            mask = self._in_held_domain(job, constraint, mask)
        yield from self.domain_masks(constraint, tasks, mask)

    def _in_held_domain(self, job: Job, constraint: TopologyConstraint, mask: BoolArray) -> BoolArray:
        """`mask` within the domains of the required level where the job's active tasks
        run (as KAI, which looks only at those domains while any runs), or within any
        domain of it when none runs."""
        assert constraint.required
        ids = self._level_ids(constraint, constraint.required)
        domains = {int(ids[t.node]) for t in job.tasks if t.status.is_active and t.node >= 0}
        domains.discard(-1)
        # A node in no domain of the level is never one for this job.
        return mask & (np.isin(ids, list(domains)) if domains else ids >= 0)

    def _level_ids(self, constraint: TopologyConstraint, level: str) -> IntArray:
        return self.level_domains(constraint, level)[0]

    def level_domains(self, constraint: TopologyConstraint, level: str) -> Domains:
        """Per node, its domain at `level` of the constraint's topology (-1: none), and the
        domains' names: KAI's domains where the cluster defines the topology
        (topology_tree), else by the level's label alone."""
        topology = self.config.topologies.get(constraint.topology)
        if topology is None or level not in topology.levels:
            return self.domains(level)
        ids, names, _ = self._tree(tuple(topology.levels))[list(topology.levels).index(level)]
        return ids, names

    def in_topology(self, constraint: TopologyConstraint) -> BoolArray | None:
        """The nodes in some domain of the constraint's topology (a node lacking the label of
        any of its levels is in none); None where the cluster does not define it."""
        topology = self.config.topologies.get(constraint.topology)
        if topology is None or not topology.levels:
            return None
        inside: BoolArray = self._tree(tuple(topology.levels))[0][0] >= 0
        return inside

    def _tree(self, levels: tuple[str, ...]) -> list[TreeLevel]:
        return self.node_fact(("topology tree", levels), lambda: topology_tree(self.state.nodes, levels))

    def refused_topology(self, constraint: TopologyConstraint) -> str | None:
        """Why KAI's topology plugin refuses the constraint, or None. Of a topology the
        cluster defines, a constraint must name a required or a preferred level, and only
        levels that topology lists (kubernetes.io/hostname too: KAI adds no level of its
        own), a preferred one no higher than the required one; else KAI reports a
        topology constraint error and no action places the job, not even on a preferred
        level's fallback. A topology listed with no levels is one a backend that lists
        them all found undefined (a KAI snapshot naming a Topology it does not hold): KAI
        refuses it too. A topology not listed at all (a backend that lists none) is
        followed by its levels as named."""
        topology = self.config.topologies.get(constraint.topology)
        if topology is None:
            return None
        if not topology.levels:  # listed, with nothing: a name the cluster does not define
            return (
                f"topology {constraint.topology} is not defined in the cluster: KAI never places "
                f"such a job; create topology {constraint.topology} with its levels, or name one "
                "the cluster defines"
            )
        levels = ", ".join(topology.levels)
        if not constraint.required and not constraint.preferred:
            return (
                f"topology {constraint.topology} is named with no level: KAI never places such a job; "
                f"name a required or preferred level ({levels})"
            )
        for kind, level in (("required", constraint.required), ("preferred", constraint.preferred)):
            if level and level not in topology.levels:
                return (
                    f"{kind} topology level {level} is not a level of topology {constraint.topology} "
                    f"(levels: {levels}): KAI never places such a job; name one of its levels, "
                    f"or add {level} to topology {constraint.topology}"
                )
        order = list(topology.levels)
        if (
            constraint.required
            and constraint.preferred
            and order.index(constraint.preferred) < order.index(constraint.required)
        ):
            return (
                f"preferred topology level {constraint.preferred} is above the required level "
                f"{constraint.required} in topology {constraint.topology} ({levels}): KAI never places such "
                f"a job; prefer a level at or below {constraint.required}, or drop the preference"
            )
        return None

    def domain_masks(
        self, constraint: TopologyConstraint, tasks: Sequence[Task], mask: BoolArray
    ) -> Iterator[BoolArray]:
        """Node sets to try, best first, as KAI's topology plugin orders them: the domains
        of the preferred level, then of each level above it up to the required one (up to
        the top, then every node of the topology, when none is required). Each level's
        domains in the order of KAI's sorted tree: the domains of the top level fullest
        first (by the dominant share of their free room the gang would take; ties by
        name), and below, each domain's children fullest first, a parent's before the
        next's. A domain without room for the gang's GPUs (or CPUs) is skipped. A node
        lacking the label of any level of the topology is in none of it. (A topology the
        cluster does not define: the preferred level's domains, then the required's or
        all of `mask`, each fullest first.)"""
        topology = self.config.topologies.get(constraint.topology)
        if topology is None:
            if constraint.preferred:
                yield from self._domains_by_room(self.domains(constraint.preferred), None, tasks, mask)
            if constraint.required:
                yield from self._domains_by_room(self.domains(constraint.required), None, tasks, mask)
            else:
                yield mask
            return
        levels = tuple(topology.levels)
        if any(level and level not in levels for level in (constraint.required, constraint.preferred)):
            return  # a level the topology lacks: KAI refuses it (refused_topology)
        tree = self._tree(levels)
        deepest = levels.index(constraint.preferred or constraint.required or "")
        top = levels.index(constraint.required) if constraint.required else 0
        room = self._free_room()
        orders = _tree_order(tree, deepest, room, _needs(tasks, self.state.nodes))
        for depth in range(deepest, top - 1, -1):
            ids, names, _ = tree[depth]
            yield from self._domains_by_room((ids, names), orders[depth], tasks, mask, room)
        if not constraint.required:
            yield mask & (tree[0][0] >= 0)

    def _free_room(self) -> FloatArray:
        """Per node, its room free now or being released, as KAI's topology plugin counts a
        domain's: whole GPUs only, a shared device counting once nothing holds it but
        what is being released."""
        nodes = self.state.nodes
        room = nodes.idle + nodes.releasing
        for n in np.flatnonzero(nodes.frac_future >= 1 - EPS).tolist():
            room[n, 0] += sum(1 for d in nodes.devices[n].values() if d.idle + d.releasing >= 1 - EPS)
        return room

    def _domains_by_room(
        self,
        domains: Domains,
        order: list[int] | None,
        tasks: Sequence[Task],
        mask: BoolArray,
        all_room: FloatArray | None = None,
    ) -> Iterator[BoolArray]:
        """The domains of `mask` in `order` (None: fullest first, ties by name) that have
        room (`all_room`, else _free_room), counted over the nodes of `mask` in them, for
        the gang's whole GPUs (CPUs for a gang without GPUs)."""
        ids, names = domains
        usable = mask & (ids >= 0)
        if not names or not usable.any():
            return
        need = sum((t.demand for t in tasks), start=np.zeros(self.state.nodes.idle.shape[1]))
        col = 0 if need[0] > 0 or any(t.fraction_request for t in tasks) else 1
        room = (self._free_room() if all_room is None else all_room)[:, col]
        free = np.bincount(ids[usable], weights=room[usable], minlength=len(names))
        if order is None:  # binpack over domains: the fullest that may hold the gang first
            order = sorted(range(len(names)), key=lambda d: (free[d], names[d]))
        for d in order:
            if free[d] + EPS >= need[col]:
                nodes = usable & (ids == d)
                if nodes.any():
                    yield nodes


def _needs(tasks: Sequence[Task], nodes: Nodes) -> FloatArray:
    """What the tasks ask for together, in the nodes' columns, a share of a device
    counted as that much GPU (as KAI sums the tasks' requests)."""
    need: FloatArray = sum((t.demand for t in tasks), start=np.zeros(nodes.idle.shape[1]))
    for t in tasks:
        if t.fraction_request:
            request = t.info.request
            memory = float(nodes.device_memory.max()) if len(nodes) else 0.0
            need[0] += request.gpu if request.gpu > 0 else (request.gpu_memory / memory if memory else 0.0)
    return need


_NOT_IN_DOMAIN = 1000.0  # KAI's ratio for a resource the domain has none of


def _tree_order(tree: list[TreeLevel], deepest: int, room: FloatArray, need: FloatArray) -> list[list[int]]:
    """Per level down to `deepest`, its domains in the order of KAI's sorted tree: each
    domain's children by the dominant share of their free room the tasks would take,
    highest (fullest) first, ties by name; a level lists its domains parent by parent."""
    columns = [c for c in range(len(need)) if need[c] > 0]
    orders: list[list[int]] = []
    for depth in range(deepest + 1):
        ids, names, parents = tree[depth]
        inside = ids >= 0
        ratio = np.zeros(len(names))
        for c in columns:
            free = np.bincount(ids[inside], weights=room[inside, c], minlength=len(names))
            share = np.where(free > 0, need[c] / np.where(free > 0, free, 1.0), _NOT_IN_DOMAIN)
            ratio = np.maximum(ratio, share)
        keys = [(-float(ratio[d]), names[d]) for d in range(len(names))]
        if depth == 0:
            orders.append(sorted(range(len(names)), key=keys.__getitem__))
            continue
        children: dict[int, list[int]] = {}
        for d in range(len(names)):
            children.setdefault(int(parents[d]), []).append(d)
        orders.append([d for p in orders[-1] for d in sorted(children.get(p, []), key=keys.__getitem__)])
    return orders
