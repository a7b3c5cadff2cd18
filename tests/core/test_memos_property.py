"""The core's memos change no decision (hypothesis): every in-cycle memo and every result
kept between cycles turned off decides exactly as with them on, decisions and reasons.

A memo is a shortcut: a failed search skipped for a job with the same search key
(failedsearches.py), the rest of a line settled once every job in it is sure to fail
(settling.py), a run of look-alikes taken at once (walkline.py), a cycle cache's lines
and failures kept into the next cycle (incremental/). A key that leaves out an input its
rule reads lets one job's failure stand for another's that would not fail: nothing else
shows it, since each path alone keeps every other invariant. So the clusters drawn here
hold every input a rule reads: GPU types with per-type limits and quotas for
non-preemptible work (preemptibility drawn apart from priority), fungibility, fractions,
topology, elastic and subgroup gangs, spreading, affinities, min runtime, and running
work of every priority for reclaim, preempt and consolidation.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.core import (
    ClusterSnapshot,
    CycleCache,
    CycleResult,
    SchedulerConfig,
    Topology,
    TopologyConstraint,
    run_cycle,
)
from tests.properties import examples

from .test_gpu_types_property import ACCEPTED, FUNGIBILITY, TYPED_QUEUES, TYPES, contended
from .test_invariants import clusters

TOPOLOGY = Topology("racks", ("rack",))
CONSTRAINTS = [
    None,
    None,
    TopologyConstraint("racks", required="rack"),
    TopologyConstraint("racks", preferred="rack"),
]
MIN_RUNTIMES = [None, None, 30.0, 600.0]


@st.composite
def every_input(draw: st.DrawFn) -> ClusterSnapshot:
    """A random cluster (test_invariants) or a contended one (test_gpu_types_property),
    with GPU types, per-type quotas, fungibility, topology and min runtimes added."""
    snap = draw(st.one_of(clusters(), contended()))
    nodes = [
        replace(n, gpu_type=draw(st.sampled_from(TYPES)), labels={**n.labels, "rack": f"r{i % 2}"})
        for i, n in enumerate(snap.nodes)
    ]
    queues = [
        q
        if q.parent is None
        else replace(
            q,
            gpu_types=q.gpu_types or draw(st.sampled_from(TYPED_QUEUES)),
            gpu_type_fungibility=q.gpu_type_fungibility or draw(st.sampled_from(FUNGIBILITY)),
            preempt_min_runtime=draw(st.sampled_from(MIN_RUNTIMES)),
            reclaim_min_runtime=draw(st.sampled_from(MIN_RUNTIMES)),
        )
        for q in snap.queues
    ]
    jobs = [
        replace(
            job,
            gpu_types=job.gpu_types or draw(st.sampled_from(ACCEPTED)),
            # Preemptibility apart from priority: a per-type quota binds only
            # non-preemptible work, whatever its priority.
            preemptible=draw(st.sampled_from([job.preemptible, job.preemptible, not job.preemptible])),
            topology=draw(st.sampled_from(CONSTRAINTS)),
        )
        for job in snap.jobs
    ]
    return ClusterSnapshot(nodes, queues, jobs)


def _config(memos: bool, actions: tuple[str, ...] | None = None) -> SchedulerConfig:
    config = SchedulerConfig(skip_failed_searches=memos, topologies={TOPOLOGY.name: TOPOLOGY})
    return config if actions is None else replace(config, actions=actions)


def _decided(result: CycleResult) -> tuple[object, ...]:
    """What a cycle decides: its decisions, and why each job waits (code and words)."""
    return (result.decisions, result.waiting)


@settings(max_examples=examples(600), deadline=None, suppress_health_check=list(HealthCheck))
@given(every_input(), st.sampled_from([None, ("allocate",)]), st.sampled_from([0.0, 120.0]))
def test_memos_and_kept_results_change_no_decision_or_reason(
    snap: ClusterSnapshot, actions: tuple[str, ...] | None, now: float
) -> None:
    """Without any memo (every search run, no line settled, no cache) against: the memos
    of one cycle, and a cycle cache's second cycle on the same cluster (its lines and
    failures kept from the first)."""
    without = _decided(run_cycle(snap, _config(False, actions), now))
    assert _decided(run_cycle(snap, _config(True, actions), now)) == without
    cache = CycleCache()
    run_cycle(snap, _config(True, actions), now, cache=cache)
    assert _decided(run_cycle(snap, _config(True, actions), now, cache=cache)) == without
