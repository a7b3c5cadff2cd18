"""DIR/summary.json (every figure, per policy) and DIR/report.html: one self-contained
page, its plots PNGs embedded as base64 (matplotlib, imported here only)."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kai_ray.sim.metrics import Metrics

__all__ = ["BINS", "write_report", "write_summary"]

BINS = 300  # time windows of the plots over time
HOUR = 3600.0
TOP_QUEUES = 6  # queues plotted one by one (by GPU-hours asked); the rest as "others"


def write_summary(out: Path, results: Sequence[Metrics], extra: dict[str, Any]) -> Path:
    path = out / "summary.json"
    data = {**extra, "policies": {m.policy.name: m.summary for m in results}}
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path


def write_report(out: Path, results: Sequence[Metrics], title: str, extra: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    end = max((m.summary["makespan_s"] for m in results), default=0.0) or 1.0
    edges = np.linspace(0.0, end, BINS + 1)
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        _facts(extra),
        _headline_table(results),
        _forecast_table(results),
        _autoscale_table(results),
        _size_table(results),
        _type_table(results),
        _figure(_utilisation(results, edges), "GPU utilisation over time"),
        _figure(
            _cdfs(results),
            "Job completion time and queueing delay, cumulative (times under 3.6 s drawn at 0.001 h)",
        ),
        _figure(_jain(results, edges), "Fairness over time: Jain's index of held / fair share"),
    ]
    for m in results:
        parts.append(f"<h2>{html.escape(m.policy.name)}: per queue</h2>")
        parts.append(_figure(_fair_shares(m, edges), f"{m.policy.name}: GPUs held against fair share"))
        parts.append(_queue_table(m))
    page = _PAGE.format(title=html.escape(title), body="\n".join(parts))
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 90%; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child, th:first-child {{ text-align: left; }}
img {{ max-width: 100%; }} figcaption {{ color: #555; }}
</style></head><body>
{body}
</body></html>
"""


# ---------------------------------------------------------------- tables


def _fmt(value: Any, scale: float = 1.0, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value / scale:,.{digits}f}"


def _facts(extra: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in extra.items()
    )
    return f"<table>{rows}</table>"


_HEAD = (
    "policy",
    "jobs done",
    "JCT mean (h)",
    "JCT p50 (h)",
    "JCT p95 (h)",
    "JCT p99 (h)",
    "wait mean (h)",
    "wait p50 (h)",
    "wait p95 (h)",
    "wait p99 (h)",
    "GPU util",
    "Jain",
    "preemptions",
    "GPU-h lost",
    "makespan (d)",
)


def _row(name: str, s: dict[str, Any], util: bool = True) -> list[str]:
    jct, wait = s["jct_s"], s["queueing_delay_s"]
    return [
        html.escape(name),
        f"{s['completed']} / {s['jobs']}",
        *(_fmt(jct[k], HOUR) for k in ("mean", "p50", "p95", "p99")),
        *(_fmt(wait[k], HOUR) for k in ("mean", "p50", "p95", "p99")),
        _fmt(s.get("gpu_utilisation") if util else s.get("held_over_fair_share"), digits=3),
        _fmt(s.get("jain_index"), digits=3) if util else _fmt(s.get("mean_gpus_held"), digits=1),
        str(s["preemptions"]),
        _fmt(s["gpu_hours_lost"], digits=1),
        _fmt(s.get("makespan_s"), 86400.0) if util else _fmt(s.get("mean_fair_share_gpus"), digits=1),
    ]


def _table(head: Sequence[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _headline_table(results: Sequence[Metrics]) -> str:
    return _table(_HEAD, [_row(m.policy.name, m.summary) for m in results])


def _forecast_table(results: Sequence[Metrics]) -> str:
    """How close each job's forecast start (taken at submission) came, where taken."""
    rows = [
        [
            html.escape(m.policy.name),
            str(a["jobs_waited_over_10m"]),
            str(a["forecast"]),
            str(a["no_forecast"]),
            _fmt(a["relative_error_p50"], digits=3),
            _fmt(a["relative_error_p90"], digits=3),
        ]
        for m in results
        if (a := m.summary.get("forecast_accuracy")) is not None
    ]
    if not rows:
        return ""
    head = ("policy", "jobs that waited > 10 min", "forecast", "no forecast", "error p50", "error p90")
    caption = "<p>Forecast start at submission: error = |forecast - start| / wait</p>"
    return caption + _table(head, rows)


def _autoscale_table(results: Sequence[Metrics]) -> str:
    """What the autoscaler added, beside the preemptions (what a preemption delay trades)."""
    rows = [
        [
            html.escape(m.policy.name),
            str(a["nodes_added"]),
            _fmt(a["node_hours"], digits=1),
            str(a["peak_nodes"]),
            str(m.summary["preemptions"]),
        ]
        for m in results
        if (a := m.summary.get("autoscale")) is not None
    ]
    if not rows:
        return ""
    head = ("policy", "nodes added", "node-hours added", "most at once", "preemptions")
    return "<p>Autoscaler</p>" + _table(head, rows)


def _size_table(results: Sequence[Metrics]) -> str:
    """Waits of big gangs and small jobs apart, beside utilisation (reservations' trade)."""
    rows = []
    for m in results:
        sizes = m.summary["queueing_delay_by_size_s"]
        big, small = sizes["big_gangs"], sizes["small_jobs"]
        rows.append(
            [
                html.escape(m.policy.name),
                str(big["jobs"]),
                _fmt(big["p50"], HOUR),
                _fmt(big["p95"], HOUR),
                str(small["jobs"]),
                _fmt(small["p50"], HOUR),
                _fmt(small["p95"], HOUR),
                _fmt(m.summary.get("gpu_utilisation"), digits=3),
            ]
        )
    head = (
        "policy",
        "big gangs (32+ GPUs)",
        "wait p50 (h)",
        "wait p95 (h)",
        "small jobs (< 8 GPUs)",
        "wait p50 (h)",
        "wait p95 (h)",
        "GPU util",
    )
    return "<p>Queueing delay by job size</p>" + _table(head, rows)


def _type_table(results: Sequence[Metrics]) -> str:
    """Per GPU type: utilisation and waits of the jobs that ran on it. Left out when every
    GPU is of the one "default" type: its row would repeat the headline table."""
    rows = [
        [
            html.escape(m.policy.name),
            html.escape(name),
            _fmt(t["gpus"], digits=0),
            _fmt(t["gpu_utilisation"], digits=3),
            str(t["jobs"]),
            *(_fmt(t["queueing_delay_s"][k], HOUR) for k in ("mean", "p50", "p95")),
        ]
        for m in results
        for name, t in m.summary["per_gpu_type"].items()
    ]
    if all(list(m.summary["per_gpu_type"]) in ([], ["default"]) for m in results):
        return ""
    head = ("policy", "GPU type", "GPUs", "GPU util", "jobs run on it")
    return "<p>Per GPU type</p>" + _table((*head, "wait mean (h)", "wait p50 (h)", "wait p95 (h)"), rows)


def _queue_table(m: Metrics) -> str:
    head = [*_HEAD[:10], "held / fair", "mean GPUs held", "preemptions", "GPU-h lost", "mean fair share"]
    rows = [_row(team, s, util=False) for team, s in m.summary["queues"].items()]
    return _table(head, rows)


# ---------------------------------------------------------------- plots


def _figure(png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    alt = html.escape(caption)
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{data}"><figcaption>{alt}</figcaption></figure>'
    )


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _days(edges: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    centres: np.ndarray[Any, Any] = (edges[:-1] + edges[1:]) / 2 / 86400.0
    return centres


def _utilisation(results: Sequence[Metrics], edges: np.ndarray[Any, Any]) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.5))
    for m in results:
        ax.plot(_days(edges), m.utilisation_over(edges), label=m.policy.name, lw=1)
    ax.set_xlabel("day")
    ax.set_ylabel("GPUs held / GPUs")
    ax.set_ylim(0, 1.05)
    ax.legend()
    return _png(fig)


def _cdfs(results: Sequence[Metrics]) -> bytes:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for m in results:
        for ax, values in zip(axes, (m.jct, m.delays), strict=True):
            v = np.sort(np.asarray(values, dtype=np.float64)) / HOUR
            if len(v):
                ax.step(
                    np.maximum(v, 1e-3), np.arange(1, len(v) + 1) / len(v), label=m.policy.name, where="post"
                )
    for ax, what in zip(axes, ("job completion time (h)", "queueing delay (h)"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel(what)
        ax.set_ylabel("fraction of jobs")
        ax.legend()
    return _png(fig)


def _jain(results: Sequence[Metrics], edges: np.ndarray[Any, Any]) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3))
    for m in results:
        asking = m.asking.means(edges)
        values = np.divide(m.jain.means(edges), asking, out=np.full(len(asking), np.nan), where=asking > 0)
        ax.plot(_days(edges), values, label=m.policy.name, lw=1)
    ax.set_xlabel("day")
    ax.set_ylabel("Jain's index")
    ax.set_ylim(0, 1.05)
    ax.legend()
    return _png(fig)


def _fair_shares(m: Metrics, edges: np.ndarray[Any, Any]) -> bytes:
    import matplotlib.pyplot as plt

    asked = {t: m.summary["queues"][t]["mean_gpus_held"] for t in m.teams}
    top = sorted(m.teams, key=lambda t: -asked[t])[:TOP_QUEUES]
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for i, team in enumerate(top):
        color = f"C{i}"
        ax.plot(_days(edges), m.held_series[team].means(edges), color=color, lw=1, label=f"{team} held")
        ax.plot(
            _days(edges),
            m.fair_series[team].means(edges),
            color=color,
            lw=1,
            ls="--",
            label=f"{team} fair share",
        )
    ax.set_xlabel("day")
    ax.set_ylabel("GPUs")
    ax.legend(fontsize="small", ncol=2)
    return _png(fig)
