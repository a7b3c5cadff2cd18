"""GPUs allocated per queue over the last hours, for the Timeline page.

A ring of fixed steps (15 s by default, 6 hours kept): each cycle's allocation is written
into the step it falls in, the last value of a step standing for it; steps the scheduler
did not see (it was busy or down) keep the value before them. One float32 per queue and
step: 1,000 queues over 6 hours take under 6 MB. Kept in memory only: a restarted
scheduler starts a new timeline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["Timeline"]


class Timeline:
    def __init__(self, step_s: float = 15.0, keep_s: float = 6 * 3600.0) -> None:
        if step_s <= 0 or keep_s < step_s:
            raise ValueError("timeline: step_s must be > 0 and keep_s at least one step")
        self.step_s = step_s
        self.size = int(keep_s // step_s)
        self._columns: dict[str, int] = {}
        self._values = np.zeros((self.size, 8), dtype=np.float32)
        self._last: int | None = None  # the absolute step last written
        self._first: int | None = None  # the first absolute step with data

    def record(self, now: float, allocated: Mapping[str, float]) -> None:
        """The GPUs each queue holds at `now` (queues not named hold none)."""
        k = math.floor(now / self.step_s)
        if self._last is not None and k < self._last:
            return  # the clock stepped back: keep what was written
        self._grow(allocated.keys())
        row = np.zeros(self._values.shape[1], dtype=np.float32)
        for queue, gpus in allocated.items():
            row[self._columns[queue]] = gpus
        if self._last is not None:
            held = self._values[self._last % self.size].copy()
            for step in range(max(self._last + 1, k - self.size + 1), k):
                self._values[step % self.size] = held
        else:
            self._first = k
        self._values[k % self.size] = row
        self._last = k
        if self._first is not None and k - self._first >= self.size:
            self._first = k - self.size + 1

    def _grow(self, queues: Iterable[str]) -> None:
        for queue in queues:
            if queue not in self._columns:
                self._columns[queue] = len(self._columns)
        if len(self._columns) > self._values.shape[1]:
            wider = np.zeros(
                (self.size, max(len(self._columns), 2 * self._values.shape[1])), dtype=np.float32
            )
            wider[:, : self._values.shape[1]] = self._values
            self._values = wider

    def view(self, hours: float = 6.0, top: int = 12, queues: Iterable[str] | None = None) -> dict[str, Any]:
        """The last `hours`: step times and, for the `top` queues by peak allocation among
        `queues` (all recorded ones by default), one series each; the others summed as
        "other" so that the stack still adds up to what the queues hold."""
        if self._last is None or self._first is None:
            return {"step_s": self.step_s, "times": [], "series": {}}
        steps = max(1, min(self.size, int(hours * 3600 // self.step_s)))
        start = max(self._first, self._last - steps + 1)
        ks = list(range(start, self._last + 1))
        block = self._values[[k % self.size for k in ks]]
        names = [q for q in (self._columns if queues is None else queues) if q in self._columns]
        cols = [self._columns[q] for q in names]
        peaks = block[:, cols].max(axis=0) if cols else np.zeros(0)
        ranked = sorted(range(len(names)), key=lambda i: (-float(peaks[i]), names[i]))
        shown = [i for i in ranked[: max(0, top)] if peaks[i] > 0]
        series = {names[i]: _rounded(block[:, cols[i]]) for i in shown}
        rest = [cols[i] for i in ranked if i not in shown]
        if rest and block[:, rest].sum() > 0:
            series["other"] = _rounded(block[:, rest].sum(axis=1))
        return {"step_s": self.step_s, "times": [k * self.step_s for k in ks], "series": series}


def _rounded(values: np.ndarray) -> list[float]:
    return [round(float(v), 3) for v in values]
