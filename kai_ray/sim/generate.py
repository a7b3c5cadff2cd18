"""`kai-ray sim-trace`: a generated trace in the generic CSV (docs/simulator.md) where big
gangs (32 to 64 GPUs) arrive among a stream of small jobs: the mix in which a big gang
starves without reservations. Seeded, so a figure can be made again.

With `--gpu-types`, each job also accepts one of the types, an ordered list of several,
or any (the `gpu_types` column). Those are drawn from a second generator seeded from the
same seed: the jobs themselves stay exactly those of the same seed without the option,
so a typed run can be set beside an untyped one."""

from __future__ import annotations

import argparse
import csv
import math
import random
from collections.abc import Sequence
from pathlib import Path

from kai_ray.sim.gputypes import comma_types

__all__ = ["add_commands", "big_gang_rows", "draw_gpu_types"]

# (share of jobs, GPUs per worker, workers, median run time in s): small jobs mostly.
_KINDS = (
    (0.80, (1, 2, 4), (1,), 1800.0),
    (0.14, (8,), (1, 2), 3 * 3600.0),
    (0.06, (8,), (4, 6, 8), 4 * 3600.0),
)
_QUEUES = ("team-a", "team-b", "team-c")
# What a job accepts when there are GPU types: (share of jobs, how many types; 0: any).
_ACCEPTS = ((0.5, 1), (0.25, 2), (0.25, 0))


def big_gang_rows(seed: int, days: float, gpus: int, load: float = 1.0) -> list[dict[str, object]]:
    """Jobs arriving at random (Poisson) for `days`, sized so that they ask for about
    `load` times a cluster of `gpus` GPUs; run times log-normal around each kind's median
    (clipped to 2 min..24 h)."""
    rng = random.Random(seed)
    mean_gpu_s = sum(
        share * (sum(g) / len(g)) * (sum(w) / len(w)) * median * math.exp(0.5)
        for share, g, w, median in _KINDS
    )
    rate = load * gpus / mean_gpu_s  # jobs per second
    rows: list[dict[str, object]] = []
    t, end = 0.0, days * 86400.0
    while True:
        t += rng.expovariate(rate)
        if t >= end:
            return rows
        _, per_worker, workers, median = rng.choices(_KINDS, weights=[k[0] for k in _KINDS])[0]
        n = rng.choice(workers)
        duration = min(max(rng.lognormvariate(math.log(median), 1.0), 120.0), 86400.0)
        rows.append(
            {
                "submit_time": round(t, 1),
                "duration": round(duration, 1),
                "gpus": rng.choice(per_worker),
                "queue": rng.choice(_QUEUES),
                "gang_size": n,
                "max_workers": n,
                "name": f"job-{len(rows)}",
            }
        )


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gen = subparsers.add_parser(
        "sim-trace",
        help="write a generated trace for kai-ray sim: big gangs (32-64 GPUs) among small jobs",
    )
    gen.add_argument("--out", metavar="FILE", required=True, help="the CSV to write (generic format)")
    gen.add_argument("--days", type=float, default=3.0, help="how long jobs keep arriving (default 3)")
    gen.add_argument("--gpus", type=int, default=256, help="the cluster's GPUs the load is sized for")
    gen.add_argument("--load", type=float, default=1.0, help="GPU-seconds asked / offered (default 1.0)")
    gen.add_argument("--seed", type=int, default=0, help="the random seed (default 0)")
    gen.add_argument(
        "--gpu-types",
        metavar="T,T,...",
        help="GPU types (e.g. H100,A100,L4): each job accepts one of them (half the jobs), two "
        "in order of preference (a quarter) or any (a quarter): the gpu_types column",
    )
    gen.set_defaults(func=_write)


def _write(args: argparse.Namespace) -> int:
    rows = big_gang_rows(args.seed, args.days, args.gpus, args.load)
    if args.gpu_types is not None:
        draw_gpu_types(rows, comma_types(args.gpu_types, "--gpu-types", args.gpu_types), args.seed)
    with Path(args.out).open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["submit_time"])
        writer.writeheader()
        writer.writerows(rows)
    big = sum(1 for r in rows if int(str(r["gpus"])) * int(str(r["gang_size"])) >= 32)
    print(f"{args.out}: {len(rows)} jobs, {big} gangs of 32 GPUs or more")
    return 0


def draw_gpu_types(rows: list[dict[str, object]], types: Sequence[str], seed: int) -> None:
    """Add each row's `gpu_types` (`H100|A100`: most preferred first; empty: any)."""
    # A generator of its own (seeded from `seed`), so the rows' other draws are unchanged.
    rng = random.Random(f"{seed}/gpu-types")
    for row in rows:
        _, count = rng.choices(_ACCEPTS, weights=[a[0] for a in _ACCEPTS])[0]
        row["gpu_types"] = "|".join(rng.sample(list(types), min(count, len(types))))
