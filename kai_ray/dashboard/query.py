"""The workload list's filters, sort and paging (`GET /api/v1/workloads?...`), for the
page and for scripts alike. A bad parameter is refused naming it and what it takes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["STATE_ORDER", "QueryError", "select_workloads"]

# The order a person reads states in: what waits first, what is done last.
STATE_ORDER = ("Queued", "Admitting", "Running", "Preempting", "Failed", "Cancelled", "Succeeded")
_STATE_RANK = {s: i for i, s in enumerate(STATE_ORDER)}
_BIG = float("inf")
SORTS: dict[str, Any] = {
    "line": lambda w: (_STATE_RANK.get(w["state"], 99), w["queue"], w["position"] or 0, w["created_at"]),
    "waiting": lambda w: -(w["waiting_s"] if w["waiting_s"] is not None else -1.0),
    "priority": lambda w: (-w["priority"], w["created_at"]),
    "created": lambda w: w["created_at"],
    "name": lambda w: w["name"],
    "queue": lambda w: (w["queue"], w["position"] if w["position"] is not None else _BIG),
    "state": lambda w: (_STATE_RANK.get(w["state"], 99), w["created_at"]),
    "gpus": lambda w: -w["gpus"],
    "preemptions": lambda w: -w["preemptions"],
    # The soonest forecast start first, then waiting work with no forecast, then the rest.
    "starts": lambda w: (*_starts(w.get("eta")), w["created_at"]),
}


def _starts(eta: Any) -> tuple[int, float]:
    if eta is None:
        return (2, 0.0)
    return (1, 0.0) if eta.get("in_s") is None else (0, eta["in_s"])


DEFAULT_LIMIT = 200
MAX_LIMIT = 100_000


class QueryError(ValueError):
    """A query parameter the API does not take (the message names it and the fix)."""


def select_workloads(rows: Sequence[dict[str, Any]], params: Mapping[str, str]) -> dict[str, Any]:
    """{"total", "offset", "limit", "items"} for the parameters: `queue` (that queue and
    those below it: rows of a tree are passed with `subtree`), `state` (comma-separated),
    `q` (words that must all appear in the id, name, queue or reason, any case), `sort`
    (one of SORTS), `order` (asc or desc), `offset`, `limit` (0: all). Items leave out
    each workload's history (`GET /api/v1/workloads/{id}` has it)."""
    unknown = set(params) - {"queue", "state", "q", "sort", "order", "offset", "limit", "token"}
    if unknown:
        raise QueryError(
            f"workloads: unknown parameter {sorted(unknown)[0]!r}; "
            "use queue, state, q, sort, order, offset or limit"
        )
    selected = list(rows)
    if params.get("queue"):
        queues = set(params["queue"].split(","))
        selected = [w for w in selected if w["queue"] in queues]
    if params.get("state"):
        states = {s.strip().capitalize() for s in params["state"].split(",")}
        bad = states - set(STATE_ORDER)
        if bad:
            raise QueryError(f"workloads: state {sorted(bad)[0]!r} is not one of {', '.join(STATE_ORDER)}")
        selected = [w for w in selected if w["state"] in states]
    if params.get("q"):
        words = params["q"].lower().split()
        selected = [w for w in selected if all(word in _haystack(w) for word in words)]
    sort = params.get("sort", "line")
    if sort not in SORTS:
        raise QueryError(f"workloads: sort {sort!r} is not one of {', '.join(SORTS)}")
    order = params.get("order", "asc")
    if order not in ("asc", "desc"):
        raise QueryError(f"workloads: order {order!r} must be asc or desc")
    selected.sort(key=SORTS[sort], reverse=order == "desc")
    offset = _int(params, "offset", 0)
    limit = _int(params, "limit", DEFAULT_LIMIT)
    page = selected[offset:] if limit == 0 else selected[offset : offset + min(limit, MAX_LIMIT)]
    items = [{k: v for k, v in w.items() if k != "history"} for w in page]
    return {"total": len(selected), "offset": offset, "limit": limit, "items": items}


def _haystack(w: dict[str, Any]) -> str:
    return f"{w['id']} {w['name']} {w['queue']} {w['reason']} {w['state']}".lower()


def _int(params: Mapping[str, str], name: str, default: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise QueryError(f"workloads: {name}={raw!r} must be a whole number >= 0") from None
    if value < 0:
        raise QueryError(f"workloads: {name}={raw!r} must be a whole number >= 0")
    return value
