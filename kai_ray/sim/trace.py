"""Job traces: the Philly trace and kai-ray's generic CSV (docs/simulator.md), read into
`SimJob`s sorted by submission time.

Every row error names the file, the line, the column and the fix: a trace is usually
produced by a script, and the first bad row is where that script went wrong.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from kai_ray.config.errors import ConfigError
from kai_ray.core.model.quantity import parse_quantity
from kai_ray.sim.gputypes import GPU_TYPE_FIX, split_gpu_types
from kai_ray.sim.jobs import SimJob

# SimJob lives in jobs.py, beside the JobRun that holds one; named here as before.
__all__ = ["GENERIC_COLUMNS", "PHILLY_COLUMNS", "SimJob", "TraceError", "read_trace"]

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
# Required first, then optional (with their defaults in docs/simulator.md).
GENERIC_REQUIRED = ("submit_time", "duration", "gpus", "queue")
GENERIC_COLUMNS = (
    *GENERIC_REQUIRED,
    "cpu",
    "memory",
    "priority",
    "gang_size",
    "min_workers",
    "max_workers",
    "name",
    "gpu_types",
)
PHILLY_NODE_GPUS = 8  # Philly's machines: a job over 8 GPUs spans nodes of 8


class TraceError(ConfigError):
    """A trace row the simulator cannot read (file, line, column, fix)."""


def read_trace(path: str | Path, start: float | None = None, end: float | None = None) -> list[SimJob]:
    """The jobs of `path` (Philly or generic, told apart by the header; gzipped when it
    ends in .gz), sorted by submit
    time; `start`/`end`: keep only jobs submitted in [start, end) (seconds from the first
    submission), shifted so that `start` is time 0."""
    path = Path(path)
    try:
        handle = _open(path)
    except OSError as exc:
        raise TraceError(f"cannot read the trace: {exc.strerror}", path=path) from None
    with handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        if not header:
            raise TraceError("the trace is empty; it needs a header line and one row per job", path=path)
        parse = _reader_for(header, path)
        jobs = list(parse(_rows(reader, header, path)))
    if not jobs:
        raise TraceError("the trace has no jobs (only a header)", path=path)
    jobs.sort(key=lambda j: (j.submit, j.id))
    origin = jobs[0].submit
    lo = origin + (start or 0.0)
    hi = math.inf if end is None else origin + end
    kept = [j for j in jobs if lo <= j.submit < hi]
    for j in kept:
        j.submit -= lo
    return kept


def _open(path: Path) -> TextIO:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return path.open(newline="", encoding="utf-8")


_Row = tuple[int, dict[str, str]]


def _rows(reader: Iterator[list[str]], header: list[str], path: Path) -> Iterator[_Row]:
    for cells in reader:
        line = reader.line_num  # type: ignore[attr-defined]
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise TraceError(
                f"line {line}: {len(cells)} values for {len(header)} columns ({', '.join(header)}); "
                "every row needs one value per column",
                path=path,
            )
        yield line, {h: c.strip() for h, c in zip(header, cells, strict=True)}


def _reader_for(header: list[str], path: Path) -> Callable[[Iterator[_Row]], Iterator[SimJob]]:
    if set(PHILLY_COLUMNS) <= set(header):
        return lambda rows: _philly(rows, path)
    missing = [c for c in GENERIC_REQUIRED if c not in header]
    if missing:
        raise TraceError(
            f"line 1: header {','.join(header)!r} is neither the Philly trace's ({','.join(PHILLY_COLUMNS)}) "
            f"nor kai-ray's generic CSV: it lacks {', '.join(missing)} (see docs/simulator.md)",
            path=path,
        )
    unknown = [c for c in header if c not in GENERIC_COLUMNS]
    if unknown:
        raise TraceError(
            f"line 1: unknown column {unknown[0]!r}; the generic CSV has {', '.join(GENERIC_COLUMNS)}",
            path=path,
        )
    return lambda rows: _generic(rows, path)


# ---------------------------------------------------------------- Philly


def _philly(rows: Iterator[_Row], path: Path) -> Iterator[SimJob]:
    for line, row in rows:
        field = _Field(path, line, row)
        submit = field.time("timestamp")
        duration = field.number("duration", minimum=0.0)
        gpus = int(field.number("num_gpus", minimum=1.0, whole=True))
        workers = _philly_workers(gpus)
        yield SimJob(
            id=f"job-{line - 1}",
            submit=submit,
            duration=duration,
            queue=field.text("cluster"),
            workers=workers,
            gpus=gpus / workers,
        )


def _philly_workers(gpus: int) -> int:
    """Nodes of 8 for a job over 8 GPUs: the fewest workers holding equal whole GPU counts
    (12 GPUs: 2 x 6; 24: 3 x 8)."""
    workers = math.ceil(gpus / PHILLY_NODE_GPUS)
    while gpus % workers:
        workers += 1
    return workers


# ---------------------------------------------------------------- generic


def _generic(rows: Iterator[_Row], path: Path) -> Iterator[SimJob]:
    names: dict[str, int] = {}
    for line, row in rows:
        f = _Field(path, line, row)
        name = row.get("name", "")
        if "/" in name:
            raise f.error("name", f"{name!r} contains '/'; job names may not")
        if name and name in names:
            raise f.error("name", f"{name!r} is already the name of line {names[name]}; names must be unique")
        names[name] = line
        max_workers = int(f.number("max_workers", default=0.0, minimum=0.0, whole=True))
        gang = int(f.number("gang_size", default=1.0, minimum=1.0, whole=True))
        min_workers = int(f.number("min_workers", default=0.0, minimum=0.0, whole=True))
        workers = max(gang, max_workers)
        if min_workers > workers:
            raise f.error("min_workers", f"{min_workers} is above max_workers {workers}; lower it")
        if min_workers and max_workers == 0:
            raise f.error("min_workers", "an elastic job needs max_workers too (its most workers)")
        if max_workers and not min_workers:
            min_workers = gang  # the gang (1 by default) is the elastic job's minimum
        gpus = f.number("gpus", minimum=0.0)
        if gpus > 1 and gpus != int(gpus):
            raise f.error("gpus", f"{gpus:g}: above 1 a GPU count must be whole (below 1: a fraction)")
        yield SimJob(
            id=name or f"job-{line - 1}",
            submit=f.number("submit_time", minimum=0.0),
            duration=f.number("duration", minimum=0.0),
            queue=f.text("queue"),
            workers=workers,
            gpus=gpus,
            cpu=f.number("cpu", default=0.0, minimum=0.0),
            memory=f.quantity("memory"),
            priority=int(f.number("priority", default=50.0, whole=True)),
            min_workers=min_workers if min_workers < workers else 0,
            gpu_types=f.gpu_types("gpu_types"),
        )


class _Field:
    """One row's cells, parsed with errors that name file, line, column and fix."""

    def __init__(self, path: Path, line: int, row: dict[str, str]) -> None:
        self.path, self.line, self.row = path, line, row

    def error(self, column: str, message: str) -> TraceError:
        return TraceError(f"line {self.line}: column {column!r}: {message}", path=self.path)

    def text(self, column: str) -> str:
        value = self.row.get(column, "")
        if not value:
            raise self.error(column, "is empty; every job needs one")
        return value

    def number(
        self, column: str, *, default: float | None = None, minimum: float | None = None, whole: bool = False
    ) -> float:
        raw = self.row.get(column, "")
        if raw == "":
            if default is None:
                raise self.error(column, "is empty; write a number")
            return default
        try:
            value = float(raw)
        except ValueError:
            raise self.error(column, f"{raw!r} is not a number; write a number such as 3600") from None
        if not math.isfinite(value):
            raise self.error(column, f"{raw!r} is not a finite number")
        if whole and value != int(value):
            raise self.error(column, f"{raw!r} must be a whole number")
        if minimum is not None and value < minimum:
            raise self.error(column, f"{raw} is below {minimum:g}; it must be at least {minimum:g}")
        return value

    def quantity(self, column: str) -> float:
        raw = self.row.get(column, "")
        if raw == "":
            return 0.0
        try:
            value = parse_quantity(raw)
        except ValueError as exc:
            raise self.error(column, f"{exc}; write bytes or a quantity such as 16Gi") from None
        if value < 0:
            raise self.error(column, f"{raw} is negative")
        return value

    def gpu_types(self, column: str) -> tuple[str, ...]:
        names, problem = split_gpu_types(self.row.get(column, ""))
        if problem is not None:
            raise self.error(column, f"{problem}; {GPU_TYPE_FIX}, separated by '|' (H100|A100)")
        return tuple(names)

    def time(self, column: str) -> float:
        raw = self.text(column)
        try:
            stamp = datetime.strptime(raw, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            raise self.error(column, f"{raw!r} is not a time; write YYYY-MM-DD HH:MM:SS (UTC)") from None
        return stamp.timestamp()
