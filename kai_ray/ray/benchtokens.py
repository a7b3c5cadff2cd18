"""`kai-ray bench ray --only tokens`: what checking tenants' tokens costs (docs/ray.md,
"Tenants"), on the bench's local cluster and scheduler, in one run:

- admissions per second of N workloads queued in one call (the `throughput` measure),
  with tokens off (no tenants configured) and on (a tenants file; the workloads a
  tenant's, so each is stamped with its tenant and meets its queue's door check);
- single submissions per second (one call, so one token check, each);
- refusals per second: single submissions with a token no tenant has, each refused with
  TokenRefused (the issue's "a refusal costs no more than a normal submission": the
  refused rate at least the accepted one).

Off and on alternate (off, on, on, off, ...) so that a machine getting slower or faster
over the run weighs on both alike. Reported: the medians of each and their ratio; and
the median of the paired ratios (each round's on against its off, taken back to back),
which a drifting machine (other work starting or ending on it) moves least: the target,
tokens on at least 0.95 of tokens off, is read from it. Also the check's own cost, timed
in this process on the same code the scheduler runs (kai_ray.control.tenants).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["TARGET_RATIO", "bench_tokens"]

TARGET_RATIO = 0.95
SINGLE = 200  # single submissions per round
SETTLE_S = 1.0  # after a round's workloads are cancelled: Ray has their capacity back
LIVE = ("Queued", "Admitting", "Running", "Preempting")


def bench_tokens(sched: Any, queued: int, rounds: int = 5) -> dict[str, Any]:
    from kai_ray.control.tenants import new_token
    from kai_ray.ray.client import Scheduler

    tenant, admin = new_token(), new_token()
    document = {
        "tenants": [{"name": "bench", "tokenHash": tenant[1], "labels": {"team": "bench"}}],
        "admins": [{"name": "bench-admin", "tokenHash": admin[1]}],
    }
    boss = Scheduler(sched.handle, admin[0])
    clients = {False: Scheduler(sched.handle, None), True: Scheduler(sched.handle, tenant[0])}
    stranger = Scheduler(sched.handle, new_token()[0])

    def switch(on: bool) -> Scheduler:
        if on:
            boss.apply_tenants(document)
        else:
            boss.clear_tenants()
        return clients[on]

    for on in (False, True):  # warm both paths
        _admissions(switch(on), max(1, queued // 10))
    admissions: dict[bool, list[float]] = {False: [], True: []}
    singles: dict[bool, list[float]] = {False: [], True: []}
    refused: list[float] = []
    for i in range(rounds):
        for on in (False, True) if i % 2 == 0 else (True, False):
            client = switch(on)
            admissions[on].append(_admissions(client, queued))
            singles[on].append(_single_submissions(client, SINGLE))
            if on:
                refused.append(_refusals(stranger, SINGLE))
    switch(False)
    figures = _figures(queued, rounds, admissions, singles)
    figures["refused_single_per_s"] = round(statistics.median(refused), 1)
    figures["refused_over_accepted_single"] = round(
        statistics.median(refused) / statistics.median(singles[True]), 3
    )
    return {**figures, "token_check_us": _check_cost(document, tenant[0])}


def _check_cost(document: dict[str, Any], token: str) -> float:
    """Microseconds per call of what the scheduler does for a token (the look-up and the
    stamp), best of 5 runs."""
    from kai_ray.control import WorkloadSpec
    from kai_ray.control.memory import MemoryStore
    from kai_ray.control.store import Records
    from kai_ray.control.tenants import TenantGate

    gate, spec, n = TenantGate(Records(MemoryStore()), document), WorkloadSpec(queue="bench"), 10_000
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            gate.stamp(gate.caller(token), spec)
        best = min(best, (time.perf_counter() - t0) / n)
    return round(best * 1e6, 2)


def _spec() -> Any:
    from kai_ray.ray.client import make_spec

    return make_spec("bench", kind="block", resources_per_worker={"CPU": 0.01})


def _admissions(client: Any, n: int) -> float:
    """Admissions per second of n one-bundle workloads queued in one call (as the
    throughput measure), then all cancelled in one call and their capacity back."""

    t0 = time.perf_counter()
    ids = client.submit_many([_spec()] * n)
    wait_counts(client, lambda c: c.get("Running", 0) >= n, timeout=300)
    rate = n / (time.perf_counter() - t0)
    _cancel(client, ids)
    return rate


def _single_submissions(client: Any, n: int) -> float:
    """Submissions per second, one call each (each call one token check)."""
    spec = _spec()
    t0 = time.perf_counter()
    ids = [client.submit(spec) for _ in range(n)]
    rate = n / (time.perf_counter() - t0)
    _cancel(client, ids)
    return rate


def _refusals(client: Any, n: int) -> float:
    """Refused submissions per second (a token no tenant has), one call each."""
    from kai_ray.control.tenants import TokenRefused

    spec = _spec()
    t0 = time.perf_counter()
    for _ in range(n):
        try:
            client.submit(spec)
        except TokenRefused:
            continue
        raise AssertionError("bench: a stranger's token was taken")
    return n / (time.perf_counter() - t0)


def _cancel(client: Any, ids: list[str]) -> None:

    client.cancel_many(ids)
    wait_counts(client, lambda c: not any(c.get(s, 0) for s in LIVE), timeout=120)
    time.sleep(SETTLE_S)


def _figures(
    queued: int, rounds: int, admissions: dict[bool, list[float]], singles: dict[bool, list[float]]
) -> dict[str, Any]:
    off, on = statistics.median(admissions[False]), statistics.median(admissions[True])
    single_off, single_on = statistics.median(singles[False]), statistics.median(singles[True])
    paired = [b / a for a, b in zip(admissions[False], admissions[True], strict=True)]
    return {
        "workloads": queued,
        "rounds": rounds,
        "tokens_off_admissions_per_s": round(off, 1),
        "tokens_on_admissions_per_s": round(on, 1),
        "tokens_off_rounds": [round(x, 1) for x in admissions[False]],
        "tokens_on_rounds": [round(x, 1) for x in admissions[True]],
        "ratio_of_medians": round(on / off, 3),
        "paired_ratios": [round(x, 3) for x in paired],
        "ratio_on_to_off": round(statistics.median(paired), 3),
        "single_submissions": SINGLE,
        "tokens_off_single_per_s": round(single_off, 1),
        "tokens_on_single_per_s": round(single_on, 1),
        "single_ratio_on_to_off": round(single_on / single_off, 3),
        "target_ratio": TARGET_RATIO,
    }


def wait_counts(sched: Any, pred: Callable[[dict[str, int]], bool], timeout: float) -> None:
    """Until the scheduler's counts of workloads by state satisfy `pred` (TimeoutError)."""
    import ray

    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred(ray.get(sched.handle.counts.remote())):
            return
        time.sleep(0.02)
    raise TimeoutError(f"bench: workloads not settled after {timeout}s")
