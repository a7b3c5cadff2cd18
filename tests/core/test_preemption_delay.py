"""The preemption delay on random clusters (hypothesis): off, it changes nothing; over, it
changes nothing; within it, nothing is evicted or moved to make room; and the shortcuts
(skipped searches, held-back look-alikes) decide as running every search does."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.core import ClusterSnapshot, CycleResult, Evict, SchedulerConfig, TaskStatus, run_cycle
from tests.properties import examples

from .builders import ClusterBuilder
from .test_invariants import clusters, look_alikes

DELAY = 120.0
EVICTING = {"reclaim", "preempt", "consolidation"}


def _waiting_since(snap: ClusterSnapshot, since: float) -> ClusterSnapshot:
    """Every pending task started waiting at `since`; the cluster can grow."""
    jobs = [
        replace(
            job,
            tasks=[replace(t, since=since) if t.status is TaskStatus.PENDING else t for t in job.tasks],
        )
        for job in snap.jobs
    ]
    return replace(snap, jobs=jobs, can_grow=True)


def _codes(result: CycleResult) -> dict[str, str]:
    return {job: reason.code for job, reason in result.waiting.items()}


SETTINGS = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.one_of(clusters(), look_alikes()), st.booleans())
def test_off_it_changes_nothing(snap: ClusterSnapshot, grows: bool) -> None:
    """A delay of 0 where the cluster can grow, or a delay where it cannot: today's cycle."""
    today = run_cycle(snap, SchedulerConfig(), 0.0)
    delay = 0.0 if grows else DELAY
    assert run_cycle(replace(snap, can_grow=grows), SchedulerConfig(preemption_delay_s=delay), 0.0) == today


@SETTINGS
@given(st.one_of(clusters(), look_alikes()))
def test_over_it_changes_nothing(snap: ClusterSnapshot) -> None:
    """Every job has waited its delay: the cycle decides as without one."""
    waited = _waiting_since(snap, -DELAY)
    today = run_cycle(replace(waited, can_grow=False), SchedulerConfig(), 0.0)
    assert run_cycle(waited, SchedulerConfig(preemption_delay_s=DELAY), 0.0) == today


@SETTINGS
@given(st.one_of(clusters(), look_alikes()))
def test_within_it_nobody_is_evicted_or_moved_to_make_room(snap: ClusterSnapshot) -> None:
    """Every job started waiting now: no reclaim, preempt or consolidation eviction (only
    stale gangs are still evicted), and where the cycle would have evicted without the
    delay, some job says it waits for nodes (or, where a later action found its victims
    within their min runtime, that)."""
    fresh = _waiting_since(snap, 0.0)
    held = run_cycle(fresh, SchedulerConfig(preemption_delay_s=DELAY), 0.0)
    assert not [d for d in held.decisions if isinstance(d, Evict) and d.action in EVICTING]
    today = run_cycle(replace(fresh, can_grow=False), SchedulerConfig(), 0.0)
    # Required topologies aside: there reclaim and preempt may place a gang that evicts
    # nobody where allocate would not (a node without the level's label), so a job held
    # back in consolidation may start after all (a victim-search matter, not the delay's).
    if any(j.topology for j in snap.jobs):
        return
    if [d for d in today.decisions if isinstance(d, Evict) and d.action in EVICTING]:
        assert {"preemption-delay", "min-runtime"} & set(_codes(held).values())


@SETTINGS
@given(st.one_of(clusters(), look_alikes()), st.sampled_from([0.0, -60.0, -DELAY]))
def test_held_back_look_alikes_decide_as_every_search_does(snap: ClusterSnapshot, since: float) -> None:
    """A look-alike of a held-back job waits without a search of its own: the same
    decisions and reason codes as when every search runs."""
    waited = _waiting_since(snap, since)
    config = SchedulerConfig(preemption_delay_s=DELAY)
    skipping = run_cycle(waited, config, 0.0)
    searching = run_cycle(waited, replace(config, skip_failed_searches=False), 0.0)
    assert skipping.decisions == searching.decisions
    assert {j: c for j, c in _codes(skipping).items() if c == "preemption-delay"} == {
        j: c for j, c in _codes(searching).items() if c == "preemption-delay"
    }


def test_a_look_alike_on_its_own_clock_is_not_held_back_by_anothers() -> None:
    """Two look-alikes, the first in line within its delay, the second past it: the
    second preempts (a held-back key never stands for a job whose delay is over)."""
    snap = (
        ClusterBuilder()
        .grows()
        .node("n0", gpus=1)
        .queue("q", gpu_quota=1)
        .job("train", "q")
        .running("n0")
        .job("first", "q", priority="inference")
        .pending()
        .job("second", "q", priority="inference")
        .pending()
        .build()
    )
    snap.jobs[1].created_at, snap.jobs[2].created_at = -10.0, -5.0  # first is older: first in line
    snap.jobs[2].tasks[0].since = -DELAY
    result = run_cycle(snap, SchedulerConfig(preemption_delay_s=DELAY), 0.0)
    assert result.waiting["first"].code == "preemption-delay"
    assert {(type(d).__name__, d.job) for d in result.decisions} == {
        ("Evict", "train"),
        ("Pipeline", "second"),
    }
