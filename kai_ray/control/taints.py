"""Taints and tolerations, Kubernetes' rule, for every backend: which pods a node's taints
keep off, turned into node labels and constraints the core already understands.

A node's NoSchedule and NoExecute taints keep off every pod that does not tolerate them
(PreferNoSchedule is a preference, not a rule: it keeps nothing off). A toleration
tolerates a taint when its effect is empty or the taint's, and its operator is `Exists`
with an empty key (every taint) or the taint's key, or `Equal` with the taint's key and
value. `tolerates` is that rule; both ways of feeding it to the core read it:

- the Kubernetes backend (kai_ray.k8s.world), which patches its world object by object,
  gives each distinct set of tolerations among the gangs a label of its own
  (`profile_label`), set on the nodes whose taints all of a gang's pods tolerate, and
  adds it to the gang's node selector;
- a whole snapshot at once (scenario files, KAI's snapshots) goes through `apply_taints`:
  each blocking taint becomes a node label (`taint_label`) and each task a required
  affinity that the labels of the taints it does not tolerate be absent, so that the
  core's reason for a task no node admits names those taints itself.

A cluster without blocking taints gets no labels and no constraint at all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from kai_ray.core.model.affinity import NodeAffinity, NodeRequirement, NodeSelectorTerm
from kai_ray.core.model.snapshot import JobInfo, NodeInfo, TaskInfo

__all__ = [
    "BLOCKING_EFFECTS",
    "EFFECTS",
    "TAINT_PREFIX",
    "TOLERATES_PREFIX",
    "Profile",
    "Taint",
    "Toleration",
    "apply_taints",
    "blocking",
    "blocking_taints",
    "describe",
    "profile_label",
    "taint_label",
    "taint_text",
    "tolerated",
    "tolerates",
    "tolerations_of",
]

TOLERATES_PREFIX = "kai-ray.io/tolerates-"
# A blocking taint's node label: `kai-ray.io/taint gpu=true:NoSchedule`. The space keeps it
# apart from every real label (Kubernetes allows none in a key), and the core's reason for
# a task that does not tolerate it reads `kai-ray.io/taint gpu=true:NoSchedule DoesNotExist`.
TAINT_PREFIX = "kai-ray.io/taint "
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
Taint = tuple[str, str, str]  # key, value, effect
Toleration = tuple[str, str, str, str]  # key, operator, value, effect ("": every effect)
Profile = Sequence[frozenset[Toleration]]  # the tolerations of each pod of a gang


def blocking(taints: Iterable[Taint]) -> tuple[Taint, ...]:
    """The taints that keep pods off (NoSchedule, NoExecute), sorted."""
    return tuple(sorted(t for t in taints if t[2] in BLOCKING_EFFECTS))


def blocking_taints(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    """A Kubernetes Node's blocking taints (its JSON as the API server gives it)."""
    taints = (node.get("spec") or {}).get("taints") or []
    return blocking(
        (t.get("key") or "", t.get("value") or "", t["effect"])
        for t in taints
        if t.get("effect") in BLOCKING_EFFECTS
    )


def tolerations_of(pod: Mapping[str, Any]) -> frozenset[Toleration]:
    """A Kubernetes Pod's tolerations (operator Equal when it gives none, as Kubernetes;
    an absent or null field is empty)."""
    return frozenset(
        (t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "")
        for t in (pod.get("spec") or {}).get("tolerations") or []
    )


def tolerated(taint: Taint, tolerations: Iterable[Toleration]) -> bool:
    """Whether one of the tolerations tolerates the taint (Kubernetes' rule)."""
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
    return all(tolerated(taint, tol) for taint in taints for tol in pods_tolerations)


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


# ---------------------------------------------------------------- a whole snapshot


def taint_text(taint: Taint) -> str:
    """`key=value:Effect` (`key:Effect` without a value), as kubectl writes a taint."""
    key, value, effect = taint
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def taint_label(taint: Taint) -> str:
    return TAINT_PREFIX + taint_text(taint)


def apply_taints(
    nodes: Sequence[NodeInfo],
    taints: Mapping[str, Iterable[Taint]],
    jobs: Sequence[JobInfo],
    tolerations: Mapping[tuple[str, str], Collection[Toleration]],
) -> tuple[list[NodeInfo], list[JobInfo]]:
    """The nodes and jobs with the taints applied. `taints`: node name -> its taints (the
    blocking ones are read); `tolerations`: (job name, task name) -> the task's (none
    when absent). Every task keeps off the nodes with a blocking taint it does not
    tolerate, running ones included: one evicted or moved is placed by the rule, one that
    stays is not touched (NoExecute's eviction is not modelled)."""
    by_node = {name: blocking(ts) for name, ts in taints.items()}
    present = sorted({t for ts in by_node.values() for t in ts})
    if not present:
        return list(nodes), list(jobs)
    labelled = [_labelled(n, by_node.get(n.name, ())) for n in nodes]
    # Equal constraints are one object: the core groups a job's pending tasks by identity.
    made: dict[tuple[NodeAffinity | None, tuple[Taint, ...]], NodeAffinity | None] = {}
    out = []
    for job in jobs:
        tasks = []
        for task in job.tasks:
            kept_off = tuple(
                t for t in present if not tolerated(t, tolerations.get((job.name, task.name), ()))
            )
            key = (task.node_affinity, kept_off)
            if key not in made:
                made[key] = _kept_off(task.node_affinity, kept_off)
            affinity = made[key]
            tasks.append(task if affinity is task.node_affinity else _with(task, affinity))
        out.append(dataclasses.replace(job, tasks=tasks))
    return labelled, out


def _labelled(node: NodeInfo, taints: tuple[Taint, ...]) -> NodeInfo:
    if not taints:
        return node
    return dataclasses.replace(node, labels={**node.labels, **{taint_label(t): "true" for t in taints}})


def _with(task: TaskInfo, affinity: NodeAffinity | None) -> TaskInfo:
    return dataclasses.replace(task, node_affinity=affinity)


def _kept_off(affinity: NodeAffinity | None, taints: tuple[Taint, ...]) -> NodeAffinity | None:
    """`affinity` and, in each of its terms, no label of `taints` (a term with no entries
    meets no node, and stays so)."""
    if not taints:
        return affinity
    absent = tuple(NodeRequirement(taint_label(t), "DoesNotExist") for t in taints)
    if affinity is None or not affinity.terms:
        terms: tuple[NodeSelectorTerm, ...] = (NodeSelectorTerm(absent),)
    else:
        terms = tuple(
            NodeSelectorTerm((*t.expressions, *absent), t.fields) if t.expressions or t.fields else t
            for t in affinity.terms
        )
    selector = affinity.selector if affinity is not None else ()
    return NodeAffinity(terms, selector)
