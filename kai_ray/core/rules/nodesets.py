"""Sets of nodes a job may use: those its node selector and required node affinity admit,
and topology domains.

Functions of the nodes alone, so that a cycle's Placer (which caches them) and the
empty-cluster check at submit (emptyfit.py) draw the same sets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import numpy as np
import numpy.typing as npt

from kai_ray.core.model.affinity import NodeAffinity, NodeRequirement, NodeSelectorTerm, requirement_matches
from kai_ray.core.model.snapshot import NODE_ID_LABELS, NodeInfo
from kai_ray.core.state.nodes import BoolArray, Nodes

__all__ = [
    "Domains",
    "IntArray",
    "TreeLevel",
    "affinity_mask",
    "domain_ids",
    "selector_mask",
    "topology_tree",
]

IntArray = npt.NDArray[np.int64]
Domains = tuple[IntArray, list[str]]  # per node its domain's id (-1: none), the domains' names
# One level of a topology's tree: per node its domain's id (-1: the node is not in the
# topology), the domains' names, and per domain its parent's id one level up (-1 at the top).
TreeLevel = tuple[IntArray, list[str], IntArray]


def selector_mask(nodes: Nodes, selector: Mapping[str, str] | tuple[tuple[str, str], ...]) -> BoolArray:
    """Schedulable nodes whose labels match every pair of the node selector."""
    pairs = selector.items() if isinstance(selector, Mapping) else selector
    mask = nodes.schedulable.copy()
    for label, value in pairs:
        mask &= np.array([n.labels.get(label) == value for n in nodes.infos], dtype=bool)
    return mask


def affinity_mask(nodes: Nodes, affinity: NodeAffinity | None) -> BoolArray:
    """Schedulable nodes that match the affinity's selector pairs and meet at least one of
    its terms (any term, when it has none); every schedulable node for None."""
    if affinity is None:
        return nodes.schedulable.copy()
    mask = selector_mask(nodes, affinity.selector)
    if affinity.terms:
        met = np.zeros(len(nodes), dtype=bool)
        for term in affinity.terms:
            met |= _term_mask(nodes, term)
        mask &= met
    return mask


def _term_mask(nodes: Nodes, term: NodeSelectorTerm) -> BoolArray:
    if not term.expressions and not term.fields:
        return np.zeros(len(nodes), dtype=bool)  # an empty term matches no node (Kubernetes)
    mask = np.ones(len(nodes), dtype=bool)
    for req in (*term.expressions, *term.fields):
        mask &= _requirement_mask(nodes, req)
    return mask


def _requirement_mask(nodes: Nodes, req: NodeRequirement) -> BoolArray:
    values = nodes.names if req.field else [n.labels.get(req.key) for n in nodes.infos]
    return np.fromiter((requirement_matches(req, v) for v in values), dtype=bool, count=len(nodes))


def domain_ids(nodes: Nodes, level: str) -> Domains:
    """Per node, the id of its domain at a topology level (-1: the node lacks the label),
    and the domains' names in order of first appearance. On a node-identity level a node
    without the label is a domain of its own, named after the node."""
    names: dict[str, int] = {}
    ids = np.full(len(nodes), -1, dtype=np.int64)
    identity = level in NODE_ID_LABELS
    for i, node in enumerate(nodes.infos):
        value = node.labels.get(level)
        if value is None and identity:
            value = node.name
        if value is not None:
            ids[i] = names.setdefault(value, len(names))
    return ids, list(names)


def topology_tree(nodes: Nodes, levels: tuple[str, ...]) -> list[TreeLevel]:
    """A topology's domains as KAI's topology plugin builds them, level by level (outermost
    first): a domain is named by its node's labels down to its level, joined by dots (rack
    r0 of zone a is `a.r0`, another than rack r0 of zone b), and a node lacking the label
    of any level is in no domain of the topology at all. On a node-identity level a node
    without the label is named after the node (every Kubernetes node has it)."""
    paths: list[list[str] | None] = []
    for node in nodes.infos:
        values = [_label(node, level) for level in levels]
        paths.append(None if any(v is None for v in values) else cast(list[str], values))
    tree: list[TreeLevel] = []
    for depth in range(len(levels)):
        names: dict[str, int] = {}
        ids = np.full(len(nodes), -1, dtype=np.int64)
        parent_of: dict[int, int] = {}
        above = tree[-1][0] if tree else None
        for i, path in enumerate(paths):
            if path is not None:
                d = ids[i] = names.setdefault(".".join(path[: depth + 1]), len(names))
                parent_of[d] = -1 if above is None else int(above[i])
        parents = np.array([parent_of[d] for d in range(len(names))], dtype=np.int64)
        tree.append((ids, list(names), parents))
    return tree


def _label(node: NodeInfo, level: str) -> str | None:
    value = node.labels.get(level)
    return node.name if value is None and level in NODE_ID_LABELS else value
