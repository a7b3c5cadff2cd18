"""What a pod asks for: the rule lives in kai_ray.control.podrequests, so that the reader
of KAI's snapshots (below the Kubernetes backend) reads pods the same way; the backend's
modules import it from here as before."""

from __future__ import annotations

from kai_ray.control.podrequests import (
    GPU_FRACTION,
    GPU_FRACTION_DEVICES,
    GPU_MEMORY,
    GPU_RESOURCE,
    pod_request,
    spec_request,
)

__all__ = [
    "GPU_FRACTION",
    "GPU_FRACTION_DEVICES",
    "GPU_MEMORY",
    "GPU_RESOURCE",
    "pod_request",
    "spec_request",
]
