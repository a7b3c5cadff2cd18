"""`kai-ray snapshot save FILE`: the live scheduler's state as a snapshot file, which
`kai-ray sim --snapshot FILE` replays (docs/simulator.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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
        "and writes it as JSON. On Kubernetes the scheduler actor runs in the controller Ray cluster: "
        "point --address at it.",
    )
    save.add_argument("file", help="the snapshot file to write (JSON)")
    save.add_argument(
        "--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS or the local cluster)"
    )
    save.add_argument(
        "--kubeconfig",
        help="not supported: the operator keeps no scheduler state of its own; use --address with the "
        "controller Ray cluster instead",
    )
    save.set_defaults(func=_save)


def _save(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        raise CommandFailed(
            "--kubeconfig: the operator holds no scheduler state of its own (the scheduler actor in the "
            "controller Ray cluster does); run `kai-ray snapshot save FILE --address ray://CONTROLLER:10001`"
        )
    document = running_scheduler(args.address).snapshot()
    path = Path(args.file)
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    jobs, nodes = len(document["jobs"]), len(document["nodes"])
    print(f"{path}: {nodes} nodes, {len(document['queues'])} queues, {jobs} live workloads")
    return 0
