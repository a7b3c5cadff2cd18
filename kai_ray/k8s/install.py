"""kai-ray's CRDs on a cluster: created, or updated to this version's schema."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from kai_ray.k8s.client import ApiError, Kube

__all__ = ["CRD_DIR", "default_queues", "install_crds", "install_default_queues"]

CRD_DIR = Path(__file__).with_name("crds")


async def install_crds(kube: Kube) -> None:
    """Create kai-ray's CRDs, or update them to this version's schema."""
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        try:
            await kube.create(base, crd)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = await kube.get(f"{base}/{name}")
            crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await kube.replace(f"{base}/{name}", crd)
        await _wait_established(kube, f"{base}/{name}")


async def _wait_established(kube: Kube, path: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        crd = await kube.get(path)
        conditions = crd.get("status", {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"CRD {path.rsplit('/', 1)[-1]} not established after {timeout:g}s")


def default_queues(default_queue: str = "default-queue") -> list[dict[str, Any]]:
    """KAI's default queues as kai-ray Queue objects: `default-queue` under
    `default-parent-queue`, each allowed the whole cluster."""
    whole = {r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}
    parent = "default-parent-queue"
    return [
        {
            "apiVersion": "kai-ray.io/v2",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"resources": whole, **spec},
        }
        for name, spec in ((parent, {}), (default_queue, {"parentQueue": parent}))
    ]


async def install_default_queues(kube: Kube, default_queue: str = "default-queue") -> list[str]:
    """When the cluster has no kai-ray Queue at all: KAI's defaults, `default-queue` (the
    queue of pods without a queue label) under `default-parent-queue`, each allowed the
    whole cluster. Returns the names created (none when any Queue exists)."""
    path = "/apis/kai-ray.io/v2/queues"
    if (await kube.get(path)).get("items"):
        return []
    made = []
    for body in default_queues(default_queue):
        try:
            await kube.create(path, body)
            made.append(body["metadata"]["name"])
        except ApiError as exc:
            if exc.status != 409:
                raise
    return made
