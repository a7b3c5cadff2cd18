"""The Grafana dashboard of kai-ray's metrics, in the style of Ray's own (a datasource
and a SessionName variable, one row of panels per question), built here so that each
panel is written once; `kai-ray dashboard grafana` prints it, and the Ray scheduler
writes it beside Ray's dashboards in the session folder, where the Grafana that Ray's
Metrics tab embeds is told to look.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["FILE_NAME", "UID", "grafana_dashboard", "queried_series"]

UID = "kai-ray-scheduler"
FILE_NAME = "kai_ray_grafana_dashboard.json"
_SEL = 'SessionName=~"$SessionName",queue=~"$Queue"'
_SESSION = 'SessionName=~"$SessionName"'


def _quantile(q: float, histogram: str, labels: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{labels}}}[5m])))"


# title, unit, expressions (legend: the label each line is named by), panel kind
_PANELS: list[tuple[str, str, list[tuple[str, str]], str]] = [
    (
        "GPUs allocated per queue",
        "short",
        [(f'sum by (queue) (ray_kai_ray_queue_allocated{{resource="gpu",{_SEL}}})', "{{queue}}")],
        "stacked",
    ),
    (
        "GPU fair share per queue",
        "short",
        [(f'sum by (queue) (ray_kai_ray_queue_fair_share{{resource="gpu",{_SEL}}})', "{{queue}}")],
        "lines",
    ),
    (
        "GPUs requested per queue (held + waiting)",
        "short",
        [(f'sum by (queue) (ray_kai_ray_queue_requested{{resource="gpu",{_SEL}}})', "{{queue}}")],
        "lines",
    ),
    (
        "GPU quota per queue",
        "short",
        [(f'max by (queue) (ray_kai_ray_queue_quota{{resource="gpu",{_SEL}}})', "{{queue}}")],
        "lines",
    ),
    (
        "Workloads waiting per queue",
        "short",
        [(f"sum by (queue) (ray_kai_ray_queue_pending_workloads{{{_SEL}}})", "{{queue}}")],
        "stacked",
    ),
    (
        "Admissions per second",
        "ops",
        [(f"sum by (queue) (rate(ray_kai_ray_admissions_total{{{_SEL}}}[5m]))", "{{queue}}")],
        "lines",
    ),
    (
        "Preemptions by reason (per 5 minutes)",
        "short",
        [(f"sum by (reason) (increase(ray_kai_ray_preemptions_total{{{_SEL}}}[5m]))", "{{reason}}")],
        "stacked",
    ),
    (
        "Admission wait (queued to running)",
        "s",
        [
            (_quantile(q, "ray_kai_ray_admission_wait_seconds", _SEL), f"p{int(q * 100)}")
            for q in (0.5, 0.95, 0.99)
        ],
        "lines",
    ),
    (
        "Scheduling cycle time",
        "s",
        [
            (_quantile(q, "ray_kai_ray_cycle_seconds", _SESSION), f"p{int(q * 100)}")
            for q in (0.5, 0.95, 0.99)
        ],
        "lines",
    ),
]


def _panel(i: int, title: str, unit: str, exprs: list[tuple[str, str]], kind: str) -> dict[str, Any]:
    stacked = kind == "stacked"
    return {
        "id": i + 1,
        "title": title,
        "type": "timeseries",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "custom": {
                    "drawStyle": "line",
                    "fillOpacity": 60 if stacked else 10,
                    "stacking": {"mode": "normal" if stacked else "none"},
                },
            },
            "overrides": [],
        },
        "options": {
            "legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull", "max"]}
        },
        "targets": [
            {"expr": expr, "legendFormat": legend, "refId": chr(ord("A") + k)}
            for k, (expr, legend) in enumerate(exprs)
        ],
    }


def _variable(name: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": f"{name}-query"},
        "definition": query,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "refresh": 2,
        "sort": 1,
    }


def grafana_dashboard() -> dict[str, Any]:
    """The dashboard, as Grafana imports it (Dashboards > Import, or provisioning)."""
    return {
        "uid": UID,
        "title": "kai-ray scheduler",
        "tags": ["ray", "kai-ray"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"selected": False},
                },
                _variable("SessionName", "label_values(ray_kai_ray_queue_allocated, SessionName)"),
                _variable("Queue", "label_values(ray_kai_ray_queue_allocated, queue)"),
            ]
        },
        "panels": [_panel(i, *spec) for i, spec in enumerate(_PANELS)],
    }


def queried_series(dashboard: dict[str, Any]) -> set[str]:
    """The metric names the dashboard's queries read (histogram `_bucket` suffix kept)."""
    names: set[str] = set()
    text = json.dumps([t["expr"] for p in dashboard["panels"] for t in p["targets"]])
    for match in re.finditer(r"(ray_kai_ray_[a-z_]+)\{", text):
        names.add(match.group(1))
    return names
