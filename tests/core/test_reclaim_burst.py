"""Reclaim takes placements of the same cycle, as KAI does, unless that cycle's allocate
placed more than RECLAIM_PLACED_UP_TO jobs (docs/semantics.md, "Reclaim after a
burst"): then only what ran before the cycle, and the reclaimer waits one cycle.

The state is scenario kai-solver/reclaim-takes-a-placement-of-the-cycle beside a burst
of one-GPU jobs of a third queue on nodes of their own. Allocate places x of queue b on
n0's free GPUs and cannot place big (4 GPUs on one node). With x takeable, reclaim frees
n0 (x and r2, lower priority than r); without, it takes r, which holds n1."""

from __future__ import annotations

import pytest

from kai_ray.core import Bind, Evict, Pipeline, TakeBack
from kai_ray.core.actions.evictions import RECLAIM_PLACED_UP_TO

from .builders import ClusterBuilder, cycle


def _state(burst: int) -> ClusterBuilder:
    b = ClusterBuilder().queue("a", gpu_quota=4).queue("b", gpu_quota=0, weight=0).queue("c", gpu_quota=0)
    b.node("n0", gpus=4, pool="main").node("n1", gpus=4, pool="main")
    for i in range((burst + 3) // 4):
        b.node(f"f{i}", gpus=4, pool="burst")
    b.job("r", "b", gpu=4, priority="build-preemptible").running("n1")
    b.job("r2", "b", gpu=1).running("n0", count=2)
    b.job("big", "a", gpu=4, node_selector={"pool": "main"}).pending()
    b.job("x", "b", gpu=1, node_selector={"pool": "main"}).pending(2)
    for i in range(burst):
        b.job(f"burst-{i}", "c", gpu=1, node_selector={"pool": "burst"}).pending()
    return b


@pytest.mark.parametrize(
    ("burst", "taken"),
    [
        (RECLAIM_PLACED_UP_TO - 1, {"x", "r2"}),  # x and the burst: the limit, not past it
        (RECLAIM_PLACED_UP_TO, {"r"}),  # one job past it: x stays bound
    ],
)
def test_reclaim_takes_the_cycles_placements_unless_a_burst_was_placed(burst: int, taken: set[str]) -> None:
    result = cycle(_state(burst).build(), "allocate", "reclaim")
    bound = {d.job for d in result.decisions if isinstance(d, Bind)}
    assert {f"burst-{i}" for i in range(burst)} <= bound
    gone = {d.job for d in result.decisions if isinstance(d, (Evict, TakeBack))}
    assert gone == taken
    assert {d.job for d in result.decisions if isinstance(d, Pipeline)} == {"big"}
    assert ("x" in bound) == ("x" not in taken)
