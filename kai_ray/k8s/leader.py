"""One leader among the operator's replicas, through a coordination.k8s.io/v1 Lease, with
client-go's rules: the holder renews the Lease every retry period; another replica takes
it over only once the record has stayed unchanged for a lease duration by that replica's
own clock (wall clocks and the renewTime written in the record are never compared across
machines); writes carry the resourceVersion read, so two replicas racing for an expired
Lease cannot both win.

The fence: the leader counts its lease as valid for the renew deadline from the moment it
sent its last successful renewal, and refuses every write after that (`check`, which
kai_ray.k8s.client calls before each write). A rival can take over no earlier than a
lease duration after it first saw that renewal, which it saw after it was sent, so with
renew deadline < lease duration the two never act at once, partition or not; the gap
(5 s with the defaults) absorbs requests already on the wire and a busy event loop.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from kai_ray.k8s.client import ApiError, Kube

__all__ = ["LeaderElector", "LeadershipLost", "LeaseOptions", "NotLeading", "default_identity"]

log = logging.getLogger(__name__)
# What a try may meet besides an answer: a refused or dropped connection, a slow server.
_UNREACHABLE = (OSError, aiohttp.ClientError, TimeoutError)
RELEASE_TIMEOUT = 2.0  # seconds a clean shutdown spends handing the lease back


class NotLeading(RuntimeError):
    """A write refused: this process does not hold the lease (or no longer may act on it)."""


class LeadershipLost(RuntimeError):
    """The lease could not be renewed within the renew deadline, or another replica holds it."""


def default_identity() -> str:
    """hostname_pid: a pod's hostname is its name, and the pid tells apart two processes
    on one machine (and a restarted one from the one before it)."""
    return f"{socket.gethostname()}_{os.getpid()}"


@dataclass(frozen=True, slots=True)
class LeaseOptions:
    namespace: str
    name: str = "kai-ray"
    identity: str = ""  # "": default_identity() of the process that runs the operator
    lease_duration: float = 15.0  # client-go's defaults
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                f"leader election needs retry period ({self.retry_period:g}s) < renew deadline "
                f"({self.renew_deadline:g}s) < lease duration ({self.lease_duration:g}s): set "
                "--leader-elect-retry-period, --leader-elect-renew-deadline and "
                "--leader-elect-lease-duration so"
            )


class LeaderElector:
    def __init__(
        self, kube: Kube, options: LeaseOptions, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kube, self.options, self.clock = kube, options, clock
        self.identity = options.identity or default_identity()
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{options.namespace}/leases/{options.name}"
        self.valid_until = -math.inf  # by self.clock: no write after this
        self._observed: dict[str, Any] | None = None  # the record last seen, and when it changed
        self._observed_at = -math.inf
        self._observed_wall = 0.0  # the same moment by the wall clock: for people only
        self._last_error = ""

    @property
    def leading(self) -> bool:
        return self.clock() < self.valid_until

    def standing(self) -> dict[str, Any]:
        """Where this replica stands, for people (status, dashboard, log): leading, or
        waiting for whom and until when at the earliest (later if the holder renews)."""
        lease = f"{self.options.namespace}/{self.options.name}"
        if self.leading:
            return {"lease": lease, "identity": self.identity, "leading": True, "holder": self.identity}
        record = self._observed or {}
        holder = record.get("holderIdentity") or ""
        other = bool(holder) and holder != self.identity
        wait = self._observed_at + self._duration(record) - self.clock() if other else 0.0
        return {
            "lease": lease,
            "identity": self.identity,
            "leading": False,
            "holder": holder,
            "wait_s": round(max(0.0, wait), 1),
            "until": self._observed_wall + self._duration(record) if other else None,
        }

    def check(self) -> None:
        """The write fence: raise NotLeading unless this process may act now."""
        if not self.leading:
            raise NotLeading(f"not the leader of lease {self.options.namespace}/{self.options.name}")

    # ------------------------------------------------------------ the loops

    async def acquire(self, on_try: Callable[[], None] | None = None) -> None:
        """Wait until this process holds the lease; `on_try` after each try that failed
        (the operator's status reads `standing()` there)."""
        log.info("waiting for lease %s/%s as %s", self.options.namespace, self.options.name, self.identity)
        while not await self._attempt():
            if on_try is not None:
                on_try()
            await asyncio.sleep(self._next_try())
        log.info("leading: lease %s/%s held by %s", self.options.namespace, self.options.name, self.identity)

    async def keep(self) -> None:
        """Renew every retry period; raise LeadershipLost when the renew deadline passes
        without a renewal, or when another replica holds the lease."""
        while True:
            await asyncio.sleep(self.options.retry_period)
            while not await self._attempt_in_time():
                if not self.leading:
                    raise LeadershipLost(self._lost_why())
                await asyncio.sleep(min(self.options.retry_period, max(0.0, self.valid_until - self.clock())))

    async def release(self) -> None:
        """Hand the lease back on a clean shutdown, so that a standby takes over at once
        rather than after a lease duration. Acting stops first."""
        if not self.leading:
            return
        self.valid_until = -math.inf
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT):
                lease = await self.kube.request("GET", self.path, fenced=False)
                if lease.get("spec", {}).get("holderIdentity") != self.identity:
                    return
                now = _micro_time()
                lease["spec"] = {
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": lease["spec"].get("leaseTransitions", 0),
                }
                await self.kube.request("PUT", self.path, lease, fenced=False)
            log.info("released lease %s/%s", self.options.namespace, self.options.name)
        except (ApiError, *_UNREACHABLE) as exc:  # the standby waits a lease duration instead
            log.warning("could not release lease %s/%s: %s", self.options.namespace, self.options.name, exc)

    # ------------------------------------------------------------ one try

    def _next_try(self) -> float:
        """A retry period, or sooner when the holder's lease expires before that: a
        standby takes over within a retry period of the expiry, not two."""
        expires = self._observed_at + self._duration(self._observed) - self.clock()
        return max(0.05, min(self.options.retry_period, expires + 0.01))

    async def _attempt_in_time(self) -> bool:
        remaining = self.valid_until - self.clock()
        if remaining <= 0:
            return False
        try:
            async with asyncio.timeout(remaining):
                return await self._attempt()
        except TimeoutError:
            return False

    async def _attempt(self) -> bool:
        """Acquire or renew once; True when this process holds the lease now."""
        sent = self.clock()  # before the write: the rival saw it after this
        try:
            return await self._try_update(sent)
        except LeadershipLost:
            raise
        except (ApiError, *_UNREACHABLE) as exc:  # 409: another replica wrote first; else the server away
            self._report(exc)
            return False

    def _report(self, exc: Exception) -> None:
        """A failed try, said once while it keeps failing the same way (a race lost is normal)."""
        where = f"lease {self.options.namespace}/{self.options.name}"
        if isinstance(exc, ApiError) and exc.status == 409:
            log.debug("%s: %s", where, exc)
            return
        text = str(exc)
        if isinstance(exc, ApiError) and exc.status == 404:
            text += (
                f"; does namespace {self.options.namespace} exist? (--leader-elect-namespace names another)"
            )
        if text != self._last_error:
            log.warning("%s: %s (trying again every %gs)", where, text, self.options.retry_period)
        self._last_error = text

    async def _try_update(self, sent: float) -> bool:
        try:
            lease = await self.kube.request("GET", self.path, fenced=False)
        except ApiError as exc:
            if exc.status != 404:
                raise
            return await self._create(sent)
        record = lease.get("spec") or {}
        holder = record.get("holderIdentity") or ""
        if record != self._observed:
            new_holder = holder != (self._observed or {}).get("holderIdentity", "")
            # After the read: later than the sending of any write it shows.
            self._observed, self._observed_at, self._observed_wall = record, self.clock(), time.time()
            if new_holder and holder and holder != self.identity:
                log.info(
                    "lease %s/%s is held by %r: taking it over if it goes unrenewed for %gs",
                    self.options.namespace,
                    self.options.name,
                    holder,
                    self._duration(record),
                )
        if holder and holder != self.identity:
            if self.leading:  # someone took it (an admin, or a rival by clocks gone wrong): stop now
                self.valid_until = -math.inf
                raise LeadershipLost(f"lease {self.options.name} is held by {holder}")
            if self.clock() < self._observed_at + self._duration(record):
                return False
        lease["spec"] = self._record(record, holder)
        written = await self.kube.request("PUT", self.path, lease, fenced=False)
        self._won(written, sent)
        return True

    async def _create(self, sent: float) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.options.name, "namespace": self.options.namespace},
            "spec": self._record({}, ""),
        }
        path = self.path.rsplit("/", 1)[0]
        written = await self.kube.request("POST", path, body, fenced=False)
        self._won(written, sent)
        return True

    def _record(self, old: dict[str, Any], holder: str) -> dict[str, Any]:
        now = _micro_time()
        ours = holder == self.identity
        transitions = int(old.get("leaseTransitions", 0)) + (0 if ours or not old else 1)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": math.ceil(self.options.lease_duration),
            "acquireTime": old.get("acquireTime", now) if ours else now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _won(self, written: dict[str, Any], sent: float) -> None:
        self._observed, self._observed_at = written.get("spec") or {}, self.clock()
        self._observed_wall = time.time()
        self.valid_until = sent + self.options.renew_deadline
        self._last_error = ""

    def _duration(self, record: dict[str, Any] | None) -> float:
        """The holder's lease duration as it wrote it (ours when it wrote none)."""
        seconds = (record or {}).get("leaseDurationSeconds")
        return float(seconds) if seconds else self.options.lease_duration

    def _lost_why(self) -> str:
        return (
            f"could not renew lease {self.options.namespace}/{self.options.name} within the renew "
            f"deadline ({self.options.renew_deadline:g}s)"
        )


def _micro_time() -> str:
    """Now as a Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
