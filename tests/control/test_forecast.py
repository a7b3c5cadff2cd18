"""The forecast of when waiting work starts (kai_ray.control.forecast): named cases
built with the core's builders, each a cluster at time 0 and the starts it forecasts."""

from __future__ import annotations

import pytest

from kai_ray.control.forecast import Forecaster, forecast
from kai_ray.control.runtime import RuntimeHistory, Runtimes, shape_of
from kai_ray.core import QueueStatus
from tests.core.builders import ClusterBuilder


def starts(b: ClusterBuilder, runtimes: Runtimes | None = None, **kw: object) -> dict[str, float | None]:
    snap = b.build()
    rt = runtimes or Runtimes()
    rt.set_queues(snap.queues)
    return {job: eta.at for job, eta in forecast(snap, 0.0, rt, **kw).items()}  # type: ignore[arg-type]


def busy(b: ClusterBuilder, *ends: tuple[str, float]) -> ClusterBuilder:
    """One 8-GPU node per end, held whole by a job started at 0 that runs `end` seconds."""
    for node, end in ends:
        b.node(node, gpus=8).job(f"on-{node}", "q", gpu=8).running(node, since=0).runtime(end)
    return b


def test_a_job_starts_when_the_work_holding_its_room_ends() -> None:
    b = busy(ClusterBuilder().queue("q"), ("n0", 100), ("n1", 300))
    b.job("next", "q", gpu=8).pending()
    assert starts(b) == {"next": 100.0}


def test_jobs_in_line_each_take_the_next_end_and_hold_it_for_their_own_run() -> None:
    b = busy(ClusterBuilder().queue("q"), ("n0", 100))
    b.job("first", "q", gpu=8).pending().runtime(50)
    b.job("second", "q", gpu=8).pending().runtime(50)
    assert starts(b) == {"first": 100.0, "second": 150.0}


def test_a_gang_waits_for_room_on_enough_nodes() -> None:
    b = busy(ClusterBuilder().queue("q"), ("n0", 100), ("n1", 200), ("n2", 400))
    b.job("gang", "q", gpu=8).pending(count=2)
    assert starts(b) == {"gang": 200.0}


def test_a_small_job_behind_a_big_gang_goes_first_when_it_fits() -> None:
    b = busy(ClusterBuilder().queue("q"), ("n0", 100), ("n1", 200))
    b.job("gang", "q", gpu=8).pending(count=2)
    b.job("small", "q", gpu=8).pending().runtime(1000)
    # allocate does not hold room for the gang: the small job takes n0 at 100, and the
    # gang needs both nodes free, which is when the small job ends
    assert starts(b) == {"small": 100.0, "gang": 1100.0}


def test_higher_priority_goes_first_in_its_queue() -> None:
    b = busy(ClusterBuilder().queue("q"), ("n0", 100))
    b.job("low", "q", gpu=8, priority="train").pending().runtime(50)
    b.job("high", "q", gpu=8, priority="build").pending().runtime(50)
    assert starts(b) == {"high": 100.0, "low": 150.0}


def test_the_queue_holding_least_for_its_fair_share_takes_the_turn() -> None:
    b = ClusterBuilder().queue("rich").queue("poor")
    b.node("n0", gpus=8).job("r0", "rich", gpu=8).running("n0", since=0).runtime(100)
    b.node("n1", gpus=8).job("r1", "rich", gpu=8).running("n1", since=0).runtime(500)
    b.job("rich-next", "rich", gpu=8, created_at=-10).pending().runtime(50)
    b.job("poor-next", "poor", gpu=8).pending().runtime(50)
    eight = (8.0, 0.0, 0.0)
    shares = {q: QueueStatus(eight, eight, eight, eight) for q in ("rich", "poor")}
    assert starts(b, fair_share=shares) == {"poor-next": 100.0, "rich-next": 150.0}


def test_a_queue_at_its_gpu_limit_waits_for_its_own_work_to_end() -> None:
    b = ClusterBuilder().queue("q", gpu_limit=8)
    b.node("n0", gpus=8).job("mine", "q", gpu=8).running("n0", since=0).runtime(300)
    b.node("n1", gpus=8)  # free, but the queue may hold no more
    b.job("next", "q", gpu=8).pending()
    assert starts(b) == {"next": 300.0}


def test_strict_spread_needs_a_node_per_task() -> None:
    b = ClusterBuilder().queue("q")
    b.node("n0", gpus=8).job("half", "q", gpu=4).running("n0", since=0).runtime(100)
    b.node("n1", gpus=8).job("full", "q", gpu=8).running("n1", since=0).runtime(400)
    b.job("spread", "q", gpu=4, spread="required").pending(count=2)
    assert starts(b) == {"spread": 400.0}


def test_a_node_selector_limits_the_nodes_it_may_wait_for() -> None:
    b = ClusterBuilder().queue("q")
    b.node("a", gpus=8, pool="x").job("on-a", "q", gpu=8).running("a", since=0).runtime(500)
    b.node("b", gpus=8, pool="y").job("on-b", "q", gpu=8).running("b", since=0).runtime(100)
    b.job("picky", "q", gpu=8, node_selector={"pool": "x"}).pending()
    assert starts(b) == {"picky": 500.0}


def test_gpu_work_waits_for_a_type_it_accepts() -> None:
    """The A100 node frees first, but the job accepts H100 alone (found by the
    feature-effect suite: the forecast read the node selector only)."""
    b = ClusterBuilder().queue("q")
    b.node("h", gpus=8, gpu_type="H100").job("on-h", "q", gpu=8).running("h", since=0).runtime(500)
    b.node("a", gpus=8, gpu_type="A100").job("on-a", "q", gpu=8).running("a", since=0).runtime(100)
    b.job("h100-only", "q", gpu=8, gpu_types=("H100",)).pending()
    b.job("either", "q", gpu=8, gpu_types=("H100", "A100")).pending().runtime(50)
    b.job("cpu-only", "q", gpu=0, cpu=1, gpu_types=("H100",)).pending()
    # Work that asks no GPU is not held to the types: the first node to free takes it.
    assert starts(b) == {"h100-only": 500.0, "either": 100.0, "cpu-only": 100.0}


def test_earlier_runs_count_against_the_expected_run_time() -> None:
    b = ClusterBuilder().queue("q")
    b.node("n0", gpus=8).job("resumed", "q", gpu=8).running("n0", since=0).runtime(1000, ran=700)
    b.job("next", "q", gpu=8).pending()
    assert starts(b) == {"next": 300.0}


def test_work_past_its_expected_end_is_expected_to_end_now() -> None:
    b = ClusterBuilder().queue("q")
    b.node("n0", gpus=8).job("late", "q", gpu=8).running("n0", since=-500).runtime(100)
    b.job("next", "q", gpu=8).pending()
    assert starts(b) == {"next": 0.0}


def test_releasing_work_is_gone_now() -> None:
    b = ClusterBuilder().queue("q")
    b.node("n0", gpus=8).job("evicted", "q", gpu=8).releasing("n0")
    b.job("next", "q", gpu=8).pending()
    assert starts(b) == {"next": 0.0}


def test_a_max_runtime_bounds_work_with_no_expected_run_time() -> None:
    b = ClusterBuilder().queue("q")
    b.node("n0", gpus=8).job("capped", "q", gpu=8).running("n0", since=0).runtime(limit=600)
    b.job("next", "q", gpu=8).pending()
    assert starts(b) == {"next": 600.0}


def test_the_queue_default_is_used_when_nothing_is_declared() -> None:
    b = ClusterBuilder().queue("q", expected_runtime=250.0)
    b.node("n0", gpus=8).job("plain", "q", gpu=8).running("n0", since=0)
    b.job("next", "q", gpu=8).pending()
    assert starts(b) == {"next": 250.0}


def test_the_history_of_the_same_queue_and_shape_comes_before_the_queue_default() -> None:
    b = ClusterBuilder().queue("q", expected_runtime=250.0)
    b.node("n0", gpus=8).job("plain", "q", gpu=8).running("n0", since=0)
    b.job("next", "q", gpu=8).pending()
    history = RuntimeHistory()
    running = b.build().jobs[0]
    for ran in (100.0, 120.0, 900.0):
        history.finished(shape_of(running), ran)
    assert starts(b, Runtimes(history)) == {"next": 120.0}  # the median


def test_no_start_is_invented_when_what_holds_the_room_has_no_run_time() -> None:
    b = ClusterBuilder().queue("q")
    b.node("n0", gpus=8).job("mystery", "q", gpu=8).running("n0", since=0)
    b.job("next", "q", gpu=8).pending()
    snap = b.build()
    eta = forecast(snap, 0.0, Runtimes())["next"]
    assert eta.at is None
    assert "mystery" in eta.text and "expected_runtime" in eta.text


def test_the_text_says_when_and_from_what() -> None:
    b = busy(ClusterBuilder().queue("q"), ("n0", 5400))
    b.job("next", "q", gpu=8).pending()
    eta = forecast(b.build(), 0.0, Runtimes())["next"]
    assert eta.text == "expected to start in about 1h30m (run times: declared)"
    assert eta.as_dict(60.0) == {"at": 5400.0, "in_s": 5340.0, "text": eta.text}


def test_nothing_running_and_no_room_says_so() -> None:
    b = ClusterBuilder().queue("q").node("n0", gpus=4)
    b.job("too-big", "q", gpu=8).pending()
    eta = forecast(b.build(), 0.0, Runtimes())["too-big"]
    assert eta.at is None and "nothing that runs now" in eta.text


def test_beyond_the_horizon_is_not_forecast() -> None:
    b = busy(ClusterBuilder().queue("q"), ("n0", 10_000))
    b.job("next", "q", gpu=8).pending()
    eta = forecast(b.build(), 0.0, Runtimes(), horizon_s=1000.0)["next"]
    assert eta.at is None and "within 16m40s" in eta.text


def test_the_forecaster_makes_it_again_only_after_its_period() -> None:
    made: list[float] = []

    def make(now: float) -> dict[str, object]:
        made.append(now)
        return {}

    f = Forecaster(make, every_s=5.0)  # type: ignore[arg-type]
    for t in (0.0, 1.0, 4.9, 5.0, 6.0, 10.5):
        f.get(t)
    assert made == [0.0, 5.0, 10.5]


@pytest.mark.parametrize("gpus", [1, 4])
def test_fractional_and_partial_nodes_pack_onto_the_fullest_node(gpus: int) -> None:
    b = ClusterBuilder().queue("q")
    b.node("n0", gpus=8).job("part", "q", gpu=8 - gpus).running("n0", since=0).runtime(1000)
    b.node("n1", gpus=8).job("full", "q", gpu=8).running("n1", since=0).runtime(100)
    b.job("fits-now-on-n0", "q", gpu=gpus).pending().runtime(10)
    b.job("second", "q", gpu=8).pending()
    # the first goes to n0 at the first end (the model places only at ends), leaving n1
    # for the second
    assert starts(b) == {"fits-now-on-n0": 100.0, "second": 100.0}
