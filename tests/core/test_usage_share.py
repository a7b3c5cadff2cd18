"""Time-based fair share in a whole cycle: historical usage shifts the over-quota split."""

from __future__ import annotations

from collections import Counter

from kai_ray.core import Bind, ClusterSnapshot, CycleResult
from tests.core.builders import ClusterBuilder, cycle


def two_queues(jobs_each: int = 16) -> ClusterSnapshot:
    b = ClusterBuilder().nodes_(2, gpus=8).queue("a").queue("b")
    for q in ("a", "b"):
        for i in range(jobs_each):
            b.job(f"{q}{i}", q).pending()
    return b.build()


def with_usage(snap: ClusterSnapshot, usage: dict[str, tuple[float, float, float]]) -> ClusterSnapshot:
    return ClusterSnapshot(snap.nodes, snap.queues, snap.jobs, usage=usage)


def gpus_bound(result: CycleResult) -> Counter[str]:
    return Counter(d.job[0] for d in result.decisions if isinstance(d, Bind))


def test_a_queue_that_used_a_lot_gets_a_smaller_over_quota_share() -> None:
    plain = cycle(two_queues(), "allocate")
    assert plain.queues["a"].fair_share[0] == plain.queues["b"].fair_share[0] == 8
    assert gpus_bound(plain) == {"a": 8, "b": 8}
    # a used half the cluster over the window, b nothing: weights 0.5 + 1 (0.5 - 0.5)
    # and 0.5 + 1 (0.5 - 0): 16 GPUs split 1 : 2 -> 5.33 and 10.67 -> 5 and 11.
    used = cycle(with_usage(two_queues(), {"a": (0.5, 0, 0), "b": (0, 0, 0)}), "allocate")
    assert used.queues["a"].fair_share[0] == 5 and used.queues["b"].fair_share[0] == 11
    assert gpus_bound(used) == {"a": 5, "b": 11}
    # kValue scales the effect; 0 turns it off.
    off = cycle(with_usage(two_queues(), {"a": (0.5, 0, 0)}), "allocate", k_value=0)
    assert off.queues["a"].fair_share[0] == 8


def test_zero_history_gives_the_plain_result() -> None:
    plain = cycle(two_queues(), "allocate")
    zero = cycle(with_usage(two_queues(), {"a": (0, 0, 0), "b": (0, 0, 0)}), "allocate")
    assert zero.decisions == plain.decisions and zero.queues == plain.queues


def test_usage_shifts_the_split_at_every_level_of_the_tree() -> None:
    b = ClusterBuilder().nodes_(2, gpus=8).queue("d1").queue("d2")
    b.queue("a1", parent="d1").queue("a2", parent="d1").queue("b1", parent="d2")
    for q in ("a1", "a2", "b1"):
        for i in range(16):
            b.job(f"{q}-{i}", q).pending()
    snap = b.build()
    plain = cycle(snap, "allocate")
    assert [plain.queues[q].fair_share[0] for q in ("d1", "d2", "a1", "a2")] == [8, 8, 4, 4]
    # a1 used a quarter of the cluster; its department's usage is the sum of its children.
    usage = {"a1": (0.25, 0.0, 0.0), "a2": (0.0, 0.0, 0.0), "d1": (0.25, 0.0, 0.0), "d2": (0.0, 0.0, 0.0)}
    used = cycle(with_usage(snap, usage), "allocate")
    # Top: weights 0.5 + (0.5 - 0.25) = 0.75 and 1: 16 x 3/7 = 6.86 and 16 x 4/7 = 9.14,
    # rounded down to 6 and 9; the GPU left over goes to the larger remainder: d1 7, d2 9.
    assert [used.queues[q].fair_share[0] for q in ("d1", "d2")] == [7, 9]
    # Inside d1: a1 0.5 + (0.5 - 0.25) = 0.75, a2 1: 7 x 3/7 = 3, 7 x 4/7 = 4.
    assert [used.queues[q].fair_share[0] for q in ("a1", "a2")] == [3, 4]
