"""GPU discovery with NVML: model and memory of each device of a node.

Ray counts GPUs but knows neither their model nor their memory, which fractional
requests by GPU memory need. The scheduler runs `probe_node` once on each new GPU node
(a zero-CPU task pinned to it); where NVML is missing (no driver, fake GPUs) it returns
no devices and the node's labels, or an 80 GiB default, stand in.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["local_gpus", "summarize"]

log = logging.getLogger(__name__)


def _nvml() -> Any:
    """pynvml (nvidia-ml-py), or the copy Ray ships, or None."""
    try:
        import pynvml

        return pynvml
    except ImportError:
        pass
    try:
        from ray._private.thirdparty import pynvml as vendored

        return vendored
    except ImportError:
        return None


def local_gpus() -> list[dict[str, Any]]:
    """This machine's GPUs: [{"index", "model", "memory" (bytes), "uuid"}]; [] without NVML."""
    nvml = _nvml()
    if nvml is None:
        return []
    try:
        nvml.nvmlInit()
    except Exception as exc:  # no driver: not an error, just no GPUs to describe
        log.debug("NVML unavailable: %s", exc)
        return []
    try:
        devices = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(handle)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            devices.append(
                {
                    "index": i,
                    "model": name.decode() if isinstance(name, bytes) else str(name),
                    "memory": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                    "uuid": uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                }
            )
        return devices
    finally:
        nvml.nvmlShutdown()


def summarize(devices: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the core's NodeInfo takes (one model and memory per node): the smallest
    device's memory, so that a memory-sized request fits whichever device it lands on."""
    if not devices:
        return None
    smallest = min(devices, key=lambda d: d["memory"])
    return {"model": smallest["model"], "memory": smallest["memory"], "count": len(devices)}
