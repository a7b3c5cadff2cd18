"""`kai-ray sim --snapshot FILE [--config FILE]`: what the scheduler would decide from a
saved state, with its own configuration or another one: the decisions and, for every
job left waiting, why, its place in its queue's line and its forecast start.

FILE is a `kai-ray snapshot save` file, or KAI-Scheduler's own snapshot (the zip its
`/get-snapshot` endpoint serves, or the JSON inside it; docs/kai-snapshots.md), told
apart by content. A KAI snapshot's warnings (what it holds that kai-ray does not follow)
are printed on stderr and listed under `warnings` in the JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from kai_ray.config.errors import ConfigError
from kai_ray.control.forecast import forecast
from kai_ray.control.kaisnapshot import (
    ZIP_MAGIC,
    KaiSnapshot,
    KaiSnapshotError,
    is_kai_snapshot,
    read_kai_bytes,
    read_kai_snapshot,
)
from kai_ray.control.planner import Plan, plan_cycle
from kai_ray.control.runtime import Runtimes
from kai_ray.control.snapshotfile import SnapshotFile, SnapshotFormatError, read_snapshot
from kai_ray.core import (
    Bind,
    ClusterSnapshot,
    CycleResult,
    Evict,
    Pipeline,
    SchedulerConfig,
    TakeBack,
    TaskStatus,
    run_cycle,
)

__all__ = [
    "LoadedSnapshot",
    "decisions_json",
    "load_any_snapshot",
    "load_snapshot_file",
    "replay",
    "replay_command",
    "waiting_details",
]


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    snap: SnapshotFile
    warnings: tuple[str, ...] = ()  # what a KAI snapshot holds that kai-ray does not follow


def load_snapshot_file(path: str | Path) -> SnapshotFile:
    return load_any_snapshot(path).snap


def load_any_snapshot(path: str | Path) -> LoadedSnapshot:
    """A kai-ray snapshot file or a KAI snapshot (zip or JSON), by content."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the snapshot: {exc.strerror}", path=path) from None
    try:
        if raw.startswith(ZIP_MAGIC):  # KAI's /get-snapshot serves a zip
            return _kai(read_kai_bytes(raw))
        data = json.loads(raw)
        if is_kai_snapshot(data):
            return _kai(read_kai_snapshot(data))
        return LoadedSnapshot(read_snapshot(data))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"line {exc.lineno}: not JSON ({exc.msg}); save it again", path=path) from None
    except UnicodeDecodeError:
        raise ConfigError("neither JSON nor a zip; pass a snapshot file", path=path) from None
    except KaiSnapshotError as exc:
        raise ConfigError(str(exc), path=path) from None
    except SnapshotFormatError as exc:
        also = (
            "; or pass KAI-Scheduler's snapshot (its JSON has rawObjects)"
            if str(exc).startswith("format:")
            else ""
        )
        raise ConfigError(f"{exc}{also}", path=path) from None


def _kai(kai: KaiSnapshot) -> LoadedSnapshot:
    return LoadedSnapshot(SnapshotFile(kai.snapshot, kai.config, kai.now, "kai-scheduler"), kai.warnings)


def replay(snap: SnapshotFile, config: SchedulerConfig | None = None) -> CycleResult:
    """One cycle from the snapshot. Another `config` keeps the snapshot's topologies (the
    scheduler adds its own per-node one) beside those it names."""
    if config is None:
        config = snap.config
    else:
        config = dataclasses.replace(config, topologies={**snap.config.topologies, **config.topologies})
    return run_cycle(snap.snapshot, config, snap.now)


def decisions_json(result: CycleResult, snap: SnapshotFile | None = None) -> dict[str, Any]:
    """The decisions and the waiting jobs; with the `snap` the cycle ran on, each waiting
    job's queue, place in its queue's line and forecast start too."""
    binds: list[dict[str, Any]] = []
    evicts: list[dict[str, Any]] = []
    pipelined: list[dict[str, Any]] = []
    taken_back: list[dict[str, Any]] = []
    for d in result.decisions:
        if isinstance(d, Bind):
            binds.append({"job": d.job, "task": d.task, "node": d.node})
        elif isinstance(d, Evict | TakeBack):
            (evicts if isinstance(d, Evict) else taken_back).append(
                {"job": d.job, "task": d.task, "node": d.node, "action": d.action, "reason": d.reason}
            )
        elif isinstance(d, Pipeline):
            pipelined.append({"job": d.job, "task": d.task, "node": d.node})
    details = waiting_details(snap, result) if snap is not None else {}
    return {
        "bind": binds,
        "evict": evicts,
        "pipeline": pipelined,
        "take_back": taken_back,  # placed this cycle, then taken as victims: never started
        "waiting": {
            job: {"code": r.code, "reason": r.text, **details.get(job, {})}
            for job, r in sorted(result.waiting.items())
        },
        "queues": {
            name: {
                "fair_share": list(q.fair_share),
                "allocated": list(q.allocated),
                "requested": list(q.requested),
            }
            for name, q in result.queues.items()
        },
    }


def waiting_details(snap: SnapshotFile, result: CycleResult) -> dict[str, dict[str, Any]]:
    """Per waiting job: its queue, its place in that queue's line (the planner's, as every
    backend tells it) and its forecast start (kai_ray.control.forecast, on the state the
    cycle leaves: what it placed is starting, what it evicted is leaving)."""
    jobs = snap.snapshot.jobs
    plan = plan_cycle(result, jobs, (n.name for n in snap.snapshot.nodes))
    runtimes = Runtimes()
    runtimes.set_queues(snap.snapshot.queues)
    etas = forecast(_after(snap.snapshot, plan, snap.now), snap.now, runtimes, result.queues)
    queue_of = {job.name: job.queue for job in jobs}
    out: dict[str, dict[str, Any]] = {}
    for job in result.waiting:
        place = plan.positions.get(job)
        eta = etas.get(job)
        out[job] = {
            "queue": queue_of.get(job),
            "position": place[0] if place else None,
            "of": place[1] if place else None,
            "forecast": eta.as_dict(snap.now) if eta is not None else None,
        }
    return out


def _after(snapshot: ClusterSnapshot, plan: Plan, now: float) -> ClusterSnapshot:
    """The state the cycle's plan leaves (the backends' actuators carry out the same)."""
    changes: dict[tuple[str, str], tuple[TaskStatus, str | None]] = {}
    for name, jp in plan.jobs.items():
        changes.update({(name, e.task): (TaskStatus.RELEASING, None) for e in jp.evicted})
        changes.update({(name, e.task): (TaskStatus.PIPELINED, p.node) for e, p in jp.moved})
        changes.update({(name, b.task): (TaskStatus.BINDING, b.node) for b in jp.binds})
        changes.update({(name, p.task): (TaskStatus.PIPELINED, p.node) for p in jp.pipelined})
    jobs = []
    for job in snapshot.jobs:
        if job.name not in plan.jobs:
            jobs.append(job)
            continue
        tasks = []
        for t in job.tasks:
            status, node = changes.get((job.name, t.name), (t.status, t.node))
            tasks.append(
                t if status is t.status else dataclasses.replace(t, status=status, node=node, since=now)
            )
        jobs.append(dataclasses.replace(job, tasks=tasks))
    return dataclasses.replace(snapshot, jobs=jobs)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _standing(w: dict[str, Any]) -> str:
    """`2nd of 3 in queue team-a; expected to start in about 5m (...)`, from what is known."""
    parts = []
    if w.get("position") is not None:
        parts.append(f"{_ordinal(w['position'])} of {w['of']} in queue {w['queue']}")
    if w.get("forecast") is not None:
        parts.append(w["forecast"]["text"])
    return "; ".join(parts)


def _text(data: dict[str, Any]) -> str:
    lines = [f"{len(data['bind'])} binds, {len(data['evict'])} evictions, {len(data['pipeline'])} pipelined"]
    lines += [f"bind     {b['job']}/{b['task']} -> {b['node']}" for b in data["bind"]]
    lines += [
        f"evict    {e['job']}/{e['task']} on {e['node']} ({e['action']}: {e['reason']})"
        for e in data["evict"]
    ]
    lines += [f"pipeline {p['job']}/{p['task']} -> {p['node']}" for p in data["pipeline"]]
    lines += [
        f"take back {t['job']}/{t['task']} from {t['node']}, never started ({t['action']}: {t['reason']})"
        for t in data["take_back"]
    ]
    if data["waiting"]:
        lines.append(f"{len(data['waiting'])} waiting:")
        for job, w in data["waiting"].items():
            lines.append(f"  {job}: [{w['code']}] {w['reason']}")
            standing = _standing(w)
            if standing:
                lines.append(f"    {standing}")
    return "\n".join(lines)


def replay_command(args: argparse.Namespace) -> int:
    from kai_ray.config.scheduler import load_scheduler_config

    loaded = load_any_snapshot(args.snapshot)
    for warning in loaded.warnings:
        print(f"kai-ray: warning: {args.snapshot}: {warning}", file=sys.stderr)
    config = load_scheduler_config(args.config) if args.config else None
    data = decisions_json(replay(loaded.snap, config), loaded.snap)
    data = {"snapshot": str(args.snapshot), "config": args.config or "the snapshot's", **data}
    if loaded.warnings:
        data["warnings"] = list(loaded.warnings)
    print(json.dumps(data, indent=2) if args.json else _text(data))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "decisions.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0
