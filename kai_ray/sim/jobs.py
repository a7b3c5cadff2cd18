"""The simulator's job records: `SimJob`, one job as a trace (trace.py) or a test gives
it, and `JobRun`, that job's life in one simulation (engine.py), which the metrics
(metrics.py) and the per-type figures (gputypes.py) read. Plain data with no behaviour of
the simulation's own, kept below the modules that use them so that none of those has to
import the engine or the trace reader for their type."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["JobRun", "SimJob"]


@dataclass(slots=True)
class SimJob:
    """One job of a trace. Per-worker resources; `workers` workers of which `min_workers`
    form the gang (0: all of them). Times in seconds from the trace's first submission."""

    id: str
    submit: float
    duration: float
    queue: str
    workers: int = 1
    gpus: float = 0.0  # per worker
    cpu: float = 0.0  # per worker
    memory: float = 0.0  # bytes per worker
    priority: int = 50
    min_workers: int = 0
    gpu_types: tuple[str, ...] = ()  # the GPU types it accepts, most preferred first; (): any

    @property
    def total_gpus(self) -> float:
        return self.gpus * self.workers


@dataclass(slots=True)
class JobRun:
    """A job's life in one simulation."""

    job: SimJob
    team: str
    remaining: float
    gpus: float = 0.0  # held now
    started: float | None = None  # the current run's start
    first_start: float | None = None
    finished: float | None = None
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    rejected: str = ""
    forecast: float | None = None  # its forecast start, taken when it was submitted
    forecast_taken: bool = False
    ran_on: set[str] = field(default_factory=set)  # the GPU types it has held GPUs of
