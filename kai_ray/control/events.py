"""What happened, as the controller reports it: returned by every call that changes
something, so that metrics, the dashboard and waiting clients read them without
reaching into the controller's state."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Admitted", "ControlEvent", "Preempted", "WorkloadChanged"]


@dataclass(frozen=True, slots=True)
class WorkloadChanged:
    """A workload's state or its set of workers changed (`old == new`: workers only)."""

    workload: str
    queue: str
    old: str
    new: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class Admitted:
    """Its reservation became ready: it runs, `waited` seconds after it last queued."""

    workload: str
    queue: str
    waited: float


@dataclass(frozen=True, slots=True)
class Preempted:
    """The core took the workload's gang away (`action`: reclaim, preempt, ...)."""

    workload: str
    queue: str
    why: str


ControlEvent = WorkloadChanged | Admitted | Preempted
