"""GPU sharing on Kubernetes: a pod asking for part of a GPU (`gpu-fraction: "0.5"` or
`gpu-memory: "20000"`, as KAI users write them) is bound to a node and a device the core
chose; it must also learn which device, and that device must be kept from anyone who asks
for a whole GPU. The same way as KAI:

- a **reservation pod** per shared device, in the namespace `kai-ray-reservation`, asks
  for `nvidia.com/gpu: 1` on that node: the device plugin gives it a whole device, which
  no whole-GPU pod of any scheduler can then get; its container (the chart's image) writes
  the device it got into its own annotation `kai-ray.io/gpu-device`;
- a **mutating webhook** gives each sharing pod, when it is created, an id (annotation
  `kai-ray.io/gpu-share`) and `envFrom` a ConfigMap named after it, which the operator
  fills at bind time with `NVIDIA_VISIBLE_DEVICES` (the reservation's device) and
  `GPU_PORTION`. The kubelet starts the container once the ConfigMap exists.

The operator deletes a reservation pod once no sharing pod is bound to its device.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Collection, Iterable, Mapping
from typing import Any

__all__ = [
    "DEVICE_ANNOTATION",
    "GPU_GROUP_ANNOTATION",
    "RESERVATION_LABEL",
    "RESERVATION_NS",
    "SHARE_ANNOTATION",
    "config_map",
    "device_of",
    "idle_reservations",
    "is_reservation",
    "mutate",
    "reservation_name",
    "reservation_pod",
    "share_id",
    "wanted_reservations",
]

RESERVATION_NS = "kai-ray-reservation"
RESERVATION_LABEL = "kai-ray.io/gpu-reservation"  # value: "<node>.<device index>"
SHARE_ANNOTATION = "kai-ray.io/gpu-share"
DEVICE_ANNOTATION = "kai-ray.io/gpu-device"
_SHARING = ("gpu-fraction", "gpu-memory")
GPU_GROUP_ANNOTATION = "kai-ray.io/gpu-group"  # the device the core gave a sharing pod


def share_id(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(SHARE_ANNOTATION, ""))


def config_map_name(share: str) -> str:
    return f"kai-ray-gpu-share-{share}"


def is_reservation(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return meta.get("namespace") == RESERVATION_NS and RESERVATION_LABEL in (meta.get("labels") or {})


def reservation_name(node: str, device: int) -> str:
    return f"gpu-{node}-{device}"[:253]


def reservation_pod(node: str, device: int, image: str, scheduler: str) -> dict[str, Any]:
    """A pod holding one whole device of `node`, bound there directly."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reservation_name(node, device),
            "namespace": RESERVATION_NS,
            "labels": {RESERVATION_LABEL: f"{node}.{device}"},
        },
        "spec": {
            "nodeName": node,
            "schedulerName": scheduler,
            "priorityClassName": "",
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "reservation",
                    "image": image,
                    "command": ["python", "-m", "kai_ray.k8s.reserve"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {
                            "name": "POD_NAMESPACE",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                    ],
                }
            ],
        },
    }


def device_of(reservation: Mapping[str, Any]) -> str:
    """The device the reservation pod got, once its container has said ("" until then)."""
    return str(((reservation.get("metadata") or {}).get("annotations") or {}).get(DEVICE_ANNOTATION, ""))


def config_map(pod: Mapping[str, Any], device: str, portion: float) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_map_name(share_id(pod)), "namespace": meta["namespace"]},
        "data": {"NVIDIA_VISIBLE_DEVICES": device, "GPU_PORTION": f"{portion:g}"},
    }


def wanted_reservations(
    pods: Iterable[Mapping[str, Any]], device_annotation: str, assumed: Mapping[str, str] | None = None
) -> set[tuple[str, int]]:
    """(node, device) of every live sharing pod bound or being bound (`assumed`: pod uid
    -> node of bindings sent, not seen yet): the devices to hold."""
    wanted: set[tuple[str, int]] = set()
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        group = (meta.get("annotations") or {}).get(device_annotation)
        node = spec.get("nodeName") or (assumed or {}).get(meta.get("uid", ""))
        phase = (pod.get("status") or {}).get("phase")
        if group is not None and node and phase not in ("Succeeded", "Failed") and not is_reservation(pod):
            wanted.add((node, int(group)))
    return wanted


def idle_reservations(
    pods: Iterable[Mapping[str, Any]], assumed: Mapping[str, str]
) -> list[Mapping[str, Any]]:
    """Reservation pods holding a device that no sharing pod uses (any more, or yet): the
    device is still taken until they are deleted, so it counts as used."""
    pods = list(pods)
    wanted = {reservation_name(n, d) for n, d in wanted_reservations(pods, GPU_GROUP_ANNOTATION, assumed)}
    return [p for p in pods if is_reservation(p) and p["metadata"]["name"] not in wanted]


# ---------------------------------------------------------------- the webhook


def mutate(review: Mapping[str, Any], scheduler_names: Collection[str]) -> dict[str, Any]:
    """An AdmissionReview (admission.k8s.io/v1) answered: a sharing pod of ours gets its
    share id and `envFrom` its ConfigMap in every container; any other pod is let through
    unchanged. Never refuses a pod."""
    request = review.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    pod = request.get("object") or {}
    patch = _share_patch(pod, scheduler_names)
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _share_patch(pod: Mapping[str, Any], scheduler_names: Collection[str]) -> list[dict[str, Any]]:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    if spec.get("schedulerName") not in scheduler_names or not any(a in annotations for a in _SHARING):
        return []
    if SHARE_ANNOTATION in annotations:
        return []  # already given (a retried admission)
    share = uuid.uuid4().hex[:16]
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": f"/metadata/annotations/{_escape(SHARE_ANNOTATION)}", "value": share}
    ]
    source = {"configMapRef": {"name": config_map_name(share)}}
    for i, container in enumerate(spec.get("containers") or []):
        if container.get("envFrom"):
            ops.append({"op": "add", "path": f"/spec/containers/{i}/envFrom/-", "value": source})
        else:
            ops.append({"op": "add", "path": f"/spec/containers/{i}/envFrom", "value": [source]})
    return ops


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
