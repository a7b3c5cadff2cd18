"""Small traces whose answers are worked out by hand."""

from __future__ import annotations

import math

import pytest

from kai_ray.core import QueueInfo
from tests.sim.helpers import job, simulate


def _jct(sim, name):  # type: ignore[no-untyped-def]
    run = sim.runs[name]
    return run.finished - run.job.submit


def test_fifo_serves_in_submission_order_without_preemption() -> None:
    # One node of 4 GPUs. A holds all 4 for 0..100. D (4 GPUs) came before B and C, so
    # it goes first at 100 (100..110); B and C then start together at 110.
    jobs = [
        job("A", 0, 100, 4),
        job("D", 5, 10, 4),
        job("B", 10, 50, 2),
        job("C", 20, 30, 2),
    ]
    sim, m = simulate(jobs, "fifo")
    starts = {name: sim.runs[name].first_start for name in "ADBC"}
    assert starts == {"A": 0, "D": 100, "B": 110, "C": 110}
    assert {n: _jct(sim, n) for n in "ADBC"} == {"A": 100, "D": 105, "B": 150, "C": 120}
    s = m.summary
    assert s["makespan_s"] == 160
    assert s["jct_s"]["mean"] == pytest.approx((100 + 105 + 150 + 120) / 4)
    assert s["queueing_delay_s"]["mean"] == pytest.approx((0 + 95 + 100 + 90) / 4)
    busy = 4 * 100 + 4 * 10 + 2 * 50 + 2 * 30  # GPU-seconds held
    assert s["gpu_utilisation"] == pytest.approx(busy / (4 * 160))
    assert s["preemptions"] == 0


def test_fifo_skips_a_job_that_does_not_fit_for_a_smaller_one_behind_it() -> None:
    # A holds 3 of 4 GPUs; B (2 GPUs) cannot start, C (1 GPU) behind it can.
    sim, _ = simulate([job("A", 0, 100, 3), job("B", 1, 10, 2), job("C", 2, 10, 1)], "fifo")
    assert sim.runs["C"].first_start == 2
    assert sim.runs["B"].first_start == 100


def _reclaim_case(policy: str, checkpoint_s: float):  # type: ignore[no-untyped-def]
    # Two queues with 2 GPUs of quota each on one 4-GPU node. `a` borrows all 4 for a
    # 1000 s job; `b` asks for its 2 at t=250 and reclaims them (default policy).
    queues = [QueueInfo(name="a", quota=(2, 0, 0)), QueueInfo(name="b", quota=(2, 0, 0))]
    jobs = [job("A", 0, 1000, 4, queue="a"), job("B", 250, 100, 2, queue="b")]
    return simulate(jobs, policy, queues=queues, checkpoint_s=checkpoint_s)


def test_preemption_costs_exactly_the_work_since_the_last_checkpoint() -> None:
    sim, m = _reclaim_case("default", checkpoint_s=100)
    a, b = sim.runs["A"], sim.runs["B"]
    # A ran 250 s; its last checkpoint was at 200 s of run time: 50 s of 4 GPUs lost.
    assert a.preemptions == 1
    assert a.lost_gpu_s == pytest.approx(50 * 4)
    assert m.summary["gpu_hours_lost"] == pytest.approx(50 * 4 / 3600)
    assert b.first_start == 250 and b.finished == 350
    # A starts again when B is done (it needs all 4 GPUs) with 800 s left.
    assert a.finished == pytest.approx(350 + 800)
    events = [(e[0], e[1], e[2]) for e in m.events or []]
    assert (250.0, "preempt", "A") in events
    assert (350.0, "start", "A") in events


@pytest.mark.parametrize("checkpoint_s", [0.0, 60.0, 1000.0])
def test_lost_work_follows_the_checkpoint_interval(checkpoint_s: float) -> None:
    sim, _ = _reclaim_case("default", checkpoint_s)
    ran = 250.0
    kept = math.floor(ran / checkpoint_s) * checkpoint_s if checkpoint_s else ran
    assert sim.runs["A"].lost_gpu_s == pytest.approx((ran - kept) * 4)
    assert sim.runs["A"].finished == pytest.approx(350 + 1000 - kept)


def test_fifo_never_preempts() -> None:
    sim, m = _reclaim_case("fifo", checkpoint_s=100)
    assert m.summary["preemptions"] == 0
    assert sim.runs["B"].first_start == 1000


def test_a_job_larger_than_the_cluster_is_rejected_and_counted() -> None:
    sim, m = simulate([job("big", 0, 10, 8, workers=2), job("ok", 0, 10, 1)], "default")
    assert "big" in sim.runs and sim.runs["big"].rejected
    assert m.summary["rejected"] == 1 and m.summary["completed"] == 1


def test_finished_workloads_leave_the_controller() -> None:
    sim, _ = simulate([job(f"j{i}", i, 5, 1) for i in range(50)], "default")
    assert all(r.finished is not None for r in sim.runs.values())
    assert not sim.ctl.workloads


def test_fair_share_and_jain_over_time() -> None:
    # Two queues of equal quota, each with one job of 2 GPUs: each holds its fair share.
    queues = [QueueInfo(name="a", quota=(2, 0, 0)), QueueInfo(name="b", quota=(2, 0, 0))]
    jobs = [job("A", 0, 100, 2, queue="a"), job("B", 0, 100, 2, queue="b")]
    for policy in ("fifo", "default"):
        _, m = simulate(jobs, policy, queues=queues)
        assert m.summary["jain_index"] == pytest.approx(1.0)
        assert m.summary["queues"]["a"]["held_over_fair_share"] == pytest.approx(1.0)


def test_unequal_shares_lower_jain_index() -> None:
    # Queue a takes the whole node first; b waits 100 s under FIFO while its fair share
    # is 2: for those 100 s, x = (2, 0) -> J = 0.5; then b alone runs -> J = 1.
    queues = [QueueInfo(name="a", quota=(2, 0, 0)), QueueInfo(name="b", quota=(2, 0, 0))]
    jobs = [job("A", 0, 100, 4, queue="a"), job("B", 0, 100, 2, queue="b")]
    _, m = simulate(jobs, "fifo", queues=queues)
    assert m.summary["jain_index"] == pytest.approx((0.5 * 100 + 1.0 * 100) / 200)


def test_a_scheduling_period_handles_events_at_its_end() -> None:
    from kai_ray.sim.cluster import parse_cluster
    from kai_ray.sim.engine import Options, Simulation
    from kai_ray.sim.policies import make_policy

    jobs = [job("A", 3, 20, 1), job("B", 12, 5, 1)]
    sim = Simulation(
        jobs, parse_cluster("1x4"), [QueueInfo(name="a")], make_policy("default"), Options(period_s=10)
    )
    m = sim.run()
    assert (sim.runs["A"].first_start, sim.runs["B"].first_start) == (10, 20)
    assert sim.runs["A"].finished == 30 and sim.runs["B"].finished == 25
    assert m.summary["queueing_delay_s"]["mean"] == pytest.approx((7 + 8) / 2)


def test_an_elastic_job_grows_into_free_gpus() -> None:
    from kai_ray.sim.trace import SimJob

    elastic = SimJob(id="E", submit=0, duration=100, queue="a", workers=4, gpus=1, min_workers=2)
    sim, m = simulate([job("A", 0, 50, 2), elastic], "default")
    log = [(e[1], e[2], e[4]) for e in m.events or []]
    assert ("start", "E", 2.0) in log  # its gang of 2 while A holds the other 2
    assert ("finish", "E", 4.0) in log  # it grew to 4 once A finished
    assert sim.runs["E"].finished == 100


def test_fair_share_follows_what_is_held_when_nobody_waits() -> None:
    # b's job ends at 50 while nobody waits (no step runs): its fair share drops to 0.
    queues = [QueueInfo(name="a", quota=(2, 0, 0)), QueueInfo(name="b", quota=(2, 0, 0))]
    _, m = simulate([job("A", 0, 100, 2, queue="a"), job("B", 0, 50, 2, queue="b")], "default", queues=queues)
    assert m.summary["queues"]["b"]["mean_fair_share_gpus"] == pytest.approx(2 * 50 / 100)
    assert m.summary["jain_index"] == pytest.approx(1.0)


def test_reclaiming_an_elastic_jobs_surplus_is_no_preemption() -> None:
    from kai_ray.sim.trace import SimJob

    queues = [QueueInfo(name="a", quota=(2, 0, 0)), QueueInfo(name="b", quota=(2, 0, 0))]
    elastic = SimJob(id="E", submit=0, duration=1000, queue="a", workers=4, gpus=1, min_workers=1)
    sim, m = simulate([elastic, job("B", 100, 50, 2, queue="b")], "default", queues=queues)
    assert sim.runs["B"].first_start == 100  # b's quota taken back from E's surplus
    assert sim.runs["E"].preemptions == 0 and sim.runs["E"].finished == 1000
    held = m.held_series["a"]
    assert (held.values[0], held.mean(100, 150)) == (4.0, 2.0)


def test_time_based_fair_share_favours_the_queue_that_used_less() -> None:
    # a held the whole node for 10,000 s; then a and b ask for 4 GPUs each at once.
    queues = [QueueInfo(name="a"), QueueInfo(name="b")]
    jobs = [job("hog", 0, 10000, 4, queue="a")]
    jobs += [job(f"{q}{i}", 10000, 5000, 1, queue=q) for q in "ab" for i in range(4)]
    held = {}
    for policy in ("default", "timeshare"):
        _, m = simulate(jobs, policy, queues=queues)
        held[policy] = {q: m.held_series[q].mean(10000, 15000) for q in "ab"}
    assert held["default"] == {"a": 2.0, "b": 2.0}  # no memory: an equal split
    assert held["timeshare"]["b"] > held["timeshare"]["a"]  # a's past use counts against it


@pytest.mark.parametrize("policy", ["default", "timeshare"])
def test_skipping_steps_when_nobody_waits_changes_nothing(policy: str) -> None:
    from kai_ray.sim.cluster import parse_cluster
    from kai_ray.sim.engine import Options, Simulation
    from kai_ray.sim.policies import make_policy

    queues = [QueueInfo(name="a", quota=(1, 0, 0)), QueueInfo(name="b", quota=(1, 0, 0))]
    jobs = [job("hog", 0, 10000, 3, queue="a")]
    jobs += [job(f"b-early{i}", 100 * i, 50 + 30 * i, 1, queue="b") for i in range(20)]
    jobs += [job(f"{q}{i}", 10000 + i, 3000 + 100 * i, 1, queue=q) for q in "ab" for i in range(5)]
    outcomes = []
    for every_end in (False, True):
        options = Options(checkpoint_s=600, event_log=True, step_every_end=every_end)
        sim = Simulation(jobs, parse_cluster("1x4"), queues, make_policy(policy), options)
        m = sim.run()
        runs = {n: (r.first_start, r.finished, r.preemptions) for n, r in sim.runs.items()}
        outcomes.append((runs, m.summary["jain_index"], m.summary["gpu_utilisation"], sim.steps))
    (skipping, s_jain, s_util, s_steps), (every, e_jain, e_util, e_steps) = outcomes
    assert skipping == every
    assert (s_jain, s_util) == pytest.approx((e_jain, e_util))
    assert s_steps < e_steps


def test_usage_history_sees_runs_that_ended_without_a_step() -> None:
    # a and b each used the node for about the same GPU-seconds, each run ending while
    # nobody waited (no step then). At 20,000 s both ask for it: an equal split. Had
    # the ends gone unrecorded, each queue would seem to have held its GPUs until the
    # next step, b (until 20,000 s) far longer than a (until 5,000 s): a favoured.
    queues = [QueueInfo(name="a"), QueueInfo(name="b")]
    jobs = [job("A", 0, 1000, 4, queue="a"), job("B", 5000, 900, 4, queue="b")]
    jobs += [job(f"{q}{i}", 20000, 1000, 1, queue=q) for q in "ab" for i in range(4)]
    _, m = simulate(jobs, "timeshare", queues=queues)
    held = {q: m.held_series[q].mean(20000, 21000) for q in "ab"}
    assert held == {"a": 2.0, "b": 2.0}


@pytest.mark.parametrize("policy", ["fifo", "default", "timeshare"])
def test_incremental_cycles_decide_as_full_ones(policy: str) -> None:
    """A contended mix (gangs, elastic jobs, three queues) on 3 nodes: every job starts,
    is preempted and ends at the same times whether the core keeps its state between
    steps or builds it afresh every step."""
    import random

    from kai_ray.sim.cluster import parse_cluster
    from kai_ray.sim.engine import Options, Simulation
    from kai_ray.sim.policies import make_policy
    from kai_ray.sim.trace import SimJob

    rng = random.Random(7)
    jobs = []
    for i in range(90):
        workers = rng.choice([1, 1, 1, 2, 4])
        elastic = workers > 1 and rng.random() < 0.3
        jobs.append(
            SimJob(
                id=f"j{i}",
                submit=float(i * rng.randint(5, 40)),
                duration=float(rng.randint(50, 3000)),
                queue=rng.choice("abc"),
                workers=workers,
                gpus=float(rng.choice([1, 2, 4])),
                min_workers=1 if elastic else 0,
            )
        )
    jobs.sort(key=lambda j: j.submit)
    queues = [QueueInfo(name=q, quota=(8, 0, 0)) for q in "abc"]
    outcomes = []
    for incremental in (True, False):
        options = Options(checkpoint_s=300, incremental=incremental)
        sim = Simulation(jobs, parse_cluster("3x8"), queues, make_policy(policy), options)
        m = sim.run()
        outcomes.append(
            ({n: (r.first_start, r.finished, r.preemptions) for n, r in sim.runs.items()}, m.summary)
        )
    (inc, inc_summary), (full, full_summary) = outcomes
    assert inc == full
    assert inc_summary["gpu_hours_lost"] == pytest.approx(full_summary["gpu_hours_lost"])
    if policy != "fifo":
        assert inc_summary["preemptions"] > 0  # the mix is contended enough to evict


def test_with_exact_run_times_the_forecast_at_submission_is_each_start() -> None:
    # One node of 4 GPUs: A holds it 0..100; B (4 GPUs, 50 s) and C (4 GPUs) queue behind.
    jobs = [job("A", 0, 100, 4), job("B", 10, 50, 4), job("C", 20, 30, 4), job("D", 700, 10, 4)]
    sim, m = simulate(jobs, "fifo", runtime_estimates="exact")
    assert {n: sim.runs[n].forecast for n in "ABCD"} == {"A": 0, "B": 100, "C": 150, "D": 700}
    assert {n: sim.runs[n].first_start for n in "ABCD"} == {"A": 0, "B": 100, "C": 150, "D": 700}
    # none waited longer than 10 minutes: nothing to score
    assert m.summary["forecast_accuracy"]["jobs_waited_over_10m"] == 0


def test_forecast_accuracy_scores_long_waits_against_their_wait() -> None:
    # A holds the node for 2000 s; B waits 1990 s. With noisy run times A's is off, and
    # B's forecast is off by as much: the error is that over B's wait.
    jobs = [job("A", 0, 2000, 4), job("B", 10, 100, 4)]
    _, m = simulate(jobs, "fifo", runtime_estimates="exact")
    assert m.summary["forecast_accuracy"] == {
        "jobs_waited_over_10m": 1,
        "forecast": 1,
        "no_forecast": 0,
        "relative_error_p50": 0.0,
        "relative_error_p90": 0.0,
    }
    noisy, m = simulate(jobs, "fifo", runtime_estimates="noisy")
    b = noisy.runs["B"]
    assert b.first_start == 2000 and b.forecast is not None and b.forecast != 2000
    error = abs(b.forecast - 2000) / 1990
    assert m.summary["forecast_accuracy"]["relative_error_p50"] == pytest.approx(error)
    assert 0.5 * 2000 <= b.forecast <= 2 * 2000 + 10


def test_without_run_times_no_forecast_is_scored() -> None:
    _, m = simulate([job("A", 0, 2000, 4), job("B", 10, 100, 4)], "fifo")
    assert "forecast_accuracy" not in m.summary
