"""The lifecycle table, row by row: a workload in a state, an event, the state it ends in
and the effects the backend must carry out. Plain data, no ports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from kai_ray.control import lifecycle as lc
from kai_ray.control.workload import Slot, SlotState, State, TransitionError, Workload

from .harness import spec

P = lc.Placement


def queued(**kw: object) -> Workload:
    return Workload("w", spec(**kw), created_at=0.0)


def admitting(**kw: object) -> Workload:
    w = queued(**kw)
    lc.transition(w, lc.Place((P("w0", "n0"),)), 1.0)
    return w


def running(**kw: object) -> Workload:
    w = admitting(**kw)
    lc.transition(w, lc.GangReady(), 2.0)
    return w


def elastic() -> Workload:
    w = queued(workers=3, min_workers=1)
    lc.transition(w, lc.Place((P("w0", "n0"),), (P("w1", "n1"), P("w2", "n1"))), 1.0)
    lc.transition(w, lc.GangReady(), 2.0)
    return w


def preempting(**kw: object) -> Workload:
    w = running(grace_period=10, **kw)
    lc.transition(w, lc.TasksEvicted(frozenset({"w0"}), "preempt: by x"), 3.0)
    return w


@dataclass
class Row:
    name: str
    start: Callable[[], Workload]
    event: lc.Event
    state: State
    effects: list[type] = field(default_factory=list)
    reason: str = ""


ROWS = [
    Row("queued is placed", queued, lc.Place((P("w0", "n0"),)), State.ADMITTING, [lc.Reserve]),
    Row(
        "a partial gang is not acted on", lambda: queued(workers=2), lc.Place((P("w0", "n0"),)), State.QUEUED
    ),
    Row("queued waits", queued, lc.Waiting("no room", "no-room"), State.QUEUED, reason="no room"),
    Row("ready gang runs", admitting, lc.GangReady(), State.RUNNING, reason="admitted"),
    Row(
        "a job starts when ready",
        lambda: admitting(kind="job", entrypoint="x"),
        lc.GangReady(),
        State.RUNNING,
        [lc.Start],
    ),
    Row(
        "a hand-off job releases its group, then starts",
        lambda: admitting(kind="job", entrypoint="x", handoff=True),
        lc.GangReady(),
        State.RUNNING,
        [lc.Release, lc.Start],
    ),
    Row(
        "not ready in time",
        admitting,
        lc.AdmissionTimedOut(),
        State.QUEUED,
        [lc.Release, lc.Notify],
        "next try in 2s",
    ),
    Row(
        "evicted before it started",
        admitting,
        lc.TasksEvicted(frozenset({"w0"}), "reclaim: x"),
        State.QUEUED,
        [lc.Release, lc.Notify],
        "evicted before it started (reclaim: x)",
    ),
    Row(
        "preempted: a notice first",
        lambda: running(grace_period=10),
        lc.TasksEvicted(frozenset({"w0"}), "preempt: x"),
        State.PREEMPTING,
        [lc.Notify],
        "stopping at the deadline",
    ),
    Row(
        "preempted with no grace: stopped at once",
        lambda: running(grace_period=0),
        lc.TasksEvicted(frozenset({"w0"}), "preempt: x"),
        State.QUEUED,
        [lc.Notify, lc.Release, lc.Notify],
        "re-queued",
    ),
    Row(
        "grace over: re-queued",
        preempting,
        lc.GraceOver(),
        State.QUEUED,
        [lc.Release, lc.Notify],
        "re-queued",
    ),
    Row(
        "grace over: failed when asked",
        lambda: preempting(on_preempt="fail"),
        lc.GraceOver(),
        State.FAILED,
        [lc.Release, lc.Notify],
    ),
    Row(
        "finished in its grace period",
        preempting,
        lc.Finished(True),
        State.SUCCEEDED,
        [lc.Release, lc.Notify],
    ),
    Row(
        "finished", running, lc.Finished(False, "boom"), State.FAILED, [lc.Release, lc.Notify], "failed: boom"
    ),
    Row("cancelled while queued", queued, lc.Cancel(), State.CANCELLED),
    Row("cancelled while running", running, lc.Cancel(), State.CANCELLED, [lc.Release, lc.Notify]),
    Row(
        "a block's groups are released with a kill",
        lambda: running(kind="block"),
        lc.Cancel(),
        State.CANCELLED,
        [lc.Release, lc.Notify],
    ),
    Row(
        "its node left",
        running,
        lc.NodesLost(frozenset({"n0"})),
        State.QUEUED,
        [lc.Release, lc.Notify],
        "node n0 left the cluster",
    ),
    Row(
        "a permanent failure",
        running,
        lc.ActionFailed("starting it", "bad env", permanent=True),
        State.FAILED,
        [lc.Release, lc.Notify],
        "failed while starting it: bad env",
    ),
    Row(
        "a transient failure while queued keeps its place",
        queued,
        lc.ActionFailed("describing it", "oops", permanent=False),
        State.QUEUED,
        reason="describing it failed: oops; re-queued, next try in 2s",
    ),
    Row(
        "surplus only: taken back later, the rest runs",
        elastic,
        lc.TasksEvicted(frozenset({"w2"}), "reclaim: x"),
        State.RUNNING,
    ),
    Row(
        "a surplus node left: that worker goes, the rest runs",
        elastic,
        lc.NodesLost(frozenset({"n1"})),
        State.RUNNING,
        [lc.Release, lc.Release],
    ),
    Row("a running workload grows", running, lc.Place((), (P("w1", "n1"),)), State.RUNNING, [lc.Reserve]),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_lifecycle(row: Row) -> None:
    w = row.start()
    effects = lc.transition(w, row.event, 5.0)
    assert w.state is row.state
    assert [type(e) for e in effects] == row.effects
    assert row.reason in w.reason
    if w.state not in (State.ADMITTING, State.RUNNING, State.PREEMPTING):
        assert w.slots == {} and w.runner is None  # nothing held once it holds nothing


def test_a_block_is_released_with_its_actors_killed() -> None:
    w = running(kind="block")
    (release, _) = lc.transition(w, lc.Cancel(), 5.0)
    assert release == lc.Release("kai-ray/w/1", kill=True)


def test_the_notice_carries_the_deadline_and_the_attempt() -> None:
    w = running(grace_period=10)
    (notice,) = lc.transition(w, lc.TasksEvicted(frozenset({"w0"}), "preempt: x"), 5.0)
    assert notice == lc.Notify({"reason": "preempt: x", "deadline": 15.0, "attempt": 1})


def test_surplus_slots_live_by_their_own_table() -> None:
    w = elastic()
    assert [s.state for s in w.slots.values()] == [SlotState.READY, SlotState.RESERVING, SlotState.RESERVING]
    lc.transition(w, lc.SurplusReady("w1"), 3.0)
    lc.transition(w, lc.TasksEvicted(frozenset({"w1", "w2"}), "reclaim: x"), 4.0)
    assert {t: (s.state, s.releasing_at) for t, s in w.slots.items() if s.surplus} == {
        "w1": (SlotState.RELEASING, 9.0),
        "w2": (SlotState.RELEASING, 9.0),
    }
    assert lc.transition(w, lc.SurplusDue("w1"), 9.0) == [lc.Release("kai-ray/w/1/w1")]
    assert "w1" not in w.slots
    with pytest.raises(TransitionError, match="Releasing -> Ready is not allowed"):
        Slot("n0", "g", state=SlotState.RELEASING).move(SlotState.READY)


@pytest.mark.parametrize(
    ("start", "event"),
    [
        (queued, lc.GangReady()),
        (queued, lc.TasksEvicted(frozenset({"w0"}), "x")),
        (running, lc.AdmissionTimedOut()),
        (lambda: _finished(), lc.Cancel()),
        (lambda: _finished(), lc.Place((P("w0", "n0"),))),
    ],
)
def test_an_event_the_table_has_no_row_for_is_refused_before_anything_changes(
    start: Callable[[], Workload], event: lc.Event
) -> None:
    w = start()
    before = w.to_json()
    with pytest.raises(TransitionError, match="is not allowed in state"):
        lc.transition(w, event, 9.0)
    assert w.to_json() == before


def _finished() -> Workload:
    w = running()
    lc.transition(w, lc.Finished(True), 3.0)
    return w
