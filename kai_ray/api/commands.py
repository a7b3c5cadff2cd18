"""Subcommands of `kai-ray` for a running Ray cluster: queues, status, explain, jobs, demo.

Ray is imported inside the commands only, so `kai-ray scenario ...` and the other
subcommands start fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["add_commands"]

EXIT_ERROR = 2


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_queue(subparsers)
    status = subparsers.add_parser("status", help="nodes, queues and workloads of the scheduler")
    _common(status)
    status.set_defaults(func=_status)
    explain = subparsers.add_parser("explain", help="why a workload waits, where it is in line")
    explain.add_argument("workload", help="workload id (see `kai-ray job list`, `kai-ray status`)")
    _common(explain)
    explain.set_defaults(func=_explain)
    cancel = subparsers.add_parser("cancel", help="cancel a workload (releases its reservation)")
    cancel.add_argument("workload")
    _common(cancel)
    cancel.set_defaults(func=_cancel)
    _add_job(subparsers)
    demo = subparsers.add_parser(
        "demo",
        help="start a local multi-node Ray cluster with fake GPUs and show queues, "
        "fair share and preemption end to end",
    )
    demo.add_argument("--quick", action="store_true", help="shorter waits (for tests)")
    demo.set_defaults(func=_demo)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS or the local cluster)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _add_queue(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    queue = subparsers.add_parser("queue", help="queue administration")
    sub = queue.add_subparsers(title="queue commands", metavar="COMMAND")
    apply = sub.add_parser("apply", help="replace the queue tree with the queues of a file")
    apply.add_argument("-f", "--file", required=True, help="queues YAML (kai-ray or KAI format)")
    _common(apply)
    apply.set_defaults(func=_queue_apply)
    listing = sub.add_parser("list", help="quota, fair share, allocated and pending per queue")
    _common(listing)
    listing.set_defaults(func=_queue_list)
    queue.set_defaults(func=lambda a: _usage(queue))


def _add_job(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    job = subparsers.add_parser("job", help="Ray Jobs queued by kai-ray")
    sub = job.add_subparsers(title="job commands", metavar="COMMAND")
    submit = sub.add_parser(
        "submit",
        help="queue a Ray job; it is submitted to Ray once admitted",
        usage="kai-ray job submit --queue Q [--priority P] [--gpus N] ... -- CMD [ARGS...]",
    )
    submit.add_argument("--queue", required=True)
    submit.add_argument("--priority", default="train", help="class name or integer")
    submit.add_argument("--gpus", type=float, default=0.0, help="GPUs per worker (0.5 = half)")
    submit.add_argument("--cpus", type=float, default=1.0, help="CPUs per worker")
    submit.add_argument("--workers", type=int, default=1, help="bundles in the reservation")
    submit.add_argument("--min-workers", type=int, default=0, help="elastic: the gang size")
    submit.add_argument("--resources", default="{}", help='other resources, JSON: {"x": 1}')
    submit.add_argument(
        "--strategy",
        default="PACK",
        type=str.upper,
        help="PACK (default), SPREAD (a node per worker when possible), "
        "STRICT_PACK (one node), STRICT_SPREAD (a node per worker)",
    )
    submit.add_argument(
        "--grace-period", type=float, default=10.0, help="seconds between the preemption notice and the stop"
    )
    submit.add_argument("--name", default="")
    submit.add_argument("--working-dir", default=None, help="runtime_env working_dir")
    submit.add_argument(
        "--handoff",
        action="store_true",
        help="release the reservation to the job once admitted (Ray Train, "
        "Ray Serve: they reserve their own; kai-ray keeps the accounting)",
    )
    submit.add_argument("entrypoint", nargs=argparse.REMAINDER, help="-- the command to run")
    _common(submit)
    submit.set_defaults(func=_job_submit)
    listing = sub.add_parser("list", help="jobs and where they stand")
    _common(listing)
    listing.set_defaults(func=_job_list)
    job.set_defaults(func=lambda a: _usage(job))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return EXIT_ERROR


def _fail(message: str) -> int:
    print(f"kai-ray: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _connect(address: str | None, start: bool = False) -> Any:
    """The scheduler client for the cluster at `address`; None when none runs."""
    import ray

    from kai_ray.api.client import get_scheduler

    if not ray.is_initialized():
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or "auto",
            logging_level=logging.ERROR,
            log_to_driver=False,
        )
    try:
        return get_scheduler()
    except ValueError:
        return None


_NO_SCHEDULER = (
    "no kai-ray scheduler runs on this cluster; start one with "
    "`kai-ray queue apply -f QUEUES.yaml` or kai_ray.init() in a driver"
)


def _print(args: argparse.Namespace, data: Any, text: str) -> int:
    print(json.dumps(data, indent=2, default=str) if args.json else text)
    return 0


# ---------------------------------------------------------------- queues / views


def _queue_apply(args: argparse.Namespace) -> int:
    from kai_ray.config import load_queues

    queues = load_queues(args.file)  # a bad file: ConfigError, exit 2, nothing changed
    sched = _connect(args.address)
    if sched is None:
        import kai_ray

        kai_ray.init(address=args.address or "auto", queues=queues)
        print(f"started the kai-ray scheduler with {len(queues)} queues")
        return 0
    names = sched.apply_queues(queues)
    return _print(args, names, f"applied {len(names)} queues: {', '.join(names)}")


def _queue_list(args: argparse.Namespace) -> int:
    from kai_ray.api.render import queue_table

    sched = _connect(args.address)
    if sched is None:
        return _fail(_NO_SCHEDULER)
    rows = sched.queues()
    return _print(args, rows, queue_table(rows))


def _status(args: argparse.Namespace) -> int:
    from kai_ray.api.render import status_text, workload_table

    sched = _connect(args.address)
    if sched is None:
        return _fail(_NO_SCHEDULER)
    status = sched.status()
    live = sched.list(include_finished=False)
    status["live_workloads"] = live
    text = status_text(status) + ("\n\n" + workload_table(live) if live else "")
    return _print(args, status, text)


def _explain(args: argparse.Namespace) -> int:
    from kai_ray.api.render import explain_text

    return _on_workload(args, lambda sched: sched.explain(args.workload), explain_text)


def _cancel(args: argparse.Namespace) -> int:
    return _on_workload(
        args, lambda sched: sched.cancel(args.workload), lambda info: f"{info['id']}: {info['state']}"
    )


def _on_workload(
    args: argparse.Namespace,
    call: Callable[[Any], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """A command on one workload: an unknown id is a clear error, not a traceback."""
    sched = _connect(args.address)
    if sched is None:
        return _fail(_NO_SCHEDULER)
    try:
        info = call(sched)
    except KeyError as exc:
        return _fail(str(exc.args[0]))
    return _print(args, info, render(info))


# ---------------------------------------------------------------- jobs


def _job_submit(args: argparse.Namespace) -> int:
    from kai_ray.api.workloads import make_spec
    from kai_ray.config import UnknownPriorityClassError
    from kai_ray.ray.engine import SubmitError

    command = args.entrypoint[1:] if args.entrypoint[:1] == ["--"] else args.entrypoint
    if not command:
        return _fail("job submit: give the command after --, e.g. -- python train.py")
    try:
        extra = json.loads(args.resources)
        resources = {"CPU": args.cpus, **({"GPU": args.gpus} if args.gpus else {}), **extra}
        runtime_env = {"working_dir": os.path.abspath(args.working_dir)} if args.working_dir else {}
        spec = make_spec(
            args.queue,
            _priority(args.priority),
            kind="job",
            workers=args.workers,
            min_workers=args.min_workers,
            resources_per_worker=resources,
            name=args.name,
            strategy=args.strategy,
            grace_period=args.grace_period,
            entrypoint=" ".join(command),
            runtime_env=runtime_env,
            handoff=args.handoff,
        )
    except (json.JSONDecodeError, UnknownPriorityClassError) as exc:
        return _fail(f"job submit: {exc}")
    sched = _connect(args.address)
    if sched is None:
        return _fail(_NO_SCHEDULER)
    try:
        wid = sched.submit(spec)
    except SubmitError as exc:
        return _fail(f"job submit: {exc}")
    info = sched.info(wid)
    return _print(
        args, info, f"queued {wid} in {args.queue} ({info['state']}); follow it with `kai-ray explain {wid}`"
    )


def _priority(text: str) -> str | int:
    return int(text) if text.lstrip("-").isdigit() else text


def _job_list(args: argparse.Namespace) -> int:
    from kai_ray.api.render import table

    sched = _connect(args.address)
    if sched is None:
        return _fail(_NO_SCHEDULER)
    jobs = [w for w in sched.list() if w["kind"] == "job"]
    rows = [
        [
            w["id"],
            w["queue"],
            str(w["priority"]),
            w["state"],
            str(w["position"] or "-"),
            w["submission_id"] or "-",
            w["reason"][:60],
        ]
        for w in jobs
    ]
    text = table(["ID", "QUEUE", "PRIO", "STATE", "POS", "RAY JOB", "REASON"], rows)
    return _print(args, jobs, text)


def _demo(args: argparse.Namespace) -> int:
    from kai_ray.api.demo import run_demo

    return run_demo(quick=args.quick)
