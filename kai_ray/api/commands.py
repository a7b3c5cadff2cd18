"""Subcommands of `kai-ray` for a running Ray cluster: start, queues, status, explain,
cancel, demo (jobs: kai_ray.api.jobcommands).

Ray is imported inside the commands only, so `kai-ray scenario ...` and the other
subcommands start fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from kai_ray.api import jobcommands
from kai_ray.api.cliutil import (
    CommandFailed,
    add_common,
    add_token,
    connect,
    fail,
    on_workload,
    output,
    running_scheduler,
    usage,
    with_token,
)

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    start = subparsers.add_parser(
        "start", help="start the kai-ray scheduler on a running Ray cluster (or find it)"
    )
    start.add_argument("--queues", default=None, help="queues YAML to add (kai-ray or KAI format)")
    start.add_argument("--config", default=None, help="scheduler options YAML (placement, kValue, ...)")
    start.add_argument(
        "--tenants",
        default=None,
        help="tenants YAML: each tenant's token hash and labels, and the admins (see "
        "`kai-ray tenant --help`); tokens are checked once it is given",
    )
    start.add_argument(
        "--preemption-delay",
        metavar="DURATION",
        help="while Ray's autoscaler can add nodes, how long a gang that could start only by "
        "evicting running work waits for them first (e.g. 2m; default 0, or the --config file's)",
    )
    start.add_argument(
        "--reserve-after",
        metavar="DURATION",
        help="a gang that has waited this long holds the room it is expected to start on; other work "
        "of its priority or lower uses it only if expected to end first (e.g. 30m; default 0: off, "
        "or the --config file's reserveAfter)",
    )
    add_common(start)
    add_token(start)
    start.set_defaults(func=_start)
    _add_queue(subparsers)
    status = subparsers.add_parser("status", help="nodes, queues and workloads of the scheduler")
    add_common(status)
    status.set_defaults(func=_status)
    explain = subparsers.add_parser("explain", help="why a workload waits, where it is in line")
    explain.add_argument(
        "workload",
        help="workload id (see `kai-ray job list`, `kai-ray status`); on Kubernetes KIND/NAME "
        "(RayCluster/NAME, RayJob/NAME, RayService/NAME, Pod/NAME) with --kubeconfig",
    )
    explain.add_argument("--kubeconfig", help="explain a Kubernetes object (the operator's view)")
    explain.add_argument("-n", "--namespace", default="default", help="its namespace (Kubernetes)")
    add_common(explain)
    explain.set_defaults(func=_explain)
    cancel = subparsers.add_parser("cancel", help="cancel a workload (releases its reservation)")
    cancel.add_argument("workload")
    add_common(cancel)
    add_token(cancel)
    cancel.set_defaults(func=_cancel)
    jobcommands.add_commands(subparsers)


def _add_queue(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    queue = subparsers.add_parser("queue", help="queue administration")
    sub = queue.add_subparsers(title="queue commands", metavar="COMMAND")
    apply = sub.add_parser(
        "apply",
        help="add or update the queues of a file, keeping the others (like kubectl apply)",
    )
    apply.add_argument("-f", "--file", required=True, help="queues YAML (kai-ray or KAI format)")
    apply.add_argument(
        "--prune",
        action="store_true",
        help="also remove queues the file does not name (refused while they hold workloads)",
    )
    add_common(apply)
    add_token(apply)
    apply.set_defaults(func=_queue_apply)
    delete = sub.add_parser("delete", help="remove queues (refused while they hold workloads)")
    delete.add_argument("names", nargs="+", metavar="NAME")
    add_common(delete)
    add_token(delete)
    delete.set_defaults(func=_queue_delete)
    listing = sub.add_parser("list", help="quota, fair share, allocated and pending per queue")
    add_common(listing)
    listing.set_defaults(func=_queue_list)
    queue.set_defaults(func=lambda a: usage(queue))


# ---------------------------------------------------------------- the scheduler


def _start(args: argparse.Namespace) -> int:
    """Start the scheduler actor on the cluster at --address, or find it and add the
    queues given (the others are kept)."""
    import ray

    import kai_ray
    from kai_ray.config import load_queues, load_scheduler_config, with_preemption_delay, with_reserve_after
    from kai_ray.config.tenants import load_tenants
    from kai_ray.control import QueueChangeError

    queues = load_queues(args.queues) if args.queues else None  # bad files: exit 2, nothing started
    config = load_scheduler_config(args.config) if args.config else None
    config = with_preemption_delay(config, args.preemption_delay, "--preemption-delay")
    config = with_reserve_after(config, args.reserve_after, "--reserve-after")
    tenants = load_tenants(args.tenants) if args.tenants else None
    sched = with_token(connect(args.address), args.token)
    said = "already runs"
    if sched is None:
        sched = kai_ray.init(queues=queues, config=config, tenants=tenants, token=args.token)
        said = "started"
    else:
        if tenants is not None:
            said += f"; tenants: {sched.apply_tenants(tenants)['summary']}"
        if queues is not None:
            try:
                said += f"; queues: {sched.apply_queues(queues)['summary']}"
            except QueueChangeError as exc:
                return fail(f"{args.queues}: {exc}")
    if said != "started" and config is not None:
        said += (
            " (--config and --preemption-delay apply when it starts: the running scheduler keeps its options)"
        )
    names = [q["name"] for q in sched.queues()]
    address = ray.get_runtime_context().gcs_address
    return output(
        args,
        {"address": address, "started": said == "started", "queues": names},
        f"kai-ray scheduler {said}\n  Ray cluster: {address}\n  queues: {', '.join(names)}",
    )


# ---------------------------------------------------------------- queues / views


def _queue_apply(args: argparse.Namespace) -> int:
    from kai_ray.config import load_queues
    from kai_ray.control import QueueChangeError

    queues = load_queues(args.file)  # a bad file: ConfigError, exit 2, nothing changed
    sched = with_token(connect(args.address), args.token)
    if sched is None:
        import kai_ray

        kai_ray.init(address=args.address or "auto", queues=queues, token=args.token)
        names = ", ".join(q.name for q in queues)
        return output(args, {"added": [q.name for q in queues]}, f"started the kai-ray scheduler: {names}")
    try:
        change = sched.apply_queues(queues, prune=args.prune)
    except QueueChangeError as exc:
        return fail(f"{args.file}: {exc}")
    return output(args, change, f"queues: {change['summary']}")


def _queue_delete(args: argparse.Namespace) -> int:
    from kai_ray.control import QueueChangeError

    sched = with_token(running_scheduler(args.address), args.token)
    try:
        change = sched.delete_queues(args.names)
    except QueueChangeError as exc:
        return fail(str(exc))
    return output(args, change, f"queues: {change['summary']}")


def _queue_list(args: argparse.Namespace) -> int:
    from kai_ray.api.render import queue_table

    sched = running_scheduler(args.address)
    rows = sched.queues()
    return output(args, rows, queue_table(rows))


def _status(args: argparse.Namespace) -> int:
    from kai_ray.api.render import status_text, workload_table

    sched = running_scheduler(args.address)
    status = sched.status()
    live = sched.list(include_finished=False)
    status["live_workloads"] = live
    text = status_text(status) + ("\n\n" + workload_table(live) if live else "")
    return output(args, status, text)


def _explain(args: argparse.Namespace) -> int:
    from kai_ray.api.render import explain_text

    if args.kubeconfig:
        return _explain_kubernetes(args)
    return on_workload(args, lambda sched: sched.explain(args.workload), explain_text)


def _explain_kubernetes(args: argparse.Namespace) -> int:
    import asyncio

    from kai_ray.k8s.client import load_kubeconfig
    from kai_ray.k8s.explain import explain_object

    try:
        text = asyncio.run(explain_object(load_kubeconfig(args.kubeconfig), args.workload, args.namespace))
    except (LookupError, FileNotFoundError) as exc:
        raise CommandFailed(str(exc)) from None
    print(text)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    def render(info: dict[str, Any]) -> str:
        return f"{info['id']}: {info['state']}"

    return on_workload(args, lambda sched: sched.cancel(args.workload), render)
