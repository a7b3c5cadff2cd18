"""What the operator is doing, for people: a started (or restarted) operator lists the
whole cluster, may wait for the Lease of the process it replaces, then schedules. Each
step is logged once, and `status()` says where it stands and, while it is not
scheduling, why: the in-Ray actor's status(), `kai-ray operator --in-ray --status` and
the dashboard's summary all show this one dict.

    phase     starting | listing | waiting-for-lease | scheduling
    since     when the phase began (seconds since the epoch)
    detail    one line a person reads: what it waits for, or what it has done
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LISTING", "SCHEDULING", "STARTING", "WAITING_FOR_LEASE", "Progress", "describe"]

log = logging.getLogger("kai_ray.k8s.operator")

STARTING, LISTING, WAITING_FOR_LEASE, SCHEDULING = "starting", "listing", "waiting-for-lease", "scheduling"


@dataclass(slots=True)
class Progress:
    """The operator's phase; `on_change` runs when what `status()` says changes (the
    dashboard's feed is touched there)."""

    on_change: Callable[[], None] = lambda: None
    phase: str = STARTING
    since: float = field(default_factory=time.time)
    detail: str = "starting"
    listed: dict[str, Any] = field(default_factory=dict)  # what the first lists brought
    lease: dict[str, Any] | None = None  # the lease's holder and expiry last said

    def enter(self, phase: str, detail: str) -> None:
        self.phase, self.since, self.detail = phase, time.time(), detail
        log.info("%s", detail)
        self.on_change()

    def listed_cluster(self, counts: dict[str, int], seconds: float) -> None:
        self.listed = {**counts, "seconds": round(seconds, 3)}
        what = ", ".join(f"{n} {kind}" for kind, n in counts.items())
        self.enter(LISTING, f"listed the cluster in {seconds:.1f}s: {what}")

    def waiting(self, standing: dict[str, Any]) -> None:
        """A try for the lease failed: log for whom it waits once per holder and expiry;
        report it at every try (the seconds left count down)."""
        detail = lease_wait(standing)
        key = {k: v for k, v in standing.items() if k != "wait_s"}
        if self.phase != WAITING_FOR_LEASE:
            self.lease = key
            self.enter(WAITING_FOR_LEASE, detail)
            return
        if key != self.lease:
            self.lease = key
            log.info("%s", detail)
        self.detail = detail
        self.on_change()

    def status(self, standing: dict[str, Any] | None = None) -> dict[str, Any]:
        """`standing`: the elector's now (None: no leader election), so that the seconds
        left are those of this moment."""
        waiting = self.phase == WAITING_FOR_LEASE and standing is not None
        return {
            "phase": self.phase,
            "since": self.since,
            "detail": lease_wait(standing) if waiting and standing else self.detail,
            "scheduling": self.phase == SCHEDULING,
            "listed": dict(self.listed),
            "lease": standing,
        }


def lease_wait(standing: dict[str, Any]) -> str:
    """Why a replica does not act yet, from LeaderElector.standing()."""
    lease, holder = standing["lease"], standing.get("holder")
    if standing.get("leading"):
        return f"holding lease {lease} as {holder}"
    if not holder or holder == standing["identity"]:
        return f"waiting for lease {lease} (held by nobody else; trying to take it as {standing['identity']})"
    until = standing.get("until")
    at = "" if until is None else f" (at {time.strftime('%H:%M:%S', time.localtime(until))})"
    return (
        f"waiting for lease {lease}, held by {holder}: this replica ({standing['identity']}) may take "
        f"it over in {standing.get('wait_s', 0):g}s{at} if the holder stops renewing it"
    )


def describe(status: dict[str, Any]) -> str:
    """One status dict (Progress.status(), with the actor's extras) as lines for people."""
    since = time.strftime("%H:%M:%S", time.localtime(status.get("since", time.time())))
    lines = [f"{status.get('phase', '?')} since {since}: {status.get('detail', '')}"]
    if status.get("cycles"):
        lines.append(
            f"cycles {status['cycles']}, pods bound {status.get('bound', 0)}, "
            f"evicted {status.get('evicted', 0)}"
        )
    if status.get("last_error"):
        lines.append(f"last error: {status['last_error']}")
    return "\n".join(lines)
