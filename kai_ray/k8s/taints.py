"""Taints and tolerations, as node selector labels the core already understands.

A node's NoSchedule / NoExecute taints keep off every pod that does not tolerate them.
The core places by node labels, so the operator gives each distinct set of tolerations
among the gangs (a handful on a real cluster: "none", "GPU nodes", ...) a label of its own,
set on exactly the nodes whose taints all of a gang's pods tolerate, and adds it to the
gang's node selector. A cluster without such taints gets no labels at all.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "TOLERATES_PREFIX",
    "Profile",
    "Taint",
    "Toleration",
    "blocking_taints",
    "describe",
    "tolerates",
    "tolerations_of",
]

TOLERATES_PREFIX = "kai-ray.io/tolerates-"
_BLOCKING = ("NoSchedule", "NoExecute")
Taint = tuple[str, str, str]  # key, value, effect
Toleration = tuple[str, str, str, str]  # key, operator, value, effect
Profile = Sequence[frozenset[Toleration]]  # the tolerations of each pod of a gang


def blocking_taints(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    taints = (node.get("spec") or {}).get("taints") or []
    return tuple(
        sorted(
            (t.get("key", ""), t.get("value", ""), t["effect"])
            for t in taints
            if t.get("effect") in _BLOCKING
        )
    )


def tolerations_of(pod: Mapping[str, Any]) -> frozenset[Toleration]:
    return frozenset(
        (t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", ""))
        for t in (pod.get("spec") or {}).get("tolerations") or []
    )


def _tolerated(taint: Taint, tolerations: Iterable[Toleration]) -> bool:
    key, value, effect = taint
    for t_key, operator, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if operator == "Exists" and (not t_key or t_key == key):
            return True
        if operator == "Equal" and t_key == key and t_value == value:
            return True
    return False


def tolerates(pods_tolerations: Profile, taints: Iterable[Taint]) -> bool:
    """Whether every pod tolerates every one of the node's taints."""
    return all(_tolerated(taint, tol) for taint in taints for tol in pods_tolerations)


def profile_label(pods_tolerations: Profile) -> str:
    """The label standing for one set of pods' tolerations (stable across cycles)."""
    text = repr(sorted(sorted(t) for t in set(pods_tolerations)))
    return TOLERATES_PREFIX + hashlib.sha1(text.encode()).hexdigest()[:10]


_LABEL = re.compile(rf"{re.escape(TOLERATES_PREFIX)}[0-9a-f]+=true")


def describe(text: str) -> str:
    """A reason with the tolerations label put back into words."""
    if TOLERATES_PREFIX not in text:
        return text
    return _LABEL.sub("tolerations that match the nodes' taints", text)
