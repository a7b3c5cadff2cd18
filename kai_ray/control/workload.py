"""A workload as the control plane keeps it: its spec, its state, its slots and the
state's history. Plain data that round-trips through JSON: a backend's Store persists it
and the controller rebuilds it after a restart.

Two tables say which changes are possible: `TRANSITIONS` for the workload's state and
`SLOT_TRANSITIONS` for an elastic worker's slot. `Workload.move` and `Slot.move` check
every change against them, so an impossible one (admitting a finished workload) is a bug
found at once rather than a reservation leaked later. Only kai_ray.control.lifecycle
calls them: it is the one place where a workload's state changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from kai_ray.control.runtime import runtime_over_at

__all__ = [
    "GROUP_PREFIX",
    "HOLDING",
    "SLOT_TRANSITIONS",
    "TERMINAL",
    "TRANSITIONS",
    "Slot",
    "SlotState",
    "State",
    "TransitionError",
    "Workload",
    "WorkloadSpec",
    "group_owner",
    "task_index",
    "task_name",
]


class State(enum.Enum):
    QUEUED = "Queued"  # waiting for the core to place it
    ADMITTING = "Admitting"  # placement group created, not ready yet
    RUNNING = "Running"  # placement group ready: the workload's code runs inside it
    PREEMPTING = "Preempting"  # notice given; the group goes at the end of the grace period
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})
HOLDING = frozenset({State.ADMITTING, State.RUNNING, State.PREEMPTING})  # states that hold groups

# from -> the states it may go to. Anything else raises TransitionError.
ADMISSION_BACKOFF_MAX = 60.0  # seconds: the longest wait between admission retries

TRANSITIONS: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.ADMITTING, State.CANCELLED, State.FAILED}),
    State.ADMITTING: frozenset(
        # QUEUED: not ready in time, group lost, or evicted before it was ready
        {State.RUNNING, State.QUEUED, State.CANCELLED, State.FAILED}
    ),
    State.RUNNING: frozenset(
        # QUEUED: its group vanished (found on reconcile) -> run it again
        {State.PREEMPTING, State.SUCCEEDED, State.FAILED, State.CANCELLED, State.QUEUED}
    ),
    State.PREEMPTING: frozenset(
        # SUCCEEDED: it finished inside its grace period
        {State.QUEUED, State.FAILED, State.SUCCEEDED, State.CANCELLED}
    ),
    State.SUCCEEDED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
}


class SlotState(enum.Enum):
    """One admitted worker's reservation. The gang's slots share the workload's state;
    an elastic surplus slot has a life of its own inside a running workload."""

    RESERVING = "Reserving"  # its placement is asked for, not confirmed yet
    READY = "Ready"  # reserved: work may be put there
    RELEASING = "Releasing"  # taken back: given up at `releasing_at`


SLOT_TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {
    SlotState.RESERVING: frozenset({SlotState.READY, SlotState.RELEASING}),
    SlotState.READY: frozenset({SlotState.RELEASING}),
    SlotState.RELEASING: frozenset(),
}

Kind = Literal["function", "block", "job"]


GROUP_PREFIX = "kai-ray/"  # every group: kai-ray/<workload>/<attempt>[/<task>]


def group_owner(group: str) -> str:
    """The workload a group (reservation) belongs to."""
    return group.removeprefix(GROUP_PREFIX).split("/")[0]


def task_name(index: int) -> str:
    """The core's name for worker `index` of a workload; task_index reads it back."""
    return f"w{index}"


def task_index(name: str) -> int:
    return int(name[1:])


class TransitionError(RuntimeError):
    """A state change the transition table does not allow."""


@dataclass(slots=True)
class WorkloadSpec:
    """What the user asked for. Resources use Ray's names: CPU, GPU, memory, custom ones,
    plus `gpu_memory` (bytes of one device) for memory-sized GPU fractions."""

    queue: str
    priority: int = 50
    preemptible: bool = True
    priority_class: str = "train"
    workers: int = 1  # the most workers (bundles)
    min_workers: int = 0  # the gang; 0 = all workers
    resources_per_worker: dict[str, float] = field(default_factory=lambda: {"CPU": 1.0})
    strategy: str = "PACK"  # PACK, SPREAD, STRICT_PACK (one node), STRICT_SPREAD (a node each)
    kind: Kind = "function"
    name: str = ""  # a label for people; the id is what identifies it
    on_preempt: Literal["requeue", "fail"] = "requeue"
    grace_period: float = 5.0  # seconds between the notice and the kill
    admission_timeout: float = 30.0  # seconds a group may take to become ready
    # Jobs only: once reserved, release the group and let the job place its own work on
    # the nodes it was admitted to (Ray Train, Ray Serve create their own groups, which
    # cannot nest in ours). kai-ray keeps accounting the capacity as the job's.
    handoff: bool = False
    # Seconds of run time: what it is expected to take (the forecast of when waiting work
    # starts reads it; None: estimated from its queue and history), and the most it may
    # take (then it gets its notice and grace period and is stopped; None: no limit).
    expected_runtime: float | None = None
    max_runtime: float | None = None
    entrypoint: str = ""  # kind == "job": the shell command
    runtime_env: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    # The GPU types (Ray's accelerator types: H100, A100, ...) its workers may run on,
    # most preferred first; empty: any. Its gang runs on one type unless
    # mixed_accelerator_types. (make_spec takes one type as a string too.)
    accelerator_type: list[str] = field(default_factory=list)
    mixed_accelerator_types: bool = False
    # Who submitted it (docs/tenants.md): set by the scheduler from the token presented,
    # never by the submitter; None: no tenant rule binds it (no tokens, or an admin).
    tenant: str | None = None
    tenant_labels: dict[str, str] = field(default_factory=dict)

    @property
    def gang(self) -> int:
        return self.min_workers if 0 < self.min_workers < self.workers else self.workers


@dataclass(slots=True)
class Slot:
    """One admitted worker: the node its bundle is pinned to and the group holding it.
    Gang workers share one group; each elastic surplus worker has a group of its own,
    because a Ray placement group cannot shrink."""

    node: str
    group: str
    surplus: bool = False
    state: SlotState = SlotState.RESERVING
    releasing_at: float | None = None  # RELEASING: when it is given up

    def move(self, to: SlotState) -> None:
        if to not in SLOT_TRANSITIONS[self.state]:
            raise TransitionError(f"slot on {self.node}: {self.state.value} -> {to.value} is not allowed")
        self.state = to

    @property
    def ready(self) -> bool:
        return self.state is SlotState.READY


@dataclass(slots=True)
class Workload:
    id: str
    spec: WorkloadSpec
    created_at: float
    state: State = State.QUEUED
    reason: str = "waiting for the first scheduling cycle"
    reason_code: str = ""  # while queued: the stable code of the core's reason
    attempt: int = 0  # admissions so far; names the placement groups
    since: float = 0.0  # when it entered `state`
    queued_at: float = 0.0  # when it last entered QUEUED: admission wait counts from here
    history: list[tuple[float, str, str, str]] = field(default_factory=list)
    slots: dict[str, Slot] = field(default_factory=dict)  # task name -> slot
    # group name -> Ray placement group id (hex). Named lookups in Ray are scoped to the
    # creator's namespace, so clients and jobs find their group by id.
    group_ids: dict[str, str] = field(default_factory=dict)
    deadline: float | None = None  # PREEMPTING: when the group goes
    runner: dict[str, Any] | None = None  # who runs its code, to stop (the backend's words)
    submission_id: str = ""  # kind == "job": the Ray job of this attempt
    preemptions: int = 0
    error: str = ""
    handed_off: bool = False  # its groups were released to the job (spec.handoff)
    # Admissions in a row whose group was never ready, and when it may be tried again:
    # Ray refusing a reservation usually keeps refusing for a while (work outside
    # kai-ray holds the resources), so each retry waits twice as long as the last.
    failed_admissions: int = 0
    retry_at: float | None = None
    ran: float = 0.0  # seconds it ran in its earlier attempts (max_runtime counts them)
    # Why it is being stopped for good rather than preempted (it ran past max_runtime):
    # at the end of its grace period it fails with this reason instead of re-queueing.
    stop_reason: str = ""

    # ------------------------------------------------------------ transitions

    def move(self, to: State, now: float, reason: str) -> None:
        """Change state, or raise TransitionError when the table forbids it."""
        if to not in TRANSITIONS[self.state]:
            raise TransitionError(
                f"workload {self.id}: {self.state.value} -> {to.value} is not allowed ({reason})"
            )
        self.history.append((now, self.state.value, to.value, reason))
        if self.state is State.RUNNING:
            self.ran += now - self.since
        self.state, self.since, self.reason = to, now, reason

    def runtime_over_at(self) -> float | None:
        """While running: when it reaches its max runtime (None: no limit)."""
        if self.state is not State.RUNNING:
            return None
        return runtime_over_at(self.since, self.ran, self.spec.max_runtime)

    def admission_failed(self, now: float) -> float:
        """Count an admission whose group never became ready; the seconds to wait before
        the next try (2, 4, 8 ... up to ADMISSION_BACKOFF_MAX)."""
        self.failed_admissions += 1
        wait = min(ADMISSION_BACKOFF_MAX, 2.0**self.failed_admissions)
        self.retry_at = now + wait
        return wait

    def next_deadline(self, now: float) -> float | None:
        """When this workload next needs the controller without anyone asking: the end
        of its grace period, a surplus worker's release, or its admission retry (only
        times still ahead: one that passed is being handled)."""
        times: list[float] = []
        if self.state is State.PREEMPTING and self.deadline is not None:
            times.append(self.deadline)
        if self.state is State.QUEUED and self.retry_at is not None:
            times.append(self.retry_at)
        if self.state is State.RUNNING:
            times += [s.releasing_at for s in self.slots.values() if s.releasing_at is not None]
            over = self.runtime_over_at()
            if over is not None:
                times.append(over)
        return min((t for t in times if t > now), default=None)

    def waiting_to_retry(self, now: float) -> bool:
        """True while backing off after failed admissions."""
        return self.retry_at is not None and now < self.retry_at

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def gang_group(self) -> str:
        return f"{GROUP_PREFIX}{self.id}/{self.attempt}"

    def task_names(self) -> list[str]:
        return [task_name(i) for i in range(self.spec.workers)]

    def slots_in_motion(self) -> bool:
        """Whether a worker is on its way in (reserving) or out (releasing): only those
        have news to observe. Identity checks: hashing enums is slow over thousands."""
        reserving, releasing = SlotState.RESERVING, SlotState.RELEASING
        return any(s.state is reserving or s.state is releasing for s in self.slots.values())

    def ordered_slots(self) -> list[tuple[str, Slot]]:
        """(task, slot) in worker order: the gang's first."""
        return sorted(self.slots.items(), key=lambda item: task_index(item[0]))

    def groups(self) -> set[str]:
        """The placement groups this workload holds now."""
        return {s.group for s in self.slots.values()}

    # ------------------------------------------------------------ persistence

    def to_json(self) -> dict[str, Any]:
        # By hand rather than dataclasses.asdict: this runs on the admission path, and
        # asdict's recursive deep copy costs ~1 ms for a workload with some history.
        return {
            "id": self.id,
            # Shallow: the caller serialises it at once (asdict's deep copy is the cost
            # of a write when a thousand workloads are admitted together).
            "spec": {name: getattr(self.spec, name) for name in _SPEC_FIELDS},
            "created_at": self.created_at,
            "state": self.state.value,
            "reason": self.reason,
            "reason_code": self.reason_code,
            "attempt": self.attempt,
            "since": self.since,
            "queued_at": self.queued_at,
            "history": self.history,
            "slots": {
                k: {
                    "node": s.node,
                    "group": s.group,
                    "surplus": s.surplus,
                    "state": s.state.value,
                    "releasing_at": s.releasing_at,
                }
                for k, s in self.slots.items()
            },
            "group_ids": self.group_ids,
            "deadline": self.deadline,
            "runner": self.runner,
            "submission_id": self.submission_id,
            "preemptions": self.preemptions,
            "error": self.error,
            "handed_off": self.handed_off,
            "failed_admissions": self.failed_admissions,
            "retry_at": self.retry_at,
            "ran": self.ran,
            "stop_reason": self.stop_reason,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Workload:
        data = dict(data)
        spec = WorkloadSpec(**data.pop("spec"))
        slots = {k: _slot_from_json(v) for k, v in data.pop("slots").items()}
        history = [tuple(h) for h in data.pop("history")]
        state = State(data.pop("state"))
        return cls(spec=spec, slots=slots, history=history, state=state, **data)


_SPEC_FIELDS = tuple(f.name for f in fields(WorkloadSpec))


def _slot_from_json(data: dict[str, Any]) -> Slot:
    data = dict(data)
    if "ready" in data:  # written before slots had states
        data["state"] = SlotState.READY.value if data.pop("ready") else SlotState.RESERVING.value
    return Slot(**{**data, "state": SlotState(data["state"])})
