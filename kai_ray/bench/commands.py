"""`kai-ray bench ...`: speed and memory of the core (and of the Ray backend), as JSON; `bench
plot` draws BENCHMARKS.md's comparisons from benchmarks/summary.json."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kai_ray.core import DEFAULT_ACTIONS

__all__ = ["add_commands"]


DEEP_BACKLOG = 20_000  # pending jobs: `bench cycle --steady --deep`
# `bench k8s --shape` (kai_ray.bench.k8sshapes.SHAPES, not imported here: it needs the
# Kubernetes extra)
K8S_SHAPES = ("topology-512", "reclaim-250", "unschedulable-1000", "gangs")


def _actions(value: str) -> tuple[str, ...]:
    return DEFAULT_ACTIONS if value == "all" else tuple(a for a in value.split(",") if a)


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = subparsers.add_parser("bench", help="measure the scheduler's speed (prints JSON)")
    kinds = bench.add_subparsers(dest="bench_kind", required=True)

    cycle = kinds.add_parser("cycle", help="full cycles on a synthetic cluster")
    cycle.add_argument("--nodes", type=int, default=None, help="default 1000; with --steady 10000")
    cycle.add_argument("--gpus-per-node", type=int, default=8)
    cycle.add_argument(
        "--pending", type=int, default=None, help="pending tasks (5000); with --steady, pending jobs (1000)"
    )
    cycle.add_argument("--gang-size", type=int, default=8)
    cycle.add_argument("--queues", type=int, default=50, help="leaf queues")
    cycle.add_argument(
        "--gpu-types",
        type=int,
        default=0,
        help="then the same cycle with this many GPU types (queues naming each), in the same run",
    )
    cycle.add_argument(
        "--steady",
        action="store_true",
        help="one job finished or submitted per cycle on a full cluster: the incremental cycle "
        "beside the full one, in the same process",
    )
    cycle.add_argument("--running", type=int, default=8000, help="--steady: running jobs")
    cycle.add_argument(
        "--deep",
        action="store_true",
        help=f"--steady: then again with {DEEP_BACKLOG:,} pending jobs (a deep backlog): one result per size",
    )
    cycle.add_argument(
        "--scenario",
        metavar="FILE",
        help="time cycles on a scenario file's state instead (its own settings; --actions "
        "overrides its actions when given)",
    )
    _runs(cycle, default_actions=None)  # allocate; with --scenario, the file's actions
    cycle.set_defaults(func=_run_cycle)

    for mode in ("reclaim", "preempt"):
        p = kinds.add_parser(mode, help=f"the cycle that {mode}s for a 64-GPU gang")
        _cluster_size(p)
        p.add_argument("--gang-gpus", type=int, default=64)
        _runs(p, default_actions="all")
        p.set_defaults(func=_run_eviction, mode=mode)

    ray_bench = kinds.add_parser(
        "ray", help="admission latency, deep queues and backlogs through a real local Ray cluster"
    )
    ray_bench.add_argument("--json", action="store_true")
    ray_bench.add_argument(
        "--only",
        default="latency,throughput,preemption,tokens,queued,backlog",
        help="comma list of the measures to take (default: all of them)",
    )
    ray_bench.add_argument(
        "--queued", type=int, default=10_000, help="workloads queued behind the full cluster, per way"
    )
    ray_bench.add_argument("--backlog", type=int, default=2000, help="one-GPU workloads of the backlog")
    ray_bench.set_defaults(func=_run_ray)

    k8s = kinds.add_parser(
        "k8s", help="the Kubernetes operator's binding speed on a real kube-apiserver, beside the raw ceiling"
    )
    k8s.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="default 500 (with --shape: the shape's own, where it has one)",
    )
    k8s.add_argument("--clusters", type=int, default=200, help="RayClusters to schedule")
    k8s.add_argument("--pods-per-cluster", type=int, default=8)
    k8s.add_argument("--gang", type=int, default=64, help="pods of the gang timed once it fits")
    k8s.add_argument(
        "--world-nodes",
        type=int,
        default=None,
        help="instead: the operator's steady step beside a full rebuild, in a world of this many nodes",
    )
    k8s.add_argument("--world-pods", type=int, default=100_000, help="with --world-nodes: pods in the world")
    k8s.add_argument("--steps", type=int, default=20, help="with --world-nodes: steady steps measured")
    k8s.add_argument(
        "--shape",
        choices=K8S_SHAPES,
        default=None,
        help="instead: one shape of KAI-Scheduler's own scale tests, end to end (docs/kubernetes.md)",
    )
    k8s.add_argument(
        "--pods",
        type=int,
        default=None,
        help="with --shape: its size (topology-512: the job's pods; reclaim-250: the gang's; "
        "unschedulable-1000: the jobs)",
    )
    k8s.add_argument("--gangs", default=None, help="with --shape gangs: the gang sizes (default 8,64,256)")
    k8s.add_argument("--gpus-per-node", type=int, default=8, help="with --shape: GPUs of each node")
    k8s.add_argument(
        "--kai-bin",
        metavar="DIR",
        default=None,
        help="with --shape: also run KAI-Scheduler's scheduler, binder and podgrouper found in DIR "
        "(its CRDs in DIR/crds) on the same shape, and print both figures and their ratio; kai-ray "
        "never builds KAI",
    )
    k8s.add_argument("--json", action="store_true")
    k8s.set_defaults(func=_run_k8s)

    fc = kinds.add_parser(
        "forecast",
        help="the forecast of when each waiting workload starts, on a full cluster with a deep line",
    )
    fc.add_argument("--nodes", type=int, default=1000, help="nodes, each held by a running job")
    fc.add_argument("--gpus-per-node", type=int, default=8)
    fc.add_argument("--waiting", type=int, default=10_000, help="waiting workloads of mixed shapes")
    fc.add_argument("--queues", type=int, default=50, help="leaf queues")
    fc.add_argument("--repeat", type=int, default=5, help="forecasts to time (p50 and max reported)")
    fc.add_argument("--json", action="store_true")
    fc.set_defaults(func=_run_forecast)

    dash = kinds.add_parser(
        "dashboard",
        help="each dashboard page's time to show in headless Chromium, on many queues and workloads",
    )
    dash.add_argument("--queues", type=int, default=1000)
    dash.add_argument("--workloads", type=int, default=10_000)
    dash.add_argument("--nodes", type=int, default=1250, help="nodes of 8 GPUs")
    dash.add_argument("--rounds", type=int, default=3, help="page loads per page (the median is reported)")
    dash.add_argument("--screenshots", default=None, help="folder to keep a screenshot of each page in")
    dash.add_argument("--json", action="store_true")
    dash.set_defaults(func=_run_dashboard)

    plot = kinds.add_parser(
        "plot", help="draw BENCHMARKS.md's comparisons as SVGs, one per comparison, from a summary file"
    )
    plot.add_argument("--out", required=True, help="folder to write bench-COMPARISON.svg into")
    plot.add_argument(
        "--summary", default=None, help="the figures (default: benchmarks/summary.json of this checkout)"
    )
    plot.set_defaults(func=_run_plot)


def _run_plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kai_ray.bench.plots import SUMMARY, write_plots

    for path in write_plots(Path(args.summary) if args.summary else SUMMARY, Path(args.out)):
        print(path)
    return 0


def _run_forecast(args: argparse.Namespace) -> int:
    from kai_ray.bench.forecast import bench_forecast

    sizes = (args.nodes, args.gpus_per_node, args.waiting, args.queues)
    return _print(bench_forecast(*sizes, repeat=args.repeat), args.json)


def _run_k8s(args: argparse.Namespace) -> int:
    if args.shape:
        return _run_k8s_shape(args)
    if args.kai_bin:
        raise SystemExit(
            "kai-ray bench k8s: --kai-bin runs with --shape NAME (one of " + ", ".join(K8S_SHAPES) + ")"
        )
    args.nodes = 500 if args.nodes is None else args.nodes
    if args.world_nodes:
        from kai_ray.bench.k8sworld import run_world_bench

        return _print(run_world_bench(args.world_nodes, args.world_pods, args.steps), args.json)
    from kai_ray.bench.k8s import run_k8s_bench

    result = run_k8s_bench(args.nodes, args.clusters, args.pods_per_cluster, args.gang)
    return _print(result, args.json)


def _run_k8s_shape(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kai_ray.bench.k8sschedulers import KaiBinError
    from kai_ray.bench.k8sshapes import run_shape

    try:
        gangs = tuple(int(n) for n in args.gangs.split(",") if n) if args.gangs else None
    except ValueError:
        raise SystemExit(f"kai-ray bench k8s: --gangs {args.gangs!r}: give sizes such as 8,64,256") from None
    try:
        result = run_shape(
            args.shape,
            pods=args.pods,
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            gangs=gangs,
            kai_bin=Path(args.kai_bin) if args.kai_bin else None,
        )
    except (KaiBinError, ValueError) as e:
        raise SystemExit(f"kai-ray bench k8s: {e}") from None
    return _print(result, args.json)


def _run_dashboard(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kai_ray.bench.dashboard import run_dashboard_bench

    shots = Path(args.screenshots) if args.screenshots else None
    result = run_dashboard_bench(args.queues, args.workloads, args.nodes, args.rounds, shots)
    return _print(result, args.json)


def _cluster_size(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus-per-node", type=int, default=8)


def _runs(p: argparse.ArgumentParser, default_actions: str | None) -> None:
    p.add_argument("--repeat", type=int, default=5, help="cycles to time (p50 and max reported)")
    p.add_argument("--actions", default=default_actions, help="comma list, or 'all'")
    p.add_argument("--json", action="store_true")


def _print(result: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")
    return 0


def _run_cycle(args: argparse.Namespace) -> int:
    from kai_ray.bench.run import bench_cycle, bench_scenario

    if args.scenario:
        chosen = None if args.actions is None else _actions(args.actions)  # None: the file's own
        return _print(bench_scenario(args.scenario, repeat=args.repeat, actions=chosen), args.json)
    args.actions = args.actions or "allocate"
    if args.steady:
        from kai_ray.bench.steady import bench_steady

        nodes, pending = args.nodes or 10_000, 1000 if args.pending is None else args.pending
        for size in (pending, DEEP_BACKLOG) if args.deep else (pending,):
            steady = (nodes, args.gpus_per_node, args.running, size, args.queues)
            _print(bench_steady(*steady, repeat=args.repeat, actions=_actions(args.actions)), args.json)
        return 0
    nodes, pending = args.nodes or 1000, 5000 if args.pending is None else args.pending
    sizes = (nodes, args.gpus_per_node, pending, args.gang_size, args.queues)
    result = bench_cycle(*sizes, repeat=args.repeat, actions=_actions(args.actions), gpu_types=args.gpu_types)
    return _print(result, args.json)


def _run_eviction(args: argparse.Namespace) -> int:
    from kai_ray.bench.run import bench_eviction

    sizes = (args.nodes, args.gpus_per_node, args.gang_gpus)
    result = bench_eviction(args.mode, *sizes, repeat=args.repeat, actions=_actions(args.actions))
    return _print(result, args.json)


def _run_ray(args: argparse.Namespace) -> int:
    from kai_ray.ray.bench import bench_ray  # needs Ray; imported only here

    measures = tuple(m for m in args.only.split(",") if m)
    bench_ray(json_out=args.json, measures=measures, queued_deep=args.queued, backlog=args.backlog)
    return 0
