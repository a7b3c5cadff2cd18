"""Required node affinity, as Kubernetes defines `requiredDuringSchedulingIgnoredDuringExecution`.

A task may use a node when the node meets ANY of the affinity's terms; a term is met when
EVERY one of its requirements is. A requirement tests one node label (matchExpressions)
or the node's name (matchFields on `metadata.name`; a node's name in the core is
NodeInfo.name). A NodeAffinity also carries the task's own nodeSelector pairs (label =
value, all required) beyond its job's: a pod must meet both its nodeSelector and its
affinity, and pods of one gang may differ in either.

Validation is construction: a requirement that Kubernetes would refuse raises ValueError
with what is wrong and the fix, so a backend that builds one from user input turns the
message into its own problem report (naming the object and the field) and the core never
sees an invalid one. Preferred (soft) affinity is not represented: the core ignores it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "FIELD_OPERATORS",
    "NODE_NAME_FIELD",
    "OPERATORS",
    "NodeAffinity",
    "NodeRequirement",
    "NodeSelectorTerm",
    "describe_affinity",
    "describe_selector",
    "requirement_matches",
]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")  # what Kubernetes allows on node fields
NODE_NAME_FIELD = "metadata.name"  # the only node field Kubernetes selects on
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")  # what Go's strconv.ParseInt(s, 10, 64) reads
_INT64 = 2**63


def _integer(text: str) -> int | None:
    """The label value as Kubernetes compares it for Gt and Lt, or None (then no match)."""
    if not _INTEGER.match(text):
        return None
    value = int(text)
    return value if -_INT64 <= value < _INT64 else None


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One matchExpressions (or matchFields, `field=True`) entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False  # tests the node's name (`metadata.name`), not a label

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem:
            raise ValueError(problem)


def _problem(req: NodeRequirement) -> str:
    """What Kubernetes would refuse in this requirement, with the fix; "" if nothing."""
    if req.field:
        if req.key != NODE_NAME_FIELD:
            return f"matchFields key {req.key!r} is not a node field to select on; use {NODE_NAME_FIELD}"
        if req.operator not in FIELD_OPERATORS:
            return f"operator {req.operator!r} is not allowed on {NODE_NAME_FIELD}; use In or NotIn"
    elif not req.key:
        return "key is empty; name the node label to test"
    if req.operator not in OPERATORS:
        return f"operator {req.operator!r} is unknown; use one of {', '.join(OPERATORS)}"
    n = len(req.values)
    if req.operator in ("In", "NotIn") and n == 0:
        return f"operator {req.operator} needs at least one value; list the values under values"
    if req.operator in ("Exists", "DoesNotExist") and n:
        return f"operator {req.operator} takes no values; remove values"
    if req.operator in ("Gt", "Lt"):
        if n != 1:
            return f"operator {req.operator} takes exactly one value (an integer); give one"
        if _integer(req.values[0]) is None:
            value = req.values[0]
            return f"operator {req.operator} compares integers, and {value!r} is not one; write e.g. '4'"
    return ""


def requirement_matches(req: NodeRequirement, value: str | None) -> bool:
    """Whether a node whose label (or name, for a field) is `value` (None: the node lacks
    the label) meets the requirement. As Kubernetes: NotIn and DoesNotExist hold for a
    node without the label; Gt and Lt need an integer label value."""
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    number = None if value is None else _integer(value)
    if number is None:
        return False
    bound = int(req.values[0])
    return number > bound if op == "Gt" else number < bound


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements that must all hold. An empty term matches no node (as Kubernetes)."""

    expressions: tuple[NodeRequirement, ...] = ()  # on node labels
    fields: tuple[NodeRequirement, ...] = ()  # on the node's name

    def __post_init__(self) -> None:
        if any(r.field for r in self.expressions) or not all(r.field for r in self.fields):
            raise ValueError("a term's expressions test labels and its fields the node's name")


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    """Which nodes one task may use beyond its job's node selector: nodes that match every
    `selector` pair and, when `terms` is not empty, meet at least one term. Equal
    affinities are one constraint: the core keys its node masks and searches by value."""

    terms: tuple[NodeSelectorTerm, ...] = ()
    selector: tuple[tuple[str, str], ...] = ()  # the task's own nodeSelector pairs, sorted
    # Hashed once: it keys node masks and failed searches, looked up per task and job.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.terms, self.selector)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def of(
        cls, terms: tuple[NodeSelectorTerm, ...] = (), selector: Mapping[str, str] | None = None
    ) -> NodeAffinity:
        """From terms and a task's own nodeSelector (any order)."""
        return cls(terms, tuple(sorted((selector or {}).items())))


def _describe_requirement(req: NodeRequirement) -> str:
    if req.operator in ("In", "NotIn"):
        return f"{req.key} {req.operator} [{', '.join(req.values)}]"
    if req.operator in ("Gt", "Lt"):
        return f"{req.key} {req.operator} {req.values[0]}"
    return f"{req.key} {req.operator}"


def _describe_term(term: NodeSelectorTerm, alone: bool) -> str:
    parts = [_describe_requirement(r) for r in (*term.expressions, *term.fields)]
    if not parts:
        return "(an empty term, which no node meets)"
    text = ", ".join(parts)
    return text if alone or len(parts) == 1 else f"({text})"


def describe_selector(pairs: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in pairs)


def describe_affinity(affinity: NodeAffinity) -> str:
    """`gpu-type In [a100, h100]`; terms joined by `or`, a term's requirements by commas;
    the task's own nodeSelector after them."""
    terms = affinity.terms
    text = " or ".join(_describe_term(t, len(terms) == 1) for t in terms)
    if affinity.selector:
        selector = f"nodeSelector {describe_selector(affinity.selector)}"
        text = f"{text}, with {selector}" if text else selector
    return text
