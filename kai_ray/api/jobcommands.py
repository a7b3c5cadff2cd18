"""`kai-ray job ...`: Ray Jobs queued by kai-ray and submitted to Ray once admitted.

A workload is one id for its whole life; each admission runs it as a new Ray job
`<id>-<attempt>` (Ray never reuses a submission id). `logs`, `status` and `stop` take
the workload's id, so a user need not know which attempt is the current one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import time
from typing import Any

from kai_ray.api.cliutil import (
    CommandFailed,
    add_common,
    add_token,
    fail,
    output,
    running_scheduler,
    usage,
    with_token,
)
from kai_ray.api.render import eta_lines

__all__ = ["add_commands"]

FOLLOW_POLL_S = 0.5


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    job = subparsers.add_parser("job", help="Ray Jobs queued by kai-ray")
    sub = job.add_subparsers(title="job commands", metavar="COMMAND")
    _add_submit(sub)
    listing = sub.add_parser("list", help="jobs and where they stand")
    add_common(listing)
    listing.set_defaults(func=_list)
    logs = sub.add_parser("logs", help="a job's output, every attempt (preempted ones too)")
    logs.add_argument("id", help="the workload id `job submit` printed")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    add_common(logs)
    logs.set_defaults(func=_logs)
    status = sub.add_parser("status", help="where a job stands, and its Ray job's status")
    status.add_argument("id")
    add_common(status)
    status.set_defaults(func=_status)
    stop = sub.add_parser("stop", help="stop a job (cancel it, stopping its Ray job)")
    stop.add_argument("id")
    add_common(stop)
    add_token(stop)
    stop.set_defaults(func=_stop)
    job.set_defaults(func=lambda a: usage(job))


def _add_submit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        "--accelerator-type",
        action="append",
        metavar="TYPE",
        help="the GPU type its workers need (e.g. A100); repeat, or separate with commas, for "
        "several in order of preference (default: any type)",
    )
    submit.add_argument(
        "--mixed-accelerator-types",
        action="store_true",
        help="with several --accelerator-type: its workers may run on different types at once",
    )
    submit.add_argument(
        "--strategy",
        default="PACK",
        type=str.upper,
        help="PACK (default), SPREAD (as evenly over nodes as room allows), "
        "STRICT_PACK (one node), STRICT_SPREAD (a node per worker)",
    )
    submit.add_argument(
        "--grace-period", type=float, default=10.0, help="seconds between the preemption notice and the stop"
    )
    submit.add_argument(
        "--max-runtime",
        default=None,
        help="the most it may run (seconds, or e.g. 90m, 2h): then it gets its notice and "
        "grace period and is stopped",
    )
    submit.add_argument(
        "--expected-runtime",
        default=None,
        help="how long it is expected to run (seconds, or e.g. 2h): when waiting work starts "
        "is forecast from it",
    )
    submit.add_argument("--name", default="")
    submit.add_argument(
        "--submission-id",
        default=None,
        help="the workload's id (default: a new one); its Ray jobs are <id>-<attempt>",
    )
    submit.add_argument("--working-dir", default=None, help="runtime_env working_dir, uploaded now")
    submit.add_argument("--runtime-env", default=None, help="runtime environment YAML file, as for `ray job`")
    submit.add_argument(
        "--runtime-env-json", default=None, help="runtime environment as JSON, as for `ray job`"
    )
    submit.add_argument(
        "--handoff",
        action="store_true",
        help="release the reservation to the job once admitted (Ray Train, "
        "Ray Serve: they reserve their own; kai-ray keeps the accounting)",
    )
    submit.add_argument("entrypoint", nargs=argparse.REMAINDER, help="-- the command to run")
    add_common(submit)
    add_token(submit)
    submit.set_defaults(func=_submit)


# ---------------------------------------------------------------- submit / list


def _submit(args: argparse.Namespace) -> int:
    from kai_ray.api.workloads import make_spec
    from kai_ray.config import ConfigError, UnknownPriorityClassError
    from kai_ray.control import SubmitError

    command = args.entrypoint[1:] if args.entrypoint[:1] == ["--"] else args.entrypoint
    if not command:
        return fail("job submit: give the command after --, e.g. -- python train.py")
    try:
        extra = _json_option("--resources", args.resources)
        resources = {"CPU": args.cpus, **({"GPU": args.gpus} if args.gpus else {}), **extra}
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
            # As `ray job submit`: each argument stays one word for the shell.
            entrypoint=shlex.join(command),
            runtime_env=_runtime_env(args),
            handoff=args.handoff,
            max_runtime=args.max_runtime,
            expected_runtime=args.expected_runtime,
            accelerator_type=_accelerator_types(args.accelerator_type),
            mixed_accelerator_types=args.mixed_accelerator_types,
        )
    except (ValueError, UnknownPriorityClassError, ConfigError, SubmitError) as exc:
        return fail(f"job submit: {exc}")
    sched = with_token(running_scheduler(args.address), args.token)
    try:
        wid = sched.submit(spec, wid=args.submission_id)
    except SubmitError as exc:
        return fail(f"job submit: {exc}")
    info = sched.info(wid)
    return output(
        args,
        info,
        f"queued {wid} in {args.queue} ({info['state']})\n"
        f"  why it waits: kai-ray explain {wid}\n  its output:   kai-ray job logs {wid} --follow",
    )


def _accelerator_types(given: list[str] | None) -> list[str] | None:
    """--accelerator-type A100 --accelerator-type L4, or A100,L4: the types in order."""
    if given is None:
        return None
    types = [t.strip() for text in given for t in text.split(",")]
    if not all(types):
        raise ValueError(
            f"--accelerator-type {','.join(given)!r}: an empty type; give e.g. A100 or H100,A100"
        )
    return types


def _json_option(flag: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag}: give a JSON object, e.g. {{...}}")
    return value


def _runtime_env(args: argparse.Namespace) -> dict[str, Any]:
    """--runtime-env FILE or --runtime-env-json, with --working-dir on top (as Ray's CLI)."""
    if args.runtime_env and args.runtime_env_json:
        raise ValueError("give --runtime-env or --runtime-env-json, not both")
    env: dict[str, Any] = {}
    if args.runtime_env:
        from kai_ray.config.base import read_yaml

        loaded = read_yaml(args.runtime_env) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"--runtime-env {args.runtime_env}: the file must be a YAML map")
        env = loaded
    elif args.runtime_env_json:
        env = _json_option("--runtime-env-json", args.runtime_env_json)
    if args.working_dir:
        env["working_dir"] = os.path.abspath(args.working_dir)
    return env


def _priority(text: str) -> str | int:
    return int(text) if text.lstrip("-").isdigit() else text


def _list(args: argparse.Namespace) -> int:
    from kai_ray.api.render import table

    sched = running_scheduler(args.address)
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
    return output(args, jobs, text)


# ---------------------------------------------------------------- one job


def _job(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """(scheduler, info) of the job named by args.id."""
    sched = with_token(running_scheduler(args.address), getattr(args, "token", None))
    try:
        info = sched.info(args.id)
    except KeyError as exc:
        raise CommandFailed(str(exc.args[0])) from None
    if info["kind"] != "job":
        raise CommandFailed(f"{args.id} is a {info['kind']} workload, not a job; `kai-ray explain {args.id}`")
    return sched, info


def _ray_jobs() -> Any:
    import ray
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(ray.get_runtime_context().gcs_address)


def _attempts(client: Any, info: dict[str, Any]) -> list[tuple[str, Any]]:
    """(Ray submission id, JobDetails) of each attempt Ray has seen, oldest first."""
    out = []
    for attempt in range(1, info["attempt"] + 1):
        sid = f"{info['id']}-{attempt}"
        try:
            out.append((sid, client.get_job_info(sid)))
        except RuntimeError:  # that admission never reached Ray (it failed before)
            continue
    return out


def _status(args: argparse.Namespace) -> int:
    _, info = _job(args)
    ray_jobs = [
        {"submission_id": sid, "status": str(d.status.value), "message": d.message or ""}
        for sid, d in _attempts(_ray_jobs(), info)
    ]
    lines = [f"{info['id']}: {info['state']} - {info['reason']}"]
    if info["position"]:
        lines.append(f"  position {info['position']} of {info['queue_length']} in queue {info['queue']}")
    lines += eta_lines(info)
    lines += [f"  Ray job {j['submission_id']}: {j['status']}" for j in ray_jobs]
    if ray_jobs:
        lines.append(f"  output: kai-ray job logs {info['id']}")
    return output(args, {**info, "ray_jobs": ray_jobs}, "\n".join(lines))


def _stop(args: argparse.Namespace) -> int:
    sched, info = _job(args)
    after = sched.cancel(info["id"])
    ray_job = f"; Ray job {info['submission_id']} stopped" if info["submission_id"] else ""
    return output(args, after, f"{after['id']}: {after['state']}{ray_job}")


def _logs(args: argparse.Namespace) -> int:
    sched, info = _job(args)
    client = _ray_jobs()
    attempts = _attempts(client, info)
    # Following: attempts that ended are printed now, the live one is tailed below.
    ended = [(sid, d) for sid, d in attempts if not args.follow or d.status.is_terminal()]
    for sid, details in ended:
        if len(attempts) > 1 or args.follow:
            _header(info["id"], sid, str(details.status.value))
        sys.stdout.write(client.get_job_logs(sid))
    if args.follow:
        return _follow(sched, client, info["id"], {sid for sid, _ in ended})
    if not attempts:
        print(f"{info['id']} has not run yet ({info['state']}: {info['reason']})", file=sys.stderr)
    return 0


def _header(wid: str, sid: str, status: str) -> None:
    print(f"==> attempt {sid[len(wid) + 1 :]}: Ray job {sid} ({status})", flush=True)


def _follow(sched: Any, client: Any, wid: str, shown: set[str]) -> int:
    """Print each attempt's output as it comes, across re-admissions, until the job ends."""
    while True:
        info = sched.info(wid)
        sid = info["submission_id"]
        if sid and sid not in shown and info["state"] in ("Running", "Preempting"):
            _header(wid, sid, "live")
            asyncio.run(_tail(client, sid))
            shown.add(sid)
            continue
        if info["state"] in ("Succeeded", "Failed", "Cancelled"):
            print(f"==> {wid} {info['state']}: {info['reason']}", flush=True)
            return 0 if info["state"] == "Succeeded" else 1
        time.sleep(FOLLOW_POLL_S)


async def _tail(client: Any, submission_id: str) -> None:
    async for lines in client.tail_job_logs(submission_id):
        sys.stdout.write(lines)
        sys.stdout.flush()
