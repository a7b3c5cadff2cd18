"""What an action hands KAI's job solver (solver.py), and what the solver hands back: the
terms on which one action may take room for one job, the scenario generators' type, and
the scenario found. Apart from the solver so that the generators (scenarios.py), which
read the terms, and the solver, which runs the generators, import both from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from kai_ray.core.actions.victims import Allowed, EvictReason, GivingOrder, Unit
from kai_ray.core.session.context import CycleContext
from kai_ray.core.state.jobs import Task

__all__ = ["Generator", "Scenario", "Terms", "Validate"]

# A scenario's victims, as the simulation left them: stopped, and moved elsewhere.
Validate = Callable[["Scenario"], bool]
# A scenario generator (scenarios.py): the victims each scenario takes beside the recorded.
Generator = Callable[[CycleContext, "Terms", Sequence[Unit], Sequence[Task]], "Iterator[list[Unit]]"]


@dataclass(frozen=True, slots=True)
class Scenario:
    stopped: list[Unit]  # evicted and not placed again
    moved: list[Unit]  # evicted and placed again elsewhere
    # The victim units as the search took them, each that had a task stopped or moved
    # (KAI records a victim's whole group, a task of it that came back included).
    taken: list[Unit] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Terms:
    """How one action may take room for one job."""

    action: str
    units: Sequence[Unit]  # the candidates it may take, in victim order
    allowed: Allowed  # whether a candidate may be taken now (min runtime, standings)
    evict_reason: EvictReason
    valid: Validate  # the action's judgement of a scenario that placed the job
    giving: GivingOrder | None = None  # between queues: which queue gives first
    check_capacity: bool = True  # the job's queue limits, with the victims gone
    # What `allowed` asks of a candidate's queue alone (None: nothing): a queue it
    # refuses is passed over whole, without asking of each of its candidates.
    queue_allowed: Callable[[int], bool] | None = None
