"""`kai-ray demo`: the Ray story (kai_ray.api.demo), or with --kubernetes the KubeRay story
on a local Kubernetes API server (kubedemo.py). Here, above both, because the Kubernetes
story starts the test cluster's components."""

from __future__ import annotations

import argparse
import signal

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="start a local multi-node Ray cluster with fake GPUs and show queues, "
        "fair share and preemption end to end (--kubernetes: the KubeRay story)",
    )
    demo.add_argument("--quick", action="store_true", help="shorter waits (for tests)")
    demo.add_argument(
        "--kubernetes",
        action="store_true",
        help="the KubeRay story instead, on a local Kubernetes API server with KubeRay's operator "
        "(components built on first use)",
    )
    demo.add_argument("--port", type=int, default=8270, help="the dashboard's port (--kubernetes)")
    demo.add_argument(
        "--no-ray",
        action="store_true",
        help="--kubernetes without live Ray in the pods (faster; the service is not deployed)",
    )
    demo.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    # Ctrl-C stops the demo and everything it started, wherever it was started from: a
    # non-interactive shell starts a command it runs in the background (`cmd &`) with
    # SIGINT ignored, and Python then never raises KeyboardInterrupt; a user's Ctrl-C
    # (or a test's SIGINT) would be lost and the story would run on to its end.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.kubernetes:
        from kai_ray.testing.kubedemo import run_kubernetes_demo

        return run_kubernetes_demo(quick=args.quick, port=args.port, ray=not args.no_ray)
    from kai_ray.api.demo import run_demo

    return run_demo(quick=args.quick)
