"""Benchmarks of the core: build a synthetic cluster, run cycles, report JSON figures."""

from __future__ import annotations

import gc
import resource
import statistics
import time
from collections import defaultdict
from typing import Any

from kai_ray.bench.synthetic import cycle_cluster, eviction_cluster, typed_cluster
from kai_ray.core import DEFAULT_ACTIONS, Bind, ClusterSnapshot, CycleResult, Evict, Pipeline, SchedulerConfig
from kai_ray.core.cycle import finish_cycle, paused_collection, prepare_cycle, run_action

__all__ = ["bench_cycle", "bench_eviction", "bench_scenario", "peak_rss_mb"]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _time_cycles(
    snapshot: ClusterSnapshot, config: SchedulerConfig, repeat: int, now: float = 0.0
) -> tuple[dict[str, list[float]], CycleResult]:
    """Wall and CPU milliseconds per cycle and per phase (prepare, each action, finish),
    with garbage collection paused, as run_cycle(pause_gc=True) pauses it (the figures stay
    comparable with those taken when run_cycle always paused it); then, outside the cycle,
    the full collection that frees the cycle's state (`collect_after`, what was deferred)."""
    timings: dict[str, list[float]] = defaultdict(list)
    result: CycleResult | None = None
    for _ in range(repeat):
        with paused_collection():
            wall, cpu = time.perf_counter(), time.process_time()
            phase = time.perf_counter()
            ctx = prepare_cycle(snapshot, config, now)
            timings["prepare"].append(_ms_since(phase))
            for name in config.actions:
                phase = time.perf_counter()
                run_action(ctx, name)
                timings[name].append(_ms_since(phase))
            result = finish_cycle(ctx)
            timings["cycle"].append(_ms_since(wall))
            timings["cycle_cpu"].append((time.process_time() - cpu) * 1000.0)
            del ctx
        phase = time.perf_counter()
        gc.collect()
        timings["collect_after"].append(_ms_since(phase))
    assert result is not None
    return timings, result


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def _summary(timings: dict[str, list[float]]) -> dict[str, float]:
    out = {
        "cycle_ms_p50": round(statistics.median(timings["cycle"]), 2),
        "cycle_ms_max": round(max(timings["cycle"]), 2),
        "cycle_cpu_ms_p50": round(statistics.median(timings["cycle_cpu"]), 2),
    }
    for phase, values in timings.items():
        if phase not in ("cycle", "cycle_cpu"):
            out[f"{phase}_ms_p50"] = round(statistics.median(values), 2)
    return out


def bench_cycle(
    nodes: int,
    gpus_per_node: int,
    pending: int,
    gang_size: int,
    queues: int,
    repeat: int = 5,
    actions: tuple[str, ...] = ("allocate",),
    gpu_types: int = 0,
) -> dict[str, Any]:
    """Full cycles on a synthetic cluster. With `gpu_types` of 2 or more, the same cycle
    again on the same cluster with that many GPU types (typed_cluster), in the same run,
    one cycle of each in turn (so that a slower spell of the machine weighs on both): its
    figures under "typed", and the ratio of the two p50s."""
    snapshot = cycle_cluster(nodes, gpus_per_node, pending, gang_size, queues)
    config = SchedulerConfig(actions=actions)
    if gpu_types < 2:
        timings, result = _time_cycles(snapshot, config, repeat)
    else:
        typed_snapshot = typed_cluster(snapshot, gpu_types)
        timings, typed_timings = defaultdict(list), defaultdict(list)
        for _ in range(repeat):
            for times, snap in ((timings, snapshot), (typed_timings, typed_snapshot)):
                one, last = _time_cycles(snap, config, 1)
                for key, values in one.items():
                    times[key] += values
                if snap is snapshot:
                    result = last
                else:
                    typed_result = last
    typed: dict[str, Any] = {}
    if gpu_types > 1:
        typed = {
            "gpu_types": gpu_types,
            "typed": {
                **_summary(typed_timings),
                "placements": sum(1 for d in typed_result.decisions if isinstance(d, Bind | Pipeline)),
            },
            "typed_over_one_type_p50": round(
                statistics.median(typed_timings["cycle"]) / statistics.median(timings["cycle"]), 3
            ),
        }
    placements = sum(1 for d in result.decisions if isinstance(d, Bind | Pipeline))
    p50 = statistics.median(timings["cycle"])
    return {
        "benchmark": "cycle",
        "actions": list(actions),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "pending_tasks": sum(1 for j in snapshot.jobs for t in j.tasks if t.status.value == "Pending"),
        "queues": len(snapshot.queues),
        "jobs": len(snapshot.jobs),
        "repeat": repeat,
        **_summary(timings),
        "placements": placements,
        "placements_per_s": round(placements / (p50 / 1000.0)) if p50 > 0 else None,
        **typed,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def bench_scenario(path: str, repeat: int = 5, actions: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Full cycles on a scenario file's state (docs/scenario-format.md), with its own
    settings and clock: the same measure on any state, for instance the states KAI's own
    scheduler was timed on (benchmarks/kai-v0.17.0-scale)."""
    from dataclasses import replace

    from kai_ray.scenario import load_scenario

    scenario = load_scenario(path)
    config = scenario.config if actions is None else replace(scenario.config, actions=actions)
    timings, result = _time_cycles(scenario.snapshot, config, repeat, scenario.now)
    return {
        "benchmark": "cycle",
        "scenario": scenario.name,
        "actions": list(config.actions),
        "nodes": len(scenario.snapshot.nodes),
        "jobs": len(scenario.snapshot.jobs),
        "pending_tasks": sum(
            1 for j in scenario.snapshot.jobs for t in j.tasks if t.status.value == "Pending"
        ),
        "queues": len(scenario.snapshot.queues),
        "repeat": repeat,
        **_summary(timings),
        "placements": sum(1 for d in result.decisions if isinstance(d, Bind | Pipeline)),
        "evictions": sum(1 for d in result.decisions if isinstance(d, Evict)),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def bench_eviction(
    mode: str,
    nodes: int,
    gpus_per_node: int,
    gang_gpus: int = 64,
    repeat: int = 5,
    actions: tuple[str, ...] = DEFAULT_ACTIONS,
) -> dict[str, Any]:
    snapshot = eviction_cluster(nodes, gpus_per_node, mode, gang_gpus)
    timings, result = _time_cycles(snapshot, SchedulerConfig(actions=actions), repeat)
    evictions = [d for d in result.decisions if isinstance(d, Evict)]
    placed = [d for d in result.decisions if isinstance(d, Bind | Pipeline) and d.job == "gang"]
    return {
        "benchmark": mode,
        "actions": list(actions),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "running_jobs": len(snapshot.jobs) - 1,
        "gang_gpus": gang_gpus,
        "repeat": repeat,
        **_summary(timings),
        "gang_placed": len(placed) == len(snapshot.jobs[-1].tasks),
        "evictions": len(evictions),
        "eviction_actions": sorted({d.action for d in evictions}),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
