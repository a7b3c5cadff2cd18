"""What the `kai-ray` subcommands for a running Ray cluster share: options, connecting,
printing, and errors as one line with exit status 2."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "EXIT_ERROR",
    "NO_SCHEDULER",
    "CommandFailed",
    "add_common",
    "add_token",
    "connect",
    "fail",
    "on_workload",
    "output",
    "running_scheduler",
    "usage",
    "with_token",
]

EXIT_ERROR = 2
NO_SCHEDULER = (
    "no kai-ray scheduler runs on this cluster; start one with "
    "`kai-ray start [--queues QUEUES.yaml]` (or kai_ray.init() in a driver)"
)


class CommandFailed(Exception):
    """A command cannot do what was asked; the message says why and what to do. The
    `kai-ray` entry point prints it as one line and exits with status 2."""


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS or the local cluster)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_token(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token",
        default=None,
        help="your tenant's (or an admin's) token, where the scheduler has tenants "
        "(default: $KAI_RAY_TOKEN); see `kai-ray tenant --help`",
    )


def usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return EXIT_ERROR


def fail(message: str) -> int:
    print(f"kai-ray: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def connect_ray(address: str | None) -> None:
    """Connect this process to the Ray cluster (quietly: this is a command line)."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or "auto",
            logging_level=logging.ERROR,
            log_to_driver=False,
        )


def connect(address: str | None) -> Any:
    """The scheduler client for the cluster at `address` (its token: $KAI_RAY_TOKEN);
    None when none runs."""
    from kai_ray.api.client import SchedulerNotRunning, get_scheduler

    connect_ray(address)
    try:
        return get_scheduler()
    except SchedulerNotRunning:
        return None


def with_token(sched: Any, token: str | None) -> Any:
    """The client carrying `--token` when one was given (else $KAI_RAY_TOKEN's, as it
    was); a client of its own, so that the process's shared one keeps its token."""
    if sched is None or not token or token == sched.token:
        return sched
    return type(sched)(sched.handle, token)


def running_scheduler(address: str | None) -> Any:
    """The scheduler client for the cluster at `address`; CommandFailed when none runs."""
    sched = connect(address)
    if sched is None:
        raise CommandFailed(NO_SCHEDULER)
    return sched


def output(args: argparse.Namespace, data: Any, text: str) -> int:
    print(json.dumps(data, indent=2, default=str) if args.json else text)
    return 0


def on_workload(
    args: argparse.Namespace,
    call: Callable[[Any], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """A command on one workload: an unknown id is a clear error, not a traceback."""
    sched = with_token(running_scheduler(args.address), getattr(args, "token", None))
    try:
        info = call(sched)
    except KeyError as exc:
        raise CommandFailed(str(exc.args[0])) from None
    return output(args, info, render(info))
