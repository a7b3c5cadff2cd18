"""The GPU types a Kubernetes gang accepts, read from its pods: pure reading of the pods'
JSON (no client, no I/O), shared by the Kubernetes backend (kai_ray.k8s.gangs) and the
reader of KAI's snapshots (kai_ray.control.kaijobs).

A node's type is the value of one label (nvidia.com/gpu.product unless the operator is
told another, kai_ray.control.kubenodes). A pod names the types it accepts with a
nodeSelector on that label (one type) or a required node affinity `In` on it (several,
most preferred first, in the order written). The core already keeps each pod to its own
selector and affinity; the types read here tell it which types the gang as a whole may
run on, so that it places the gang on one of them (the first with room).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kai_ray.control.affinity import read_terms
from kai_ray.control.podrequests import pod_request

__all__ = ["gang_gpu_types", "pod_gpu_types"]

Obj = Mapping[str, Any]


def pod_gpu_types(pod: Obj, label: str) -> tuple[str, ...] | None:
    """The types this pod accepts, in its order of preference; None when it names none
    (any type). Affinity Kubernetes would refuse is read as naming none: the gang's reader
    reports the mistake itself."""
    spec = pod.get("spec") or {}
    selected = (spec.get("nodeSelector") or {}).get(label)
    in_terms = _affinity_types(spec, label)
    if selected is None:
        return in_terms
    selected = str(selected)
    if in_terms is None or selected in in_terms:
        return (selected,)
    return ()  # the selector and the affinity disagree: no type will do


def _affinity_types(spec: Obj, label: str) -> tuple[str, ...] | None:
    """The types a pod's required node affinity admits (None: any). A node meeting any
    one term is admitted, so the terms' types add up; a term that does not restrict the
    type admits any."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not isinstance(required, Mapping):
        return None
    try:
        terms = read_terms(required.get("nodeSelectorTerms"), "nodeSelectorTerms")
    except ValueError:
        return None
    admitted: list[str] = []
    for term in terms:
        # Only `In` lists the types; NotIn, Exists and the like leave them open.
        lists = [r.values for r in term.expressions if r.key == label and r.operator == "In"]
        if not lists:
            return None
        admitted += [t for t in _common(lists) if t not in admitted]
    return tuple(admitted)


def gang_gpu_types(pods: Iterable[Obj], label: str) -> tuple[tuple[str, ...], bool]:
    """(the types the gang accepts, most preferred first (empty: any); whether the gang
    must span types). Read from the pods that ask for a GPU: the types all of them accept,
    in the first one's order. When they accept no type in common (a head on L4s, workers
    on H100s, say) the gang can only run across types: it is given every type named and
    told it spans them."""
    named = [t for t in (pod_gpu_types(p, label) for p in pods if _wants_gpu(p)) if t is not None]
    if not named:
        return (), False
    common = _common(named)
    if common:
        return common, False
    spanned: list[str] = []
    for types in named:
        spanned += [t for t in types if t not in spanned]
    return tuple(spanned), True


def _common(lists: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The values in every list, in the first list's order."""
    return tuple(t for t in lists[0] if all(t in other for other in lists[1:]))


def _wants_gpu(pod: Obj) -> bool:
    try:
        request = pod_request(pod)
    except ValueError:  # requests the gang's reader refuses (and reports) on its own
        return False
    return request.gpu > 0 or request.gpu_memory > 0
