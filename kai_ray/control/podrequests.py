"""What a pod asks for, by Kubernetes' rules, with KAI's GPU-sharing annotations.

Pure reading of a pod's JSON (no client, no I/O): the Kubernetes backend (kai_ray.k8s,
which re-exports it as kai_ray.k8s.requests) and the reader of KAI's own snapshots
(kai_ray.control.kaisnapshot) share this one rule.

Kubernetes' effective request: the app containers (and restartable init containers,
sidecars) summed, against the largest init step, plus the pod's overhead; a resource
given only as a limit is requested at its limit. `gpu-fraction` (0 < f < 1) or
`gpu-memory` (MiB of one device) turn the pod into a share of one device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from kai_ray.core.model.quantity import QuantityError, parse_quantity
from kai_ray.core.model.snapshot import Request

__all__ = [
    "GPU_FRACTION",
    "GPU_FRACTION_DEVICES",
    "GPU_MEMORY",
    "GPU_RESOURCE",
    "pod_request",
    "spec_request",
]

Obj = Mapping[str, Any]
GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
GPU_FRACTION_DEVICES = "gpu-fraction-num-devices"
GPU_RESOURCE = "nvidia.com/gpu"


def _ignored(resource: str) -> bool:
    # Not placement resources for this scheduler: node-local disk and huge pages.
    return resource == "ephemeral-storage" or resource.startswith("hugepages-")


def _container(container: Obj, what: str, kind: str = "container") -> dict[str, float]:
    resources = container.get("resources") or {}
    # Kubernetes defaults a resource's request from its limit when only the limit is set.
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return _quantities(merged, f"{what}: {kind} {container.get('name', '?')!r}")


def _quantities(values: Obj, what: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for resource, quantity in values.items():
        if _ignored(resource):
            continue
        try:
            out[resource] = parse_quantity(quantity)
        except QuantityError as e:
            raise ValueError(f"{what}: {resource}: {e}") from None
    return out


def _add(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in a.keys() | b.keys()}


def _max(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    return {k: max(a.get(k, 0.0), b.get(k, 0.0)) for k in a.keys() | b.keys()}


def _effective(spec: Obj, what: str) -> dict[str, float]:
    """Kubernetes' effective pod request: max(app containers + sidecars, each init step) + overhead.

    A restartable init container (restartPolicy Always, a sidecar) keeps running beside the
    init containers after it and beside the app, so it adds to both.
    """
    containers = spec.get("containers") or []
    if len(containers) == 1 and not spec.get("initContainers") and not spec.get("overhead"):
        return _container(containers[0], what)  # most pods: one container, nothing to add
    app: dict[str, float] = {}
    for container in containers:
        app = _add(app, _container(container, what))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for container in spec.get("initContainers") or []:
        request = _container(container, what, "init container")
        if container.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, request)
        else:
            init_peak = _max(init_peak, _add(request, sidecars))
    total = _max(_add(app, sidecars), init_peak)
    return _add(total, _quantities(spec.get("overhead") or {}, f"{what}: spec.overhead"))


# KAI's GPU-sharing annotations: what each accepts, and the words that say so.
_SHARE_RULES: dict[str, tuple[Callable[[float], bool], str]] = {
    GPU_FRACTION_DEVICES: (
        lambda v: v == 1,
        "a fraction of several devices is not supported; remove it or set it to 1",
    ),
    GPU_FRACTION: (
        lambda v: 0 < v < 1,
        f"it must be a number between 0 and 1 (exclusive); for whole devices request {GPU_RESOURCE}",
    ),
    GPU_MEMORY: (lambda v: v > 0, "it must be a number of MiB of one device, above 0"),
}


def _annotation(annotations: Obj, key: str, what: str) -> float | None:
    """A GPU-sharing annotation's number, None when absent; ValueError naming the pod and the rule."""
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan  # fails every rule, so the message says what is accepted
    valid, rule = _SHARE_RULES[key]
    if not (math.isfinite(value) and valid(value)):
        raise ValueError(f"{what}: annotation {key} is {raw!r}: {rule}")
    return value


def _gpu_share(annotations: Obj, whole_gpus: float, what: str) -> tuple[float, float] | None:
    """(gpu, gpu_memory) from KAI's GPU-sharing annotations; None when the pod has none."""
    _annotation(annotations, GPU_FRACTION_DEVICES, what)
    fraction = _annotation(annotations, GPU_FRACTION, what)
    mib = _annotation(annotations, GPU_MEMORY, what)
    if fraction is not None and mib is not None:
        raise ValueError(f"{what}: annotations {GPU_FRACTION} and {GPU_MEMORY} are both set: keep one")
    if (fraction is not None or mib is not None) and whole_gpus > 0:
        raise ValueError(
            f"{what}: requests {GPU_RESOURCE} and a GPU share annotation: "
            "ask for whole devices or a share of one, not both"
        )
    if fraction is not None:
        return fraction, 0.0
    return None if mib is None else (0.0, mib * 2**20)


def spec_request(spec: Obj, annotations: Obj, what: str) -> Request:
    """A pod spec's request (`what` names the pod in errors); ValueError when unreadable."""
    totals = _effective(spec, what)
    gpu = totals.pop(GPU_RESOURCE, 0.0)
    cpu, memory = totals.pop("cpu", 0.0), totals.pop("memory", 0.0)
    share = _gpu_share(annotations, gpu, what)
    gpu, gpu_memory = share if share is not None else (gpu, 0.0)
    extended = tuple(sorted((k, v) for k, v in totals.items() if v))
    return Request(gpu=gpu, gpu_memory=gpu_memory, cpu=cpu, memory=memory, extended=extended)


# A pod's resources cannot change once it exists, so its request is read once per pod
# (and per value of the annotations that make it a GPU share), not once per cycle.
_REQUESTS: dict[tuple[str, str, str, str], Request] = {}
_REQUESTS_MAX = 200_000


def pod_request(pod: Obj) -> Request:
    """What the pod asks for; ValueError (naming the pod) for requests that cannot be read."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    uid = str(meta.get("uid") or "")
    key = (
        uid,
        str(annotations.get(GPU_FRACTION)),
        str(annotations.get(GPU_MEMORY)),
        str(annotations.get(GPU_FRACTION_DEVICES)),
    )
    if uid and key in _REQUESTS:
        return _REQUESTS[key]
    what = f"pod {meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    request = spec_request(pod.get("spec") or {}, annotations, what)
    if uid:
        if len(_REQUESTS) >= _REQUESTS_MAX:
            _REQUESTS.clear()
        _REQUESTS[key] = request
    return request
