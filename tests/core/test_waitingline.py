"""The waiting line a cycle cache keeps: adding and removing jobs leaves the line a fresh
build would make, and what a cycle takes from it is a copy."""

from __future__ import annotations

from kai_ray.core.rules.capacity import capped
from kai_ray.core.rules.policy import job_order_key
from kai_ray.core.session.failedsearches import FailedSearches
from kai_ray.core.session.waitingline import WaitingLine
from kai_ray.core.state.build import build_state
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job
from kai_ray.core.state.queues import build_queue_tree

from .builders import ClusterBuilder


def _state() -> ClusterState:
    snap = (
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("a", gpu_quota=1)
        .queue("b", gpu_quota=1)
        .job("old", "a", created_at=1)
        .pending()
        .job("urgent", "a", priority="inference", created_at=5)
        .pending()
        .job("young", "a", created_at=9)
        .pending()
        .job("gang", "b", min_member=2, created_at=2)
        .pending(2)
        .job("limited", "b", created_at=3, preemptible=False)
        .pending()
        .build()
    )
    return build_state(snap, build_queue_tree(snap.queues))


def _line(state: ClusterState, jobs: list[Job] | None = None) -> WaitingLine:
    waiting = state.waiting if jobs is None else jobs
    assert waiting is not None
    return WaitingLine(waiting, job_order_key, lambda job: capped(state, job))


def _names(line: WaitingLine) -> dict[int, list[str]]:
    return {q: [entry[-1].name for entry in entries] for q, entries in sorted(line.lines.items())}


def test_each_queue_is_in_job_order() -> None:
    state = _state()
    assert _names(_line(state)) == {0: ["urgent", "old", "young"], 1: ["gang", "limited"]}


def test_removing_and_adding_back_gives_the_fresh_line() -> None:
    state = _state()
    line = _line(state)
    urgent, gang = state.job_index["urgent"], state.job_index["gang"]
    line.remove(urgent)
    line.remove(gang)
    assert urgent not in line and len(line) == 3
    assert _names(line) == {0: ["old", "young"], 1: ["limited"]}
    line.add(gang)
    line.add(urgent)
    assert _names(line) == _names(_line(state))


def test_a_queue_left_empty_leaves_the_line() -> None:
    state = _state()
    line = _line(state)
    line.remove(state.job_index["gang"])
    line.remove(state.job_index["limited"])
    assert 1 not in line.lines


def test_the_kept_search_keys_follow_the_line() -> None:
    state = _state()
    line = _line(state)
    line.sure_to_fail(FailedSearches())  # made now, then kept up to date
    line.remove(state.job_index["old"])
    kept = line.sure_to_fail(FailedSearches())
    fresh = _line(state, [j for j in state.waiting or [] if j.name != "old"]).sure_to_fail(FailedSearches())
    assert kept.keys == fresh.keys
    assert {k: set(g) for k, g in kept.groups.items() if g} == {
        k: set(g) for k, g in fresh.groups.items() if g
    }
    # Non-preemptible jobs (inference priority, or said so) have their queue checked
    # first: settled through a step, not by their key alone.
    assert {name for g in kept.capped.values() for name in g} == {"urgent", "limited"}


def test_a_cycle_takes_copies() -> None:
    state = _state()
    line = _line(state)
    before = _names(line)
    queues = line.job_queues(state, lambda q, job: (0,), lambda job: None)
    while (job := queues.next_job()) is not None:
        queues.done(job)
    sure = line.sure_to_fail(FailedSearches())
    sure.tried(state.job_index["old"])
    assert _names(line) == before
    assert id(state.job_index["old"]) in line.sure_to_fail(FailedSearches()).keys
