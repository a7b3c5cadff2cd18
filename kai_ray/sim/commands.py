"""`kai-ray sim ...`: replay a trace under several policies (report.html, summary.json),
or replay one scheduling cycle from a snapshot file (`--snapshot`)."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

from kai_ray.config.errors import ConfigError
from kai_ray.sim.durations import parse_duration

# parse_duration lives in durations.py (the autoscaler reads it too); named here as before.
__all__ = ["add_commands", "parse_duration"]


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from kai_ray.sim.engine import DEFAULT_CHECKPOINT_S, DEFAULT_PERIOD_S
    from kai_ray.sim.policies import POLICIES

    sim = subparsers.add_parser(
        "sim",
        help="replay a job trace through the scheduler under several policies (or one cycle from a snapshot)",
        description="Replays a job trace (Philly's, or the generic CSV of docs/simulator.md) through "
        "kai-ray's controller and core on a virtual clock; writes DIR/report.html and DIR/summary.json. "
        "With --snapshot, replays one scheduling cycle from a `kai-ray snapshot save` file, or from "
        "KAI-Scheduler's own snapshot (the zip of its /get-snapshot endpoint, or its JSON), instead.",
    )
    sim.add_argument("--trace", metavar="FILE", help="the trace: Philly's CSV or kai-ray's generic CSV")
    sim.add_argument("--cluster", metavar="SPEC", help="NODESxGPUS (e.g. 250x8) or a cluster file")
    sim.add_argument(
        "--queues", metavar="FILE", help="a queues file (default: one queue per trace queue, equal quotas)"
    )
    sim.add_argument(
        "--policy",
        nargs="+",
        metavar="NAME",
        choices=list(POLICIES),
        default=list(POLICIES),
        help=f"policies to compare, side by side: {', '.join(POLICIES)} (default: all)",
    )
    sim.add_argument(
        "--from", dest="start", metavar="T", help="keep jobs submitted from this long after the first (30d)"
    )
    sim.add_argument("--to", dest="end", metavar="T", help="... and before this long after the first (60d)")
    sim.add_argument("--out", metavar="DIR", help="the directory for report.html and summary.json")
    sim.add_argument(
        "--checkpoint",
        metavar="S",
        default=str(DEFAULT_CHECKPOINT_S),
        help=f"a job's checkpoint interval in run time (default {DEFAULT_CHECKPOINT_S:g}s; 0: loses nothing)",
    )
    sim.add_argument(
        "--period",
        metavar="S",
        default=str(DEFAULT_PERIOD_S),
        help=f"scheduling period: 0 = a cycle at every event time (default {DEFAULT_PERIOD_S:g})",
    )
    sim.add_argument(
        "--wait-step",
        metavar="S",
        default=None,
        help="while something waits, a cycle at least every S seconds (default: 60 for policies "
        "with a usage history, whose shares change with time alone; none otherwise)",
    )
    sim.add_argument(
        "--runtime-estimates",
        choices=["exact", "noisy"],
        default=None,
        help="tell the scheduler each job's run time (exact, or noisy: off by x0.5 to x2) and "
        "measure how close each job's forecast start, taken at submission, came",
    )
    sim.add_argument("--seed", type=int, default=0, help="the noisy estimates' random seed")
    sim.add_argument(
        "--reserve-after",
        metavar="T",
        default=None,
        help="also run each policy with reservations and backfill (POLICY+reserve): a gang that "
        "has waited T (e.g. 30m) holds the room it is expected to start on; pair with "
        "--runtime-estimates, since backfill needs run times",
    )
    sim.add_argument(
        "--autoscale",
        metavar="SPEC",
        default=None,
        help="an autoscaler adds nodes for gangs that wait for room: MAXxGPUS[:TYPE][,latency=T][,idle=T] "
        "(e.g. 4x8,latency=5m,idle=10m: up to 4 nodes of 8 GPUs, each ready 5 minutes after it is "
        "asked for, removed after 10 idle minutes); the preemption delay (preemptionDelay in "
        "--config) then applies",
    )
    sim.add_argument(
        "--config", metavar="FILE", help="a scheduler options file (the policies' base configuration)"
    )
    sim.add_argument(
        "--events", action="store_true", help="also write DIR/events-POLICY.csv (every job event)"
    )
    sim.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    sim.add_argument(
        "--snapshot",
        metavar="FILE",
        help="a `kai-ray snapshot save` file, or a KAI-Scheduler snapshot (zip or JSON): replay its cycle",
    )
    sim.add_argument("--json", action="store_true", help="with --snapshot: print the decisions as JSON")
    sim.set_defaults(func=_run)
    from kai_ray.sim import generate

    generate.add_commands(subparsers)


def _run(args: argparse.Namespace) -> int:
    if args.snapshot:
        from kai_ray.sim.snapshot import replay_command

        return replay_command(args)
    missing = [
        flag
        for flag, value in (("--trace", args.trace), ("--cluster", args.cluster), ("--out", args.out))
        if not value
    ]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} missing; kai-ray sim needs --trace, --cluster and --out (or --snapshot)"
        )
    return _simulate(args)


def _simulate(args: argparse.Namespace) -> int:
    from kai_ray.config.scheduler import load_scheduler_config
    from kai_ray.sim.autoscale import parse_autoscale
    from kai_ray.sim.cluster import parse_cluster, sim_queues
    from kai_ray.sim.engine import Options, Simulation
    from kai_ray.sim.policies import make_policy, with_reservations
    from kai_ray.sim.report import write_report, write_summary
    from kai_ray.sim.trace import read_trace

    start = parse_duration(args.start, "--from") if args.start else None
    end = parse_duration(args.end, "--to") if args.end else None
    options = Options(
        checkpoint_s=parse_duration(args.checkpoint, "--checkpoint"),
        period_s=parse_duration(args.period, "--period"),
        event_log=args.events,
        wait_step_s=parse_duration(args.wait_step, "--wait-step") if args.wait_step else None,
        runtime_estimates=args.runtime_estimates or "",
        seed=args.seed,
        autoscale=parse_autoscale(args.autoscale) if args.autoscale else None,
    )
    nodes = parse_cluster(args.cluster)
    base = load_scheduler_config(args.config) if args.config else None
    policies = [make_policy(name, base) for name in dict.fromkeys(args.policy)]
    if args.reserve_after is not None:
        after = parse_duration(args.reserve_after, "--reserve-after")
        if after <= 0:
            raise ConfigError("reservations need a wait above 0, e.g. 30m", field="--reserve-after")
        policies = [p for policy in policies for p in (policy, with_reservations(policy, after))]
    jobs = read_trace(args.trace, start, end)
    if not jobs:
        raise ConfigError(
            "no jobs were submitted between --from and --to; widen the window", field="--from/--to"
        )
    queues = sim_queues(args.queues, sorted({j.queue for j in jobs}), nodes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for policy in policies:
        bar = None if args.no_progress else _Progress(policy.name, len(jobs))
        sim = Simulation(jobs, nodes, queues, policy, options, progress=bar)
        metrics = sim.run()
        if bar is not None:
            bar.close(sim)
        metrics.summary["peak_memory_mib"] = peak_memory_mib()
        print(
            f"kai-ray sim: {policy.name}: {metrics.summary['completed']} jobs in "
            f"{metrics.summary['wall_s']:.1f}s, "
            f"{sim.steps} steps, peak memory {metrics.summary['peak_memory_mib']:.0f} MiB",
            file=sys.stderr,
        )
        if options.event_log:
            _write_events(out / f"events-{policy.name}.csv", metrics)
        results.append(metrics)
    extra = _facts(args, jobs, nodes, options)
    write_summary(out, results, extra)
    report = write_report(out, results, f"kai-ray sim: {Path(args.trace).name}", extra)
    print(f"kai-ray sim: peak memory {peak_memory_mib():.0f} MiB with the report", file=sys.stderr)
    print(f"{report}\n{out / 'summary.json'}")
    return 0


def _facts(args: argparse.Namespace, jobs: list[Any], nodes: list[Any], options: Any) -> dict[str, Any]:
    return {
        "trace": str(args.trace),
        "jobs": len(jobs),
        "cluster": f"{len(nodes)} nodes, {sum(n.gpus for n in nodes)} GPUs",
        "queues": args.queues or "one per trace queue, equal quotas",
        "checkpoint_s": options.checkpoint_s,
        "period_s": options.period_s,
        "wait_step_s": options.wait_step_s,
        "runtime_estimates": options.runtime_estimates or "none",
        "reserve_after_s": parse_duration(args.reserve_after, "--reserve-after")
        if args.reserve_after
        else None,
        "autoscale": args.autoscale or "none (a fixed cluster)",
        "peak_memory_mib": peak_memory_mib(),
    }


def _write_events(path: Path, metrics: Any) -> None:
    import csv

    from kai_ray.sim.metrics import EVENT_COLUMNS

    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(EVENT_COLUMNS)
        writer.writerows(metrics.events or [])


def peak_memory_mib() -> float:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class _Progress:
    """A one-line progress bar on stderr, redrawn at most twice a second."""

    def __init__(self, name: str, total: int) -> None:
        self.name, self.total = name, total
        self.started = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()

    def __call__(self, sim: Any) -> None:
        now = time.monotonic()
        if now - self.last < (0.5 if self.tty else 10.0):
            return
        self.last = now
        self._draw(sim, now)

    def _draw(self, sim: Any, now: float) -> None:
        done = sim.done / max(self.total, 1)
        bar = "#" * int(done * 30)
        line = (
            f"[{self.name}] [{bar:<30}] {sim.done}/{self.total} jobs, day {sim.clock.t / 86400:.1f}, "
            f"{now - self.started:.0f}s"
        )
        print(("\r" if self.tty else "") + line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self, sim: Any) -> None:
        self._draw(sim, time.monotonic())
        if self.tty:
            print(file=sys.stderr)
