"""Usage history for time-based fair share: numbers worked out by hand."""

from __future__ import annotations

import pytest

from kai_ray.control.usage import UsageHistory

CAP = (10.0, 100.0, 1000.0)


def gpu(history: UsageHistory, now: float) -> dict[str, float]:
    return {q: round(u[0], 9) for q, u in history.usage(now).items()}


def test_kais_example_24_gpu_hours_in_a_10_gpu_cluster_over_10_hours() -> None:
    h = UsageHistory(window_s=10 * 3600)
    h.record(0, {"a": (8, 0, 0)}, CAP)  # 8 GPUs for 3 hours = 24 GPU-hours
    h.record(3 * 3600, {"a": (0, 0, 0)}, CAP)
    assert gpu(h, 10 * 3600) == {"a": 0.24}


def test_sliding_window_counts_the_last_window_seconds_piecewise_constant() -> None:
    h = UsageHistory(window_s=10)
    h.record(0, {"a": (4, 50, 0), "b": (0, 0, 0)}, CAP)
    h.record(5, {"a": (10, 0, 0), "b": (0, 0, 500)}, CAP)
    # [0, 5): a holds 4 GPUs; [5, 10): 10. Over 100 GPU-seconds of capacity: 70.
    assert h.usage(10) == {"a": (0.7, 0.25, 0.0), "b": (0.0, 0.0, 0.25)}
    # At 12 the window is [2, 12]: 3 s of 4 GPUs and 7 s of 10.
    assert gpu(h, 12) == {"a": 0.82, "b": 0.0}
    # Long after: only the last allocation is left in the window.
    assert gpu(h, 100) == {"a": 1.0, "b": 0.0}


def test_only_the_recorded_part_of_the_window_counts_and_capacity_may_change() -> None:
    h = UsageHistory(window_s=3600)
    h.record(100, {"a": (5, 0, 0)}, CAP)
    assert gpu(h, 100) == {"a": 0.0}  # no time has passed: no history yet
    assert gpu(h, 110) == {"a": 0.5}  # 50 GPU-s of 100 (not of a whole hour's capacity)
    h.record(110, {"a": (5, 0, 0)}, (20.0, 100.0, 1000.0))  # the cluster doubled
    assert gpu(h, 120) == {"a": round(100 / 300, 9)}


def test_tumbling_window_starts_afresh_at_each_boundary() -> None:
    h = UsageHistory(window_s=10, window_type="tumbling")
    h.record(0, {"a": (10, 0, 0), "b": (0, 0, 0)}, CAP)
    h.record(8, {"a": (0, 0, 0), "b": (5, 0, 0)}, CAP)
    assert gpu(h, 9) == {"a": round(80 / 90, 9), "b": round(5 / 90, 9)}
    # Window [10, 20): what happened before 10 no longer counts.
    assert gpu(h, 14) == {"a": 0.0, "b": 0.5}
    # The sliding window of the same length still remembers a's burst.
    s = UsageHistory(window_s=10)
    s.record(0, {"a": (10, 0, 0), "b": (0, 0, 0)}, CAP)
    s.record(8, {"a": (0, 0, 0), "b": (5, 0, 0)}, CAP)
    assert gpu(s, 14) == {"a": 0.4, "b": 0.3}


def test_half_life_weighs_recent_usage_more() -> None:
    h = UsageHistory(window_s=100, half_life_s=5)
    h.record(0, {"a": (10, 0, 0), "b": (0, 0, 0)}, CAP)
    h.record(5, {"a": (0, 0, 0), "b": (10, 0, 0)}, CAP)
    # Weights 0.5 ** ((10 - t) / 5): a held the cluster during [0, 5) (weight 1/4 to
    # 1/2), b during [5, 10) (1/2 to 1). Integrals: a 0.25 c, b 0.5 c, capacity 0.75 c.
    assert gpu(h, 10) == {"a": round(1 / 3, 9), "b": round(2 / 3, 9)}
    # Without decay the two halves weigh the same.
    plain = UsageHistory(window_s=100)
    plain.record(0, {"a": (10, 0, 0), "b": (0, 0, 0)}, CAP)
    plain.record(5, {"a": (0, 0, 0), "b": (10, 0, 0)}, CAP)
    assert gpu(plain, 10) == {"a": 0.5, "b": 0.5}


def test_half_life_inside_a_sliding_window_cuts_the_piece_at_the_edge_exactly() -> None:
    h = UsageHistory(window_s=10, half_life_s=10)
    h.record(0, {"a": (10, 0, 0)}, CAP)
    h.record(10, {"a": (0, 0, 0)}, CAP)
    # Window [5, 15]: a held everything during [5, 10), weights 2**-1 to 2**-0.5; the
    # capacity counts over [5, 15], weights 2**-1 to 1.
    expected = (2**-0.5 - 2**-1) / (1 - 2**-1)
    assert gpu(h, 15) == {"a": round(expected, 9)}


def test_memory_stays_bounded_and_the_figures_stay_close() -> None:
    h = UsageHistory(window_s=1000, max_segments=64)
    # a holds the whole cluster on even seconds, nothing on odd ones: half of the time.
    for t in range(20_000):
        h.record(t, {"a": (10.0 if t % 2 == 0 else 0.0, 0, 0)}, CAP)
        assert len(h) <= 64
    assert gpu(h, 20_000)["a"] == pytest.approx(0.5, abs=4 / 64)
    # A queue that starts now is added to every piece kept and has no history.
    h.record(20_000, {"a": (0, 0, 0), "new": (10, 0, 0)}, CAP)
    assert gpu(h, 20_010)["new"] == pytest.approx(10 / 1000, abs=1e-9)


def test_time_must_not_go_back_and_bad_settings_say_the_fix() -> None:
    h = UsageHistory(window_s=10)
    h.record(5, {"a": (1, 0, 0)}, CAP)
    with pytest.raises(ValueError, match="before the last one"):
        h.record(4, {}, CAP)
    with pytest.raises(ValueError, match="window_s is 0; use a duration > 0"):
        UsageHistory(window_s=0)
    with pytest.raises(ValueError, match="half_life_s is -1; use 0"):
        UsageHistory(window_s=1, half_life_s=-1)
    assert UsageHistory(window_s=1).usage(3) == {}
