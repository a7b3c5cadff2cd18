"""`kai-ray operator`: schedule the pods of KubeRay (and any pod whose schedulerName is
ours) on a Kubernetes cluster."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kai_ray.operators import DEFAULT_SCHEDULER_NAMES

if TYPE_CHECKING:
    from kai_ray.operators.client import Kube

__all__ = ["CRD_DIR", "add_commands", "install_crds"]

CRD_DIR = Path(__file__).with_name("crds")


def add_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "operator",
        help="schedule KubeRay's pods (and any pod with our schedulerName) on Kubernetes",
        description=(
            "Watch a Kubernetes cluster and schedule every pod whose spec.schedulerName is one of "
            "ours: gangs of RayClusters, RayJobs and RayServices, and plain pods, by queues, "
            "priority and fair share. Level-triggered: a restart rebuilds everything from the API "
            "server."
        ),
    )
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
        "or the pod's service account in a cluster)",
    )
    p.add_argument("--context", help="kubeconfig context (default: its current-context)")
    p.add_argument(
        "--scheduler-name",
        action="append",
        dest="scheduler_names",
        metavar="NAME",
        help=f"a schedulerName to answer to; repeat for several (default: "
        f"{', '.join(DEFAULT_SCHEDULER_NAMES)})",
    )
    p.add_argument(
        "--default-queue",
        default="default-queue",
        help="queue of pods without a kai.scheduler/queue label (default: default-queue)",
    )
    p.add_argument("--config", help="scheduler settings file (actions, placement, topologies)")
    p.add_argument("--install-crds", action="store_true", help="create or update kai-ray's CRDs first")
    p.add_argument("-v", "--verbose", action="store_true", help="log every cycle")
    p.set_defaults(func=_operator)


def _operator(args: argparse.Namespace) -> int:
    from kai_ray.operators.client import Kube, load_kubeconfig
    from kai_ray.operators.operator import Operator, OperatorOptions

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = OperatorOptions(
        scheduler_names=tuple(args.scheduler_names or DEFAULT_SCHEDULER_NAMES),
        default_queue=args.default_queue,
    )
    if args.config:
        from kai_ray.config.scheduler import load_scheduler_config

        options.config = load_scheduler_config(args.config)
    config = load_kubeconfig(args.kubeconfig, args.context)

    async def run() -> None:
        async with Kube(config) as kube:
            if args.install_crds:
                await install_crds(kube)
            operator = Operator(kube, options)
            logging.getLogger(__name__).info(
                "kai-ray operator on %s, answering to schedulerName %s",
                config.server,
                ", ".join(options.scheduler_names),
            )
            await operator.run()

    asyncio.run(run())
    return 0


async def install_crds(kube: Kube) -> None:
    """Create kai-ray's CRDs, or update them to this version's schema."""
    from kai_ray.operators.client import ApiError

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
