"""The controller on in-memory ports with the real core: admission, back-off,
preemption, restart, cancellation, positions and events."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kai_ray.control import (
    Admitted,
    Preempted,
    State,
    SubmitError,
    TransitionError,
    Workload,
    WorkloadChanged,
)

from .harness import make, spec


def test_the_transition_table_refuses_impossible_moves() -> None:
    w = Workload("w", spec(), created_at=0)
    w.move(State.ADMITTING, 1, "x")
    w.move(State.RUNNING, 2, "y")
    w.move(State.SUCCEEDED, 3, "z")
    with pytest.raises(TransitionError, match="Succeeded -> Admitting is not allowed"):
        w.move(State.ADMITTING, 4, "again")
    assert [h[2] for h in w.history] == ["Admitting", "Running", "Succeeded"]
    assert Workload.from_json(json.loads(json.dumps(w.to_json()))) == w


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"queue": "nope"}, "queue 'nope' does not exist; use one of the leaf queues (a, child)"),
        ({"queue": "parent"}, "queue 'parent' has child queues (child); only leaf queues hold jobs"),
        ({"resources_per_worker": {"GPU": 8}}, "largest node has GPU 4"),
        ({"resources_per_worker": {"GPU": 1.5}}, "above 1 a GPU count must be whole"),
        ({"strategy": "WHEREVER"}, "strategy='WHEREVER'"),
        ({"workers": 2, "min_workers": 3}, "min_workers <= workers"),
        ({"kind": "job"}, "a job needs an entrypoint"),
        # Two nodes of 4 GPUs: 3 workers of 4 GPUs can never start together.
        ({"workers": 3}, "gang of 3 tasks (4 GPUs, 1 CPU each) cannot fit in this cluster as it is"),
        ({"workers": 3, "strategy": "STRICT_SPREAD", "resources_per_worker": {"GPU": 1}}, "cannot fit"),
        ({"workers": 2, "strategy": "STRICT_PACK"}, "even empty one node holds at most 1 such task"),
    ],
)
def test_bad_workloads_are_refused_with_the_fix(kw: dict[str, Any], message: str) -> None:
    h = make()
    with pytest.raises(SubmitError, match=re.escape(message)):
        h.submit("w", **kw)
    assert h.controller.workloads == {} and h.store.data == {}


def test_work_outside_the_scheduler_makes_a_worker_wait_not_fail() -> None:
    h = make()
    h.cluster.outside = {"n0": {"gpu": 4.0}, "n1": {"gpu": 4.0}}  # another user's actors
    w = h.submit("w")  # fits an empty node: accepted
    h.at(1).step()
    assert w.state is State.QUEUED and not h.executor.groups
    assert w.reason_code == "no-room"
    assert "no node has room now" in w.reason and "work outside the scheduler holds 8 GPUs" in w.reason
    with pytest.raises(SubmitError, match="largest node has GPU 4"):  # never fits: refused
        h.submit("big", resources_per_worker={"GPU": 8})
    h.cluster.outside = {}
    h.at(2).step()
    assert w.state is State.ADMITTING


def test_a_gang_is_reserved_pinned_written_ahead_then_runs() -> None:
    h = make()
    stored_first = []
    h.executor.before_reserve = lambda group: stored_first.append("wl/w" in h.store.data)
    w = h.submit("w", workers=2)
    h.at(1).step()
    assert w.state is State.ADMITTING
    (workers,) = h.executor.groups.values()
    assert sorted(p.node for p in workers) == ["n0", "n1"]  # one 4-GPU worker per node
    assert stored_first == [True]  # the record existed before the reservation
    stored = h.store.data["wl/w"].value
    assert stored["state"] == "Admitting"  # type: ignore[index]
    h.at(2).step()
    assert w.state is State.RUNNING and h.controller.info("w")["group_id"] == "id-kai-ray/w/1"
    assert [type(e) for e in h.events] == [WorkloadChanged, WorkloadChanged, WorkloadChanged, Admitted]


def test_a_reservation_not_ready_in_time_is_released_and_retried_with_back_off() -> None:
    h = make()
    h.executor.ready = False
    w = h.submit("w", admission_timeout=5)
    h.at(1).step()
    h.at(10).step()
    assert h.executor.released == ["kai-ray/w/1"]
    # Re-queued with the reason, and not tried again before its back-off (2 s) is over.
    assert [x[2] for x in w.history] == ["Queued", "Admitting", "Queued"]
    assert "not ready after 5s" in w.reason and "next try in 2s" in w.reason
    assert h.controller.next_deadline() == 12
    view = h.controller.info("w")
    assert view["retry_at"] == 12 and view["failed_admissions"] == 1
    h.at(11).step()
    assert w.state is State.QUEUED and w.attempt == 1
    h.at(12).step()  # a fresh group
    assert w.state is State.ADMITTING and w.attempt == 2 and list(h.executor.groups) == ["kai-ray/w/2"]
    # Failing again doubles the wait; success resets the count.
    h.at(18).step()
    assert w.state is State.QUEUED and "next try in 4s" in w.reason and h.controller.next_deadline() == 22
    h.executor.ready = True
    h.at(22).step()
    h.at(23).step()
    assert w.state is State.RUNNING and w.failed_admissions == 0 and w.retry_at is None
    assert h.controller.next_deadline() is None


def test_preemption_gives_notice_then_stops_and_requeues_or_fails() -> None:
    h = make(nodes=1)
    low = h.submit("low", grace_period=10)
    h.submit("low2", grace_period=0, on_preempt="fail")
    h.at(1).step()
    h.at(2).step()
    assert low.state is State.RUNNING
    runner = {"dispatcher": "d-1", "workload": "low", "attempt": 1}
    assert h.controller.register_runner("low", 1, runner)
    assert not h.controller.register_runner("low", 2, runner)  # not this workload's attempt
    h.submit("high", priority=125, preemptible=False)
    h.at(3).step()
    assert low.state is State.PREEMPTING and h.executor.notices["low"]["deadline"] == 13
    assert h.executor.stopped == [] and "kai-ray/low/1" in h.executor.groups  # grace period
    assert any(isinstance(e, Preempted) and e.workload == "low" for e in h.events)
    h.at(12).step()
    assert low.state is State.PREEMPTING
    h.at(13).step()
    assert low.state is State.QUEUED and "preempt" in low.history[-1][3]
    assert h.executor.stopped == [(runner, "")]
    assert "kai-ray/low/1" not in h.executor.groups and "low" not in h.executor.notices
    h.at(14).step()
    h.at(15).step()
    assert h.w("high").state is State.RUNNING
    # A late report from the preempted attempt changes nothing.
    h.controller.finish("low", 1, True)
    assert low.state is State.QUEUED


def test_a_restart_reconciles_with_the_live_reservations() -> None:
    h = make()
    h.submit("kept")
    h.submit("lost")
    h.at(1).step()
    h.at(2).step()
    assert {w.state for w in h.controller.workloads.values()} == {State.RUNNING}
    h.executor.groups.pop("kai-ray/lost/1")  # gone while the scheduler was down
    h.executor.groups["kai-ray/ghost/1"] = []  # made but never recorded
    fresh = h.at(3).restarted()
    assert fresh.w("kept").state is State.RUNNING and fresh.w("lost").state is State.QUEUED
    assert "lost while the scheduler restarted" in fresh.w("lost").reason
    assert "kai-ray/ghost/1" in h.executor.released and "kai-ray/kept/1" in h.executor.groups
    assert fresh.store.data["wl/lost"].value["state"] == "Queued"  # type: ignore[index]


def test_cancel_releases_and_positions_follow_the_cores_order() -> None:
    h = make(nodes=1)
    h.submit("first", preemptible=False)  # nobody in the queue may take its place
    h.at(1).step()
    for name in ("second", "third"):
        h.submit(name)
    h.submit("urgent", priority=100)  # later, but of a higher priority: ahead in line
    h.at(2).step()
    positions = {w: h.controller.info(w)["position"] for w in ("second", "third", "urgent")}
    assert positions == {"urgent": 1, "second": 2, "third": 3}
    assert h.controller.info("third")["queue_length"] == 3 and h.controller.info("third")["reason"]
    h.controller.cancel("first")
    assert h.w("first").state is State.CANCELLED and h.executor.groups == {}
    h.at(3).step()
    assert h.w("urgent").state is State.ADMITTING


def test_the_same_id_is_the_same_workload_or_refused() -> None:
    h = make()
    first = h.submit("w", resources_per_worker={"GPU": 1, "memory": "1Gi"})
    again = h.submit("w", resources_per_worker={"GPU": 1, "memory": 2**30})
    assert again is first  # a retried call
    with pytest.raises(SubmitError, match="workload id 'w' is taken by another workload"):
        h.submit("w", resources_per_worker={"GPU": 2})


def test_the_longest_finished_are_forgotten_first_and_never_a_live_one(monkeypatch: Any) -> None:
    """Finished workloads are kept for status queries up to KEEP_FINISHED; beyond that
    a submission forgets the one finished longest ago (without a scan of the table:
    with ten thousand waiting, a scan per submission cost more than the submission)."""
    from kai_ray.control import table as table_module

    monkeypatch.setattr(table_module, "KEEP_FINISHED", 2)
    h = make(nodes=1)
    for wid in ("a", "b", "c"):
        h.submit(wid, resources_per_worker={"GPU": 1, "CPU": 1})
    h.submit("waits", resources_per_worker={"GPU": 4, "CPU": 1})  # behind the three
    h.at(1).step()
    h.at(2).step()
    for t, wid in zip((3, 4, 5), ("b", "a", "c"), strict=True):  # b finishes first
        h.at(t).controller.finish(wid, 1, True)
    h.at(6).submit("new")
    assert set(h.controller.workloads) == {"a", "c", "waits", "new"}  # b: forgotten
    h.controller.flush()
    assert "wl/b" not in h.store.data and "wl/a" in h.store.data  # and its record
    fresh = h.at(7).restarted()  # the order survives a restart: a before c
    fresh.at(8).controller.cancel("new")
    fresh.submit("newer")
    assert set(fresh.controller.workloads) == {"c", "waits", "new", "newer"}


def test_a_placement_taken_back_in_its_cycle_never_starts_and_says_why() -> None:
    """One node of 4 GPUs, 2 held by `train`. In one cycle allocate places `j` (2 GPUs) on
    the free half, and preempt takes it back, with train, for `serve` (priority 125, 4
    GPUs): j's group is never made, and j waits saying why; serve starts once train
    is gone, j still waits."""
    h = make(nodes=1)
    train = h.submit("train", resources_per_worker={"GPU": 2, "CPU": 1}, grace_period=0)
    h.at(1).step()
    h.at(2).step()
    assert train.state is State.RUNNING
    h.submit("serve", priority=125)
    j = h.submit("j", resources_per_worker={"GPU": 2, "CPU": 1})
    h.at(3).step()
    assert train.state is State.QUEUED and train.preemptions == 1  # no grace period
    assert j.state is State.QUEUED and j.reason_code == "taken-back"
    assert "placed this cycle, then taken back by preempt (preempted by serve in a)" in j.reason
    assert not any(g.startswith("kai-ray/j/") for g in h.executor.groups)
    for t in range(4, 8):
        h.at(t).step()
    assert h.w("serve").state is State.RUNNING and j.state is State.QUEUED
    assert not any(g.startswith("kai-ray/j/") for g in h.executor.groups)
