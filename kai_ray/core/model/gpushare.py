"""A task's charge on GPUs: the one rule, for every place that sizes it.

A request asks for whole devices (`gpu` >= 1), or for part of one device that it shares
with other tasks: a fraction (0 < `gpu` < 1) or a slice of the device's memory
(`gpu_memory` bytes). Its charge:

- at node level, its whole devices (`whole_devices`); a request that shares a device
  takes none there (the device it opens counts as one used whole device, cluster.py);
- on the device it shares, its *share* of that device (`device_share`): a memory slice
  takes its bytes over the device's usable memory (above 1 on a device too small: it
  fits none, and counts so against its queue until placed, as KAI counts it), and the
  whole device where the device's memory is unknown (0); a fraction takes its `gpu`
  figure on any device (`fixed_share`: the share when no device decides it).

A device's usable memory is its memory floored to whole hundreds of MiB, as KAI reads a
node's GPU memory (so that no two slices of a device ever come to the same bytes): on an
80 GiB device (81,920 MiB, usable 81,900) four 20 GiB slices do not fit, three do.

The share is what placing a task takes from its device (cluster.charge_device,
statement.py), what a node must have room for (placement.py, vectorised:
`device_shares`; emptyfit.py), what the task counts against its queue
(ClusterState.queue_amount), and what the control plane says admitted workloads hold
and checks one worker against (control/snapshot.py, control/validate.py). For the
backends, `Request.gpu_fraction` is `device_share`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "GpuAsk",
    "device_share",
    "device_shares",
    "fixed_share",
    "shares_device",
    "usable_memories",
    "usable_memory",
    "whole_devices",
]

FloatArray = npt.NDArray[np.float64]
_MEMORY_STEP = 100 * 1024**2  # bytes: KAI floors a device's memory to hundreds of MiB


def usable_memory(device_memory: float) -> float:
    """The bytes of a device that memory slices may take (KAI's floor, above)."""
    return device_memory - device_memory % _MEMORY_STEP


def usable_memories(device_memory: FloatArray) -> FloatArray:
    """`usable_memory` of each device."""
    return device_memory - np.mod(device_memory, _MEMORY_STEP)


class GpuAsk(Protocol):
    """What of a request the rule reads (model.Request has both; the model calls this
    module, so it is named here rather than imported)."""

    @property
    def gpu(self) -> float: ...

    @property
    def gpu_memory(self) -> float: ...


def shares_device(request: GpuAsk) -> bool:
    """Takes part of one device, shared with others (a fraction or a memory slice)."""
    return request.gpu_memory > 0 or 0 < request.gpu < 1


def whole_devices(request: GpuAsk) -> float:
    """The whole devices the request takes at node level (none when it shares one)."""
    return 0.0 if shares_device(request) else request.gpu


def fixed_share(request: GpuAsk) -> float | None:
    """The request's share of a device when no device decides it (its `gpu` figure);
    None for a memory slice, whose share depends on the device's memory."""
    return None if request.gpu_memory > 0 else request.gpu


def device_share(request: GpuAsk, device_memory: float) -> float:
    """The share of one device with `device_memory` bytes that the request takes."""
    if request.gpu_memory > 0:
        usable = usable_memory(device_memory)
        return request.gpu_memory / usable if usable > 0 else 1.0
    return request.gpu


def device_shares(request: GpuAsk, device_memory: FloatArray) -> FloatArray | float:
    """`device_share` on each of the devices whose memory is `device_memory`: the same
    rule, element by element (one float when no device decides it)."""
    if request.gpu_memory <= 0:
        return request.gpu
    share = np.ones(len(device_memory))
    usable = usable_memories(device_memory)
    np.divide(request.gpu_memory, usable, out=share, where=usable > 0)
    return share
