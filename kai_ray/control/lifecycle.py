"""A workload's lifecycle: the one place where its state changes.

`transition(w, event, now)` looks up what the event does in the workload's current state
(`HANDLERS`, a table keyed by state and event type), changes the workload, and returns
the effects a backend must carry out: reserve placements, release them, start or stop
the workload's run, deliver or withdraw a preemption notice. It does no I/O, so every
rule of the lifecycle is tested with plain data; the controller feeds it events (from
the core's decisions and from what it observes) and hands the effects to the backend.

An event the table has no entry for in the workload's state is a bug in the caller:
TransitionError, before anything changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kai_ray.control.planner import JobPlan
from kai_ray.control.runtime import max_runtime_reason
from kai_ray.control.workload import HOLDING, Slot, SlotState, State, TransitionError, Workload, task_index

__all__ = [
    "HANDLERS",
    "NEUTRAL",
    "ActionFailed",
    "AdmissionTimedOut",
    "Cancel",
    "Effect",
    "Event",
    "Finished",
    "GangReady",
    "GraceOver",
    "GroupsLost",
    "NodesLost",
    "Notify",
    "Place",
    "Placement",
    "Release",
    "Reserve",
    "RunnerStarted",
    "RuntimeOver",
    "Start",
    "Started",
    "Stop",
    "SurplusDue",
    "SurplusReady",
    "TasksEvicted",
    "Waiting",
    "Words",
    "describe_nodes",
    "placement_event",
    "transition",
]


# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class Placement:
    """One worker placed by the core: its task name and the node it is pinned to."""

    task: str
    node: str


@dataclass(frozen=True, slots=True)
class Reserve:
    """Reserve `placements` as one group (pinned to their nodes), all or nothing."""

    group: str
    placements: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class Release:
    """Give up a group; `kill` also ends the work found inside it (a block of code has no
    process of ours to kill, so its actors must be found by their group)."""

    group: str
    kill: bool = False


@dataclass(frozen=True, slots=True)
class Start:
    """Start the workload's run (a job: submit it now that its reservation is ready)."""


@dataclass(frozen=True, slots=True)
class Stop:
    """End the workload's run: its driver process and/or its job."""

    runner: Mapping[str, Any] | None
    run_id: str


@dataclass(frozen=True, slots=True)
class Notify:
    """Deliver (or, with None, withdraw) the preemption notice the workload reads."""

    notice: Mapping[str, Any] | None


Effect = Reserve | Release | Start | Stop | Notify


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Place:
    """The core placed the workload: its gang (when queued) and elastic surplus."""

    gang: tuple[Placement, ...] = ()
    surplus: tuple[Placement, ...] = ()


@dataclass(frozen=True, slots=True)
class Waiting:
    """The core left it waiting, for this reason (`code`: the reason's stable code)."""

    reason: str
    code: str = ""


@dataclass(frozen=True, slots=True)
class GangReady:
    """Every group of the gang is reserved."""


@dataclass(frozen=True, slots=True)
class AdmissionTimedOut:
    """The gang's groups were not ready within the spec's admission_timeout."""


@dataclass(frozen=True, slots=True)
class SurplusReady:
    task: str


@dataclass(frozen=True, slots=True)
class SurplusDue:
    """A surplus slot's release time came, or its node left."""

    task: str


@dataclass(frozen=True, slots=True)
class TasksEvicted:
    """The core evicts these tasks (`why`: the action and its reason)."""

    tasks: frozenset[str]
    why: str


@dataclass(frozen=True, slots=True)
class RuntimeOver:
    """It has run for its max runtime (spec.max_runtime, earlier attempts counted)."""


@dataclass(frozen=True, slots=True)
class GraceOver:
    """A preempted workload's grace period ended."""


@dataclass(frozen=True, slots=True)
class NodesLost:
    nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class GroupsLost:
    """Its groups were gone when the scheduler restarted."""

    group: str


@dataclass(frozen=True, slots=True)
class Started:
    """Its run started (a job's run id)."""

    run_id: str


@dataclass(frozen=True, slots=True)
class RunnerStarted:
    """Who runs its code this attempt, for the backend to stop on preemption (opaque to
    the lifecycle: on Ray, the driver's dispatcher that started the body)."""

    runner: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Finished:
    ok: bool
    error: str = ""


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: str = "cancelled by the user"


@dataclass(frozen=True, slots=True)
class ActionFailed:
    """Carrying out one of its effects failed. `permanent`: trying again cannot help."""

    doing: str
    text: str
    permanent: bool


Event = (
    Place
    | Waiting
    | GangReady
    | AdmissionTimedOut
    | SurplusReady
    | SurplusDue
    | TasksEvicted
    | RuntimeOver
    | GraceOver
    | NodesLost
    | GroupsLost
    | Started
    | RunnerStarted
    | Finished
    | Cancel
    | ActionFailed
)

Handler = Callable[[Workload, Any, float, "Words"], list[Effect]]


@dataclass(frozen=True, slots=True)
class Words:
    """How a backend names what the lifecycle speaks of, in the reasons people read:
    its reservations (Ray: a placement group) and itself."""

    reservation: str = "reservation"
    backend: str = "the backend"


NEUTRAL = Words()


def transition(w: Workload, event: Event, now: float, words: Words = NEUTRAL) -> list[Effect]:
    """Apply `event` to `w` at `now`; the effects to carry out, in order. `words`: the
    backend's names in the reasons written."""
    handler = HANDLERS.get((w.state, type(event)))
    if handler is None:
        raise TransitionError(
            f"workload {w.id}: {type(event).__name__} is not allowed in state {w.state.value}"
        )
    return handler(w, event, now, words)


# ---------------------------------------------------------------- handlers


def _place(w: Workload, e: Place, now: float, words: Words) -> list[Effect]:
    effects: list[Effect] = []
    if w.state is State.QUEUED:
        if len(e.gang) < w.spec.gang:
            return []  # the core places gangs whole; a partial answer is not acted on
        w.attempt += 1
        w.slots = {p.task: Slot(p.node, w.gang_group) for p in e.gang}
        _move(w, State.ADMITTING, now, f"{words.reservation} made; waiting for {words.backend}")
        effects.append(Reserve(w.gang_group, e.gang))
    for p in e.surplus:  # elastic workers above the gang: a group each (groups cannot grow)
        if p.task in w.slots:
            continue
        group = f"{w.gang_group}/{p.task}"
        w.slots[p.task] = Slot(p.node, group, surplus=True)
        effects.append(Reserve(group, (p,)))
    return effects


def _waiting(w: Workload, e: Waiting, now: float, words: Words) -> list[Effect]:
    w.reason, w.reason_code = e.reason, e.code
    return []


def _gang_ready(w: Workload, e: GangReady, now: float, words: Words) -> list[Effect]:
    for s in w.slots.values():
        if not s.surplus and s.state is SlotState.RESERVING:
            s.move(SlotState.READY)
    _move(w, State.RUNNING, now, f"admitted: its {words.reservation} is ready")
    if w.spec.kind != "job":
        w.failed_admissions, w.retry_at = 0, None  # admitted: the back-off starts over
        return []
    effects: list[Effect] = []
    if w.spec.handoff:  # the job reserves the same itself; kai-ray keeps the accounting
        effects = [Release(g) for g in sorted(w.groups())]
        w.handed_off = True
    return [*effects, Start()]


def _admission_timed_out(w: Workload, e: AdmissionTimedOut, now: float, words: Words) -> list[Effect]:
    nodes = describe_nodes(s.node for s in w.slots.values())
    effects = _release_all(w)
    wait = w.admission_failed(now)
    _move(
        w,
        State.QUEUED,
        now,
        f"{words.reservation} not ready after {w.spec.admission_timeout:g}s on {nodes} ({words.backend} "
        "could not reserve the resources there: used by work outside kai-ray?); re-queued, next try "
        f"in {wait:g}s ({w.failed_admissions} failed in a row)",
    )
    return effects


def _surplus_ready(w: Workload, e: SurplusReady, now: float, words: Words) -> list[Effect]:
    slot = w.slots.get(e.task)
    if slot is not None and slot.state is SlotState.RESERVING:
        slot.move(SlotState.READY)
    return []


def _surplus_due(w: Workload, e: SurplusDue, now: float, words: Words) -> list[Effect]:
    slot = w.slots.pop(e.task, None)
    if slot is None:
        return []
    w.group_ids.pop(slot.group, None)
    return [Release(slot.group, kill=w.spec.kind == "block")]


def _evict(w: Workload, e: TasksEvicted, now: float, words: Words) -> list[Effect]:
    if not any(t in w.slots and not w.slots[t].surplus for t in e.tasks):
        # Only elastic surplus: each is taken back after the grace period, the rest runs.
        for t in sorted(e.tasks & w.slots.keys()):
            slot = w.slots[t]
            if slot.state is not SlotState.RELEASING:
                slot.move(SlotState.RELEASING)
                slot.releasing_at = now + max(0.0, w.spec.grace_period)
        return []
    w.preemptions += 1
    if w.state is State.ADMITTING:
        effects = _release_all(w)
        _move(w, State.QUEUED, now, f"evicted before it started ({e.why})")
        return effects
    return _give_notice(w, f"preempted ({e.why})", e.why, now, words)


def _runtime_over(w: Workload, e: RuntimeOver, now: float, words: Words) -> list[Effect]:
    """Stopped for good, the way a preemption stops it: the notice, the grace period,
    then the end (a failure, with this reason, instead of a place back in line)."""
    w.stop_reason = max_runtime_reason(w.spec.max_runtime or 0.0)
    return _give_notice(w, w.stop_reason, w.stop_reason, now, words)


def _give_notice(w: Workload, why: str, notice: str, now: float, words: Words) -> list[Effect]:
    """PREEMPTING until the end of its grace period (`why` in its history), with the
    notice the workload reads; at once when it has no grace period."""
    w.deadline = now + max(0.0, w.spec.grace_period)
    _move(w, State.PREEMPTING, now, f"{why}; stopping at the deadline")
    said = Notify({"reason": notice, "deadline": w.deadline, "attempt": w.attempt})
    if w.deadline <= now:
        return [said, *_grace_over(w, GraceOver(), now, words)]
    return [said]


def _grace_over(w: Workload, e: GraceOver, now: float, words: Words) -> list[Effect]:
    why = w.reason.removesuffix("; stopping at the deadline")
    effects = _release_all(w)
    if w.stop_reason or w.spec.on_preempt == "fail":
        w.error = why
        _move(w, State.FAILED, now, why)
    else:
        _move(w, State.QUEUED, now, f"{why}; re-queued")
    return effects


def _nodes_lost(w: Workload, e: NodesLost, now: float, words: Words) -> list[Effect]:
    lost_gang = {s.node for s in w.slots.values() if not s.surplus} & e.nodes
    if w.state is State.ADMITTING:
        lost_gang = {s.node for s in w.slots.values()} & e.nodes
    if not lost_gang:  # only surplus workers were there: the rest runs on
        gone = [t for t, s in w.slots.items() if s.node in e.nodes]
        return [eff for t in gone for eff in _surplus_due(w, SurplusDue(t), now, words)]
    effects = _release_all(w)
    _move(w, State.QUEUED, now, f"{describe_nodes(lost_gang)} left the cluster; re-queued")
    return effects


def _groups_lost(w: Workload, e: GroupsLost, now: float, words: Words) -> list[Effect]:
    effects = _release_all(w)
    _move(
        w,
        State.QUEUED,
        now,
        f"{words.reservation} {e.group} was lost while the scheduler restarted; re-queued",
    )
    return effects


def _started(w: Workload, e: Started, now: float, words: Words) -> list[Effect]:
    w.submission_id = e.run_id
    w.failed_admissions, w.retry_at = 0, None  # its run started: the back-off starts over
    return []


def _runner_started(w: Workload, e: RunnerStarted, now: float, words: Words) -> list[Effect]:
    w.runner = dict(e.runner)
    return []


def _finished(w: Workload, e: Finished, now: float, words: Words) -> list[Effect]:
    w.runner = None  # its code returned: the process is the backend's again, not ours to kill
    effects = _release_all(w)
    w.error = e.error
    _move(w, State.SUCCEEDED if e.ok else State.FAILED, now, "finished" if e.ok else f"failed: {e.error}")
    return effects


def _cancel(w: Workload, e: Cancel, now: float, words: Words) -> list[Effect]:
    effects = _release_all(w)
    _move(w, State.CANCELLED, now, e.reason)
    return effects


def _action_failed(w: Workload, e: ActionFailed, now: float, words: Words) -> list[Effect]:
    effects = _release_all(w)
    if e.permanent:
        w.error = e.text
        _move(w, State.FAILED, now, f"failed while {e.doing}: {e.text}")
        return effects
    wait = w.admission_failed(now)
    why = (
        f"{e.doing} failed: {e.text}; re-queued, next try in {wait:g}s "
        f"({w.failed_admissions} failed in a row)"
    )
    if w.state is State.QUEUED:
        w.reason = why  # already in line: it keeps its place, tried again after the wait
    else:
        _move(w, State.QUEUED, now, why)
    return effects


# ---------------------------------------------------------------- helpers


def _release_all(w: Workload) -> list[Effect]:
    """Everything the workload holds, as effects: its run, its groups, its notice."""
    effects: list[Effect] = []
    run_id = w.submission_id if w.spec.kind == "job" else ""
    if w.state in HOLDING and (w.runner or run_id):
        effects.append(Stop(w.runner, run_id))
    if not w.handed_off:
        effects += [Release(g, kill=w.spec.kind == "block") for g in sorted(w.groups())]
    if w.state in HOLDING:
        effects.append(Notify(None))
    w.slots, w.runner, w.deadline, w.group_ids, w.handed_off = {}, None, None, {}, False
    return effects


def _move(w: Workload, to: State, now: float, reason: str) -> None:
    w.move(to, now, reason)
    w.reason_code = ""
    if to is State.QUEUED:
        w.queued_at = now


def describe_nodes(ids: Iterable[str]) -> str:
    """Node names for a reason: "node 3a3afee48400", "nodes a, b"."""
    names = sorted(set(ids))
    return f"node{'s' if len(names) != 1 else ''} {', '.join(names)}"


_ANY_LIVE = (State.QUEUED, State.ADMITTING, State.RUNNING, State.PREEMPTING)
_HOLDING_STATES = (State.ADMITTING, State.RUNNING, State.PREEMPTING)

HANDLERS: dict[tuple[State, type], Handler] = {
    (State.QUEUED, Place): _place,
    (State.QUEUED, Waiting): _waiting,
    (State.ADMITTING, Place): _place,
    (State.RUNNING, Place): _place,
    (State.ADMITTING, GangReady): _gang_ready,
    (State.ADMITTING, AdmissionTimedOut): _admission_timed_out,
    (State.RUNNING, SurplusReady): _surplus_ready,
    (State.RUNNING, SurplusDue): _surplus_due,
    (State.ADMITTING, TasksEvicted): _evict,
    (State.RUNNING, TasksEvicted): _evict,
    (State.RUNNING, RuntimeOver): _runtime_over,
    (State.PREEMPTING, GraceOver): _grace_over,
    (State.RUNNING, Started): _started,
    (State.ADMITTING, RunnerStarted): _runner_started,
    (State.RUNNING, RunnerStarted): _runner_started,
    (State.RUNNING, Finished): _finished,
    (State.PREEMPTING, Finished): _finished,
    **{(s, NodesLost): _nodes_lost for s in (State.ADMITTING, State.RUNNING)},
    **{(s, GroupsLost): _groups_lost for s in _HOLDING_STATES},
    **{(s, Cancel): _cancel for s in _ANY_LIVE},
    **{(s, ActionFailed): _action_failed for s in _ANY_LIVE},
}


def placement_event(w: Workload, jp: JobPlan) -> Event | None:
    """What the cycle's plan for one workload means for it: placed (its gang, or surplus
    workers of an admitted one), waiting on capacity being released, or nothing."""
    binds = sorted(jp.binds, key=lambda b: task_index(b.task))
    placements = tuple(Placement(b.task, b.node) for b in binds)
    if w.state is State.QUEUED:
        if jp.pipelined:
            nodes = describe_nodes(p.node for p in jp.pipelined)
            return Waiting(f"placed on {nodes}; waiting for preempted work to release it", "pipelined")
        gang = w.spec.gang
        return Place(placements[:gang], placements[gang:]) if len(placements) >= gang else None
    if w.state in (State.ADMITTING, State.RUNNING):
        surplus = tuple(p for p in placements if p.task not in w.slots)
        return Place((), surplus) if surplus else None
    return None
