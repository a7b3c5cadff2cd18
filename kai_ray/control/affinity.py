"""Kubernetes' nodeSelectorTerms, as written in a pod spec or a scenario file, read into the
core's NodeAffinity: one reader for every front end, so that a scenario and a pod say the
same thing the same way, and a mistake is reported with the same words.

The shape is Kubernetes': a list of terms, each `{matchExpressions: [...], matchFields:
[...]}`, each entry `{key, operator, values}`. What may be wrong in an entry (an unknown
operator, Gt with a non-integer) is the core's rule (kai_ray.core.model.affinity); this module
adds where it is (`nodeSelectorTerms[0].matchExpressions[1]`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kai_ray.core.model.affinity import NodeAffinity, NodeRequirement, NodeSelectorTerm

__all__ = ["node_affinity", "read_terms"]

_TERM_KEYS = ("matchExpressions", "matchFields")
_ENTRY_KEYS = ("key", "operator", "values")


def read_terms(raw: object, where: str) -> tuple[NodeSelectorTerm, ...]:
    """The terms of `raw` (a list of terms); ValueError naming the place under `where`
    and the fix."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(
            f"{where}: expected a non-empty list of terms, each {{matchExpressions: [...], "
            "matchFields: [...]}; a node meeting any one term is admitted"
        )
    return tuple(_term(term, f"{where}[{i}]") for i, term in enumerate(raw))


def _term(raw: object, where: str) -> NodeSelectorTerm:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a term is a mapping with matchExpressions and/or matchFields")
    unknown = [k for k in raw if k not in _TERM_KEYS]
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; a term has {' and '.join(_TERM_KEYS)}")
    expressions = _entries(raw.get("matchExpressions"), f"{where}.matchExpressions", field=False)
    fields = _entries(raw.get("matchFields"), f"{where}.matchFields", field=True)
    return NodeSelectorTerm(expressions, fields)


def _entries(raw: object, where: str, field: bool) -> tuple[NodeRequirement, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{where}: expected a list of {{key, operator, values}}")
    return tuple(_requirement(entry, f"{where}[{i}]", field) for i, entry in enumerate(raw))


def _requirement(raw: object, where: str, field: bool) -> NodeRequirement:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected {{key, operator, values}}")
    unknown = [k for k in raw if k not in _ENTRY_KEYS]
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; an entry has {', '.join(_ENTRY_KEYS)}")
    key, operator, values = raw.get("key"), raw.get("operator"), raw.get("values")
    if not isinstance(key, str) or not isinstance(operator, str):
        raise ValueError(f"{where}: key and operator are required text; e.g. {{key: gpu-type, operator: In}}")
    if values is not None and not isinstance(values, list):
        raise ValueError(f"{where}.values: expected a list, e.g. [a100, h100]")
    try:
        return NodeRequirement(key, operator, tuple(_text(v) for v in values or ()), field)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _text(value: Any) -> str:
    # YAML reads `values: [4]` as a number; a value is text to Kubernetes.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"value {value!r} is not text; quote it")
    return value


def node_affinity(
    terms: tuple[NodeSelectorTerm, ...], selector: Mapping[str, str] | None = None
) -> NodeAffinity | None:
    """The task's constraint from its terms and own nodeSelector pairs; None for neither."""
    if not terms and not selector:
        return None
    return NodeAffinity.of(terms, selector)
