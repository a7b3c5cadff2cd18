"""The reservation pod's process (`python -m kai_ray.k8s.reserve`): the device
plugin gave this container a whole GPU; write which one into the pod's own annotation,
where the operator reads it for the pods that share the device, then hold it."""

from __future__ import annotations

import asyncio
import os
import signal

from kai_ray.k8s.client import Kube, load_kubeconfig
from kai_ray.k8s.sharing import DEVICE_ANNOTATION


async def _announce() -> None:
    device = os.environ.get("NVIDIA_VISIBLE_DEVICES", "")
    path = f"/api/v1/namespaces/{os.environ['POD_NAMESPACE']}/pods/{os.environ['POD_NAME']}"
    async with Kube(load_kubeconfig()) as kube:
        await kube.patch(path, {"metadata": {"annotations": {DEVICE_ANNOTATION: device}}})


def main() -> None:
    asyncio.run(_announce())
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main()
