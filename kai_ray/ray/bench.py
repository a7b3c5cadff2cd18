"""`kai-ray bench ray`: the scheduler on a real local Ray cluster, against Ray alone.

In one run, on a fresh local multi-node cluster (ray.cluster_utils, fake GPUs):
- submit-to-running latency (p50/p95) of 1-bundle and 8-bundle workloads through kai-ray
  (one actor call: submit, cycle, pinned placement group, ready) against creating the
  same placement group directly, and the overhead (kai-ray minus direct);
- admissions per second for N (default 1,000) workloads queued at once, against Ray
  alone creating the same N one-bundle placement groups (all asked for at once, then
  waited for), and the ratio (target: at least 0.8);
- preemption latency: from the victim stopped (its group removed) to the preemptor
  running, and from the preemptor's submission to it running (grace period 0);
- tenants' tokens: admissions per second with tokens checked against without, in the
  same run (kai_ray.ray.benchtokens; target: at least 0.95).
Each sample removes its group and waits 0.2 s, both paths alike: Ray re-uses capacity
freed a moment earlier only after a retry back-off (~1 s), which would swamp the figures.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from kai_ray.ray.benchtokens import wait_counts

__all__ = ["bench_ray"]

SETTLE_S = 0.2
CLUSTER = "local ray.cluster_utils: head (2 CPU) + 2 nodes (8 CPU, 4 fake GPUs)"
QUEUES = [
    {"name": "bench", "resources": {"gpu": {"quota": -1}, "cpu": {"quota": -1}}},
    {"name": "pq", "resources": {"gpu": {"quota": 8}, "cpu": {"quota": -1}}},
]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(ms), 3), "p95_ms": round(_pct(ms, 0.95), 3), "n": len(ms)}


def _direct(bundles: list[dict[str, float]], samples: int) -> list[float]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        pg = placement_group(bundles, strategy="PACK")
        ray.get(pg.ready())
        out.append((time.perf_counter() - t0) * 1e3)
        remove_placement_group(pg)
        time.sleep(SETTLE_S)
    return out


def _through_kai(sched: Any, bundle: dict[str, float], n: int, samples: int) -> list[float]:
    import ray

    from kai_ray.ray.client import make_spec, new_workload_id

    spec = make_spec("bench", kind="block", workers=n, resources_per_worker=bundle)
    out = []
    for _ in range(samples):
        wid = new_workload_id("bench")
        t0 = time.perf_counter()
        info = ray.get(sched.handle.admit.remote(wid, _asdict(spec), 30.0))
        out.append((time.perf_counter() - t0) * 1e3)
        assert info["state"] == "Running", info
        sched.finish(wid, info["attempt"], True)
        time.sleep(SETTLE_S)
    return out


def _asdict(spec: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(spec)


def _latency(sched: Any, samples: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in (1, 8):
        bundle = {"CPU": 0.5}
        _direct([bundle] * n, 3)  # warm both paths
        _through_kai(sched, bundle, n, 3)
        direct = _direct([bundle] * n, samples)
        kai = _through_kai(sched, bundle, n, samples)
        d, k = _summary(direct), _summary(kai)
        out[f"{n}_bundle"] = {
            "direct": d,
            "kai_ray": k,
            "overhead_p50_ms": round(k["p50_ms"] - d["p50_ms"], 3),
            "ratio_p50": round(k["p50_ms"] / d["p50_ms"], 2) if d["p50_ms"] else None,
        }
    return out


def _throughput(sched: Any, queued: int, rounds: int = 3) -> dict[str, Any]:
    """kai-ray and Ray alone, alternately, after a small warm-up of each: the medians of
    `rounds` rounds (one round swings by a third on a loaded 2-core machine)."""
    _ray_alone(queued // 10)
    _admit_all(sched, queued // 10)
    alone, kai = [], []
    for _ in range(rounds):
        alone.append(_ray_alone(queued))
        kai.append(_admit_all(sched, queued))
    rate, alone_rate = statistics.median(kai), statistics.median(alone)
    return {
        "workloads": queued,
        "rounds": rounds,
        "admissions_per_s": round(rate, 1),
        "admissions_per_s_rounds": [round(x, 1) for x in kai],
        "ray_alone_per_s": round(alone_rate, 1),
        "ray_alone_per_s_rounds": [round(x, 1) for x in alone],
        "ratio_to_ray_alone": round(rate / alone_rate, 3),
        "target_ratio": 0.8,
    }


def _admit_all(sched: Any, n: int) -> float:
    """Admissions per second of n one-bundle workloads queued in one call."""
    from kai_ray.ray.client import make_spec

    spec = make_spec("bench", kind="block", resources_per_worker={"CPU": 0.01})
    t0 = time.perf_counter()
    ids = sched.submit_many([spec] * n)
    wait_counts(sched, lambda c: c.get("Running", 0) >= n, timeout=300)
    rate = n / (time.perf_counter() - t0)
    for wid in ids:
        sched.cancel(wid)
    time.sleep(1.0)
    return rate


def _ray_alone(n: int) -> float:
    """Placement groups per second when Ray alone creates n one-bundle groups, all asked
    for first and then waited for (the most it can do; kai-ray adds its decisions)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    t0 = time.perf_counter()
    groups = [placement_group([{"CPU": 0.01}], strategy="PACK") for _ in range(n)]
    ray.get([pg.ready() for pg in groups])
    rate = n / (time.perf_counter() - t0)
    for pg in groups:
        remove_placement_group(pg)
    time.sleep(1.0)
    return rate


def _preemption(sched: Any, rounds: int) -> dict[str, Any]:
    from kai_ray.ray.client import make_spec

    victim_spec = make_spec(
        "pq", "train", kind="block", workers=2, grace_period=0, resources_per_worker={"GPU": 4, "CPU": 0.1}
    )
    urgent_spec = make_spec(
        "pq", "inference", kind="block", grace_period=0, resources_per_worker={"GPU": 4, "CPU": 0.1}
    )
    stop_to_run, submit_to_run = [], []
    for _ in range(rounds):
        victim = sched.submit(victim_spec)
        sched.wait(victim, ["Running"], 30)
        t0 = time.time()
        urgent = sched.submit(urgent_spec)
        info = sched.wait(urgent, ["Running"], 30)
        assert info["state"] == "Running", info
        stopped = next(h[0] for h in sched.info(victim)["history"] if h[1] == "Preempting")
        running = next(h[0] for h in info["history"] if h[2] == "Running")
        stop_to_run.append((running - stopped) * 1e3)
        submit_to_run.append((running - t0) * 1e3)
        sched.cancel(urgent)
        sched.cancel(victim)
        time.sleep(SETTLE_S)
    return {
        "victim_stopped_to_preemptor_running": _summary(stop_to_run),
        "preemptor_submit_to_running": _summary(submit_to_run),
    }


MEASURES = ("latency", "throughput", "preemption", "tokens", "queued", "backlog")


def bench_ray(
    json_out: bool = False,
    samples: int = 30,
    queued: int = 1000,
    preemptions: int = 5,
    measures: tuple[str, ...] = MEASURES,
    queued_deep: int = 10_000,
    backlog: int = 2000,
) -> dict[str, Any]:
    """Run the measures asked for, each on a fresh local cluster (the first three share
    one); print and return the figures."""
    from kai_ray.ray.benchqueue import bench_backlog, bench_queued, local_cluster
    from kai_ray.ray.benchtokens import bench_tokens

    unknown = sorted(set(measures) - set(MEASURES))
    if unknown:
        raise ValueError(f"bench ray --only: no measure {unknown[0]!r}; choose from {', '.join(MEASURES)}")
    result: dict[str, Any] = {"cluster": CLUSTER}
    classic = [m for m in measures if m in ("latency", "throughput", "preemption", "tokens")]
    if classic:
        with local_cluster(QUEUES) as sched:
            take: dict[str, Callable[[], dict[str, Any]]] = {
                "latency": lambda: _latency(sched, samples),
                "throughput": lambda: _throughput(sched, queued),
                "preemption": lambda: _preemption(sched, preemptions),
                "tokens": lambda: bench_tokens(sched, queued),
            }
            for name in classic:
                result[name] = take[name]()
    if "queued" in measures:
        result["queued"] = bench_queued(QUEUES, queued_deep)
    if "backlog" in measures:
        with local_cluster(QUEUES) as sched:
            result["backlog"] = bench_backlog(sched, backlog)
    result["targets"] = _targets(result)
    print(json.dumps(result, indent=2) if json_out else _text(result))
    return result


def _targets(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from kai_ray.ray.benchqueue import WAYS

    """Each target of a measure taken, and whether this run met it."""
    out: dict[str, dict[str, Any]] = {}
    if "latency" in r:
        worst = max(v["overhead_p50_ms"] for v in r["latency"].values())
        out["latency"] = {"target": "p50 overhead < 10 ms", "met": worst < 10.0}
    if "throughput" in r:
        ratio = r["throughput"]["ratio_to_ray_alone"]
        out["throughput"] = {"target": "admissions >= 0.8 of Ray alone", "met": ratio >= 0.8}
    if "tokens" in r:
        ratio = r["tokens"]["ratio_on_to_off"]
        out["tokens"] = {"target": "admissions with tokens >= 0.95 of without (paired)", "met": ratio >= 0.95}
    if "queued" in r:
        q = r["queued"]
        for way, figures in q.items():
            if way not in WAYS:
                continue
            per_10k = figures["kb_per_workload"] * 10_000 / 1024
            fine = figures["ray_worker_processes_added"] <= 0 and per_10k < 300
            if "single_submission" in figures:  # one at a time
                fine = fine and figures["single_submission"]["p50_ms"] < 5.0
                what = "no Ray worker process, < 300 MB per 10,000 queued, single p50 < 5 ms"
            else:  # in one call
                fine = fine and figures["submissions_per_s"] >= 1000
                what = "no Ray worker process, < 300 MB per 10,000 queued, >= 1,000 submissions/s"
            out[f"queued_{way}"] = {"target": what, "met": fine}
    if "backlog" in r:
        ratio = r["backlog"]["ratio_to_ray_alone"]
        out["backlog"] = {"target": "within 1.1x of Ray alone", "met": ratio <= 1.1}
    return out


def _text(r: dict[str, Any]) -> str:
    from kai_ray.ray.benchqueue import WAYS

    lines = [r["cluster"]]
    for name, v in r.get("latency", {}).items():
        lines.append(
            f"submit->running {name:9}: kai-ray p50 {v['kai_ray']['p50_ms']:.2f} ms "
            f"p95 {v['kai_ray']['p95_ms']:.2f} ms | direct placement group p50 "
            f"{v['direct']['p50_ms']:.2f} ms p95 {v['direct']['p95_ms']:.2f} ms | "
            f"overhead p50 {v['overhead_p50_ms']:+.2f} ms"
        )
    if "throughput" in r:
        t = r["throughput"]
        lines.append(
            f"admissions: {t['workloads']} queued workloads, median of {t['rounds']} rounds: "
            f"{t['admissions_per_s']}/s; Ray alone {t['ray_alone_per_s']}/s "
            f"(ratio {t['ratio_to_ray_alone']}, target >= {t['target_ratio']})"
        )
    if "preemption" in r:
        p = r["preemption"]
        lines.append(
            f"preemption: victim stopped -> preemptor running p50 "
            f"{p['victim_stopped_to_preemptor_running']['p50_ms']:.1f} ms; preemptor "
            f"submit -> running p50 {p['preemptor_submit_to_running']['p50_ms']:.1f} ms"
        )
    if "tokens" in r:
        t = r["tokens"]
        lines.append(
            f"tokens: {t['workloads']} queued workloads, median of {t['rounds']} rounds: "
            f"{t['tokens_on_admissions_per_s']}/s with tokens, {t['tokens_off_admissions_per_s']}/s "
            f"without (paired ratio {t['ratio_on_to_off']}, of medians {t['ratio_of_medians']}, "
            f"target >= {t['target_ratio']}); the check {t['token_check_us']} us a call; single "
            f"submissions {t['tokens_on_single_per_s']}/s with, {t['tokens_off_single_per_s']}/s without"
        )
    floor = r.get("queued", {}).get("ray_calls_in_flight")
    if floor:
        lines.append(
            f"Ray alone, {floor['calls']} calls in flight to an async actor: {floor['kb_per_call']} KB each "
            "(the floor of .remote() and .map(), whose ObjectRefs are such calls)"
        )
    for way, q in r.get("queued", {}).items():
        if way not in WAYS:
            continue
        single = q.get("single_submission")
        lines.append(
            f"queued via .{way}(): {q['workloads']} behind a full cluster add "
            f"{q['ray_worker_processes_added']} Ray worker processes and {q['resident_mb_added']} MB "
            f"({q['kb_per_workload']} KB each); {q['submissions_per_s']} submissions/s"
            + (f", single p50 {single['p50_ms']} ms p95 {single['p95_ms']} ms" if single else "")
        )
    if "backlog" in r:
        b = r["backlog"]
        lines.append(
            f"backlog: {b['workloads']} one-GPU workloads of {b['seconds_each']} s on {b['gpus']:g} GPUs: "
            f"kai-ray {b['kai_ray_s']} s, Ray alone {b['ray_alone_s']} s (ratio {b['ratio_to_ray_alone']})"
        )
    for name, t in r["targets"].items():
        lines.append(f"target {name} ({t['target']}): {'met' if t['met'] else 'NOT met'}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    bench_ray(json_out="--json" in sys.argv)
