"""`kai-ray snapshot save FILE`: the live scheduler's state as a snapshot file, which
`kai-ray sim --snapshot FILE` replays (docs/simulator.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from kai_ray.api.cliutil import CommandFailed, running_scheduler

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snapshot = subparsers.add_parser(
        "snapshot", help="save the scheduler's state for `kai-ray sim --snapshot`"
    )
    sub = snapshot.add_subparsers(dest="snapshot_command", required=True)
    save = sub.add_parser(
        "save",
        help="write the live scheduler's state (nodes, queues, workloads, config) to FILE",
        description="Asks the scheduler actor of the Ray cluster for what its next cycle decides from "
        "and writes it as JSON. On Kubernetes (--kubeconfig) the operator's world is read from the API "
        "server (one list of nodes, pods, their owners, queues and priority classes), as its next "
        "cycle would see it.",
    )
    save.add_argument("file", help="the snapshot file to write (JSON)")
    save.add_argument(
        "--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS or the local cluster)"
    )
    save.add_argument("--kubeconfig", help="read a Kubernetes cluster instead (the operator's view)")
    save.add_argument("--context", help="with --kubeconfig: its context (default: current-context)")
    save.add_argument("--config", help="with --kubeconfig: the operator's scheduler settings file")
    save.add_argument(
        "--default-queue",
        default="default-queue",
        help="with --kubeconfig: queue of pods without a queue label",
    )
    save.set_defaults(func=_save)


def _save(args: argparse.Namespace) -> int:
    document = _from_kubernetes(args) if args.kubeconfig else running_scheduler(args.address).snapshot()
    path = Path(args.file)
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    jobs, nodes = len(document["jobs"]), len(document["nodes"])
    print(f"{path}: {nodes} nodes, {len(document['queues'])} queues, {jobs} live workloads")
    return 0


def _from_kubernetes(args: argparse.Namespace) -> dict[str, Any]:
    """The operator's world as its next cycle would build it, listed once."""
    from kai_ray.control.snapshotfile import write_snapshot
    from kai_ray.core import SchedulerConfig
    from kai_ray.k8s.client import Kube, load_kubeconfig
    from kai_ray.k8s.operator import Operator, OperatorOptions

    config = SchedulerConfig()
    if args.config:
        from kai_ray.config.scheduler import load_scheduler_config

        config = load_scheduler_config(args.config)
    options = OperatorOptions(default_queue=args.default_queue, config=config, dashboard=None)

    try:
        kubeconfig = load_kubeconfig(args.kubeconfig, args.context)
    except (OSError, ValueError) as exc:  # its message names the file and the fix
        raise CommandFailed(str(exc)) from None

    async def read() -> dict[str, Any]:
        async with Kube(kubeconfig) as kube:
            operator = Operator(kube, options)
            await operator.start()  # lists everything, then stops watching
            try:
                now = time.time()
                return write_snapshot(operator.source.observe(now), config, now, "kubernetes")
            finally:
                await operator.stop()

    try:
        return asyncio.run(read())
    except OSError as exc:
        raise CommandFailed(f"--kubeconfig {args.kubeconfig}: cannot reach the API server ({exc})") from None
