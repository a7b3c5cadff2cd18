"""`GET /metrics`: the dashboard's metrics in Prometheus' text format, served by every
backend's dashboard (the Ray scheduler's, the Kubernetes operator's), so that a backend
without Ray's metrics agent (the operator) is scraped the same way.

Today one series: access refusals per queue and rule (kai_ray.control.refusals). On Ray
the same counts also reach Ray's own metrics export, with Ray's `ray_` prefix
(kai_ray.ray.metrics).
"""

from __future__ import annotations

from kai_ray.control.refusals import HELP, METRIC, RefusalCounter

__all__ = ["CONTENT_TYPE", "prometheus_text"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def prometheus_text(refusals: RefusalCounter) -> str:
    """The exposition: HELP and TYPE, then one line per (queue, rule) counted so far
    (none before the first refusal, as a Prometheus client leaves a labelled counter)."""
    lines = [f"# HELP {METRIC} {HELP}", f"# TYPE {METRIC} counter"]
    for (queue, rule), n in sorted(refusals.counts.items()):
        lines.append(f'{METRIC}{{queue="{_label(queue)}",rule="{_label(rule)}"}} {n}')
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    """A label value escaped as the text format asks (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
