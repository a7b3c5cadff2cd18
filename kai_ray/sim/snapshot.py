"""`kai-ray sim --snapshot FILE [--config FILE]`: what the scheduler would decide from a
saved state, with its own configuration or another one: the decisions and, for every
job left waiting, why."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from kai_ray.config.errors import ConfigError
from kai_ray.control.snapshotfile import SnapshotFile, SnapshotFormatError, read_snapshot
from kai_ray.core import Bind, CycleResult, Evict, Pipeline, SchedulerConfig, run_cycle

__all__ = ["decisions_json", "load_snapshot_file", "replay", "replay_command"]


def load_snapshot_file(path: str | Path) -> SnapshotFile:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the snapshot: {exc.strerror}", path=path) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"line {exc.lineno}: not JSON ({exc.msg}); save it again", path=path) from None
    try:
        return read_snapshot(data)
    except SnapshotFormatError as exc:
        raise ConfigError(str(exc), path=path) from None


def replay(snap: SnapshotFile, config: SchedulerConfig | None = None) -> CycleResult:
    """One cycle from the snapshot. Another `config` keeps the snapshot's topologies (the
    scheduler adds its own per-node one) beside those it names."""
    if config is None:
        config = snap.config
    else:
        config = dataclasses.replace(config, topologies={**snap.config.topologies, **config.topologies})
    return run_cycle(snap.snapshot, config, snap.now)


def decisions_json(result: CycleResult) -> dict[str, Any]:
    binds, evicts, pipelined = [], [], []
    for d in result.decisions:
        if isinstance(d, Bind):
            binds.append({"job": d.job, "task": d.task, "node": d.node})
        elif isinstance(d, Evict):
            evicts.append(
                {"job": d.job, "task": d.task, "node": d.node, "action": d.action, "reason": d.reason}
            )
        elif isinstance(d, Pipeline):
            pipelined.append({"job": d.job, "task": d.task, "node": d.node})
    return {
        "bind": binds,
        "evict": evicts,
        "pipeline": pipelined,
        "waiting": {job: {"code": r.code, "reason": r.text} for job, r in sorted(result.waiting.items())},
        "queues": {
            name: {
                "fair_share": list(q.fair_share),
                "allocated": list(q.allocated),
                "requested": list(q.requested),
            }
            for name, q in result.queues.items()
        },
    }


def _text(data: dict[str, Any]) -> str:
    lines = [f"{len(data['bind'])} binds, {len(data['evict'])} evictions, {len(data['pipeline'])} pipelined"]
    lines += [f"bind     {b['job']}/{b['task']} -> {b['node']}" for b in data["bind"]]
    lines += [
        f"evict    {e['job']}/{e['task']} on {e['node']} ({e['action']}: {e['reason']})"
        for e in data["evict"]
    ]
    lines += [f"pipeline {p['job']}/{p['task']} -> {p['node']}" for p in data["pipeline"]]
    if data["waiting"]:
        lines.append(f"{len(data['waiting'])} waiting:")
        lines += [f"  {job}: [{w['code']}] {w['reason']}" for job, w in data["waiting"].items()]
    return "\n".join(lines)


def replay_command(args: argparse.Namespace) -> int:
    from kai_ray.config.scheduler import load_scheduler_config

    snap = load_snapshot_file(args.snapshot)
    config = load_scheduler_config(args.config) if args.config else None
    data = decisions_json(replay(snap, config))
    data = {"snapshot": str(args.snapshot), "config": args.config or "the snapshot's", **data}
    print(json.dumps(data, indent=2) if args.json else _text(data))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "decisions.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0
