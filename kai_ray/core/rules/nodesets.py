"""Sets of nodes a job may use: those its node selector and required node affinity admit,
and topology domains.

Functions of the nodes alone, so that a cycle's Placer (which caches them) and the
empty-cluster check at submit (emptyfit.py) draw the same sets."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from kai_ray.core.model.affinity import NodeAffinity, NodeRequirement, NodeSelectorTerm, requirement_matches
from kai_ray.core.model.snapshot import NODE_ID_LABELS
from kai_ray.core.state.nodes import BoolArray, Nodes

__all__ = ["Domains", "IntArray", "affinity_mask", "domain_ids", "selector_mask"]

IntArray = npt.NDArray[np.int64]
Domains = tuple[IntArray, list[str]]  # per node its domain's id (-1: none), the domains' names


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
