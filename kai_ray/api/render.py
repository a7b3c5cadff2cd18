"""Plain-text tables for the CLI (no dependency: the terminal is the UI here)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kai_ray.control.accessview import rule_lines
from kai_ray.control.runtime import format_duration

__all__ = [
    "access_lines",
    "eta_lines",
    "explain_text",
    "num",
    "plural",
    "queue_table",
    "status_text",
    "table",
    "workload_table",
]


def num(x: float | None, unlimited: bool = False) -> str:
    if x is None:
        return "-"
    if unlimited and x < 0:
        return "inf"
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def plural(n: int, noun: str) -> str:
    """ "1 node", "2 nodes"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in [header, *rows]
    ]
    return "\n".join(lines)


def _pair(values: Sequence[float] | None, unlimited: bool = False) -> str:
    """GPU / CPU of a per-resource triple."""
    if values is None:
        return "-"
    return f"{num(values[0], unlimited)} / {num(values[1], unlimited)}"


def queue_table(rows: Sequence[dict[str, Any]]) -> str:
    header = [
        "QUEUE",
        "PARENT",
        "PRIO",
        "QUOTA gpu/cpu",
        "LIMIT gpu/cpu",
        "FAIR SHARE gpu/cpu",
        "ALLOCATED gpu/cpu",
        "PENDING",
        "RUNNING",
    ]
    body = [
        [
            q["name"],
            q["parent"] or "-",
            str(q["priority"]),
            _pair(q["quota"], True),
            _pair(q["limit"], True),
            _pair(q["fair_share"]),
            _pair(q["allocated"]),
            str(q["pending"]),
            str(q["running"]),
        ]
        for q in rows
    ]
    return table(header, body)


def workload_table(rows: Sequence[dict[str, Any]]) -> str:
    header = ["ID", "KIND", "QUEUE", "PRIO", "STATE", "POS", "WORKERS", "REASON"]
    body = [
        [
            w["id"],
            w["kind"],
            w["queue"],
            str(w["priority"]),
            w["state"],
            str(w["position"] or "-"),
            str(w["workers"]),
            _short(w["reason"], 70),
        ]
        for w in rows
    ]
    return table(header, body)


def status_text(status: dict[str, Any]) -> str:
    nodes = status["nodes"]
    node_rows = [
        [
            n["id"][:12] + (" (cordoned)" if n.get("unschedulable") else ""),
            f"{num(n['gpu_free'])}/{num(n['gpus'])}",
            num(n["gpu_used"]),
            num(n["gpu_outside"]),
            f"{num(n['cpu_free'])}/{num(n['cpu'])}",
            n["gpu_model"] or "-",
            ",".join(f"{k}={v}" for k, v in sorted(n["labels"].items())) or "-",
        ]
        for n in nodes
    ]
    counts = ", ".join(f"{k} {v}" for k, v in sorted(status["workloads"].items())) or "none"
    return "\n".join(
        [
            f"scheduler up {status['uptime_s']:.0f}s; {plural(len(nodes), 'node')}; workloads: {counts}",
            "",
            table(
                ["NODE", "GPU FREE", "GPU KAI-RAY", "GPU OUTSIDE", "CPU FREE", "GPU MODEL", "LABELS"],
                node_rows,
            ),
            "",
            queue_table(status["queues"]),
        ]
    )


def explain_text(info: dict[str, Any]) -> str:
    lines = [
        f"workload {info['id']}" + (f" ({info['name']})" if info["name"] else ""),
        f"  queue {info['queue']}, priority {info['priority']}, kind {info['kind']}",
        f"  state {info['state']}: {info['reason']}",
    ]
    lines += access_lines(info)
    if info["position"]:
        lines.append(f"  position {info['position']} of {info['queue_length']} queued in {info['queue']}")
    lines += eta_lines(info)
    q = info.get("queue_status")
    if q:
        lines.append(
            f"  queue {q['name']}: fair share {_pair(q['fair_share'])} gpu/cpu, "
            f"allocated {_pair(q['allocated'])}, quota {_pair(q['quota'], True)}, "
            f"limit {_pair(q['limit'], True)}"
        )
    if info["groups"]:
        lines.append(f"  placement groups: {', '.join(info['groups'])}")
    if info["preemptions"]:
        lines.append(f"  preempted {plural(info['preemptions'], 'time')}")
    lines.append("  history:")
    t0 = info["history"][0][0] if info["history"] else 0.0
    for at, old, new, why in info["history"]:
        lines.append(f"    +{at - t0:7.2f}s  {old or '-':>10} -> {new:<10} {why}")
    return "\n".join(lines)


def access_lines(info: dict[str, Any]) -> list[str]:
    """The access rule that stops it (or that no longer admits it while it runs), named:
    its queue's or a parent's, the field, what it allows and the fix. `access_rule` is
    what the scheduler found (kai_ray.control.views.refusal_of); a scheduler that does
    not say leaves only the reason's own words."""
    found = info.get("access_rule")
    if not found:
        return []
    return rule_lines(found, waiting=info["state"] == "Queued")


def eta_lines(info: dict[str, Any]) -> list[str]:
    """Its forecast start (while it waits) and its run times, for explain and status."""
    lines = []
    eta = info.get("eta")
    if eta:
        when = f" (at {time.strftime('%H:%M:%S', time.localtime(eta['at']))})" if eta["at"] else ""
        lines.append(f"  estimated start: {eta['text']}{when}")
    limits = [
        f"{word} {format_duration(info[key])}"
        for key, word in (("expected_runtime", "expected run time"), ("max_runtime", "max runtime"))
        if info.get(key)
    ]
    if limits:
        lines.append("  " + ", ".join(limits))
    return lines


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def clock() -> str:
    return time.strftime("%H:%M:%S")
