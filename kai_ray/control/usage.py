"""Queue usage history for time-based fair share (KAI's time-aware fairness).

The controller records, after every cycle, what each queue holds and what the cluster
can hold; `usage(now)` turns that history into the core's `ClusterSnapshot.usage`: per
queue and resource, the queue's allocation integrated over the window, divided by the
cluster's capacity integrated over the same window (KAI: 24 GPU-hours used in a 10-GPU
cluster over 10 hours = 0.24). Pure: times are the caller's clock, never the wall's.

- Piecewise constant: the allocation recorded at t holds until the next record (and up
  to `now` for the last one).
- Windows: "sliding" = the last `window_s` seconds before now; "tumbling" = fixed
  windows [k W, (k+1) W) of the clock (k an integer), the history starting afresh at
  each boundary. Only the recorded part of the window counts, for the allocation and
  the capacity alike: a scheduler that started an hour ago with a week's window
  normalises over that hour (KAI's Prometheus query sums what it has, too).
- Decay (`half_life_s` > 0): usage at age a weighs 0.5 ** (a / half_life), for the
  allocation and the capacity alike, so a queue that always held the whole cluster
  stays at 1.0.
- Memory is bounded: at most `max_segments` constant pieces are kept. Beyond that,
  adjacent old pieces are merged (their integrals, plain and decayed, add exactly);
  the only approximation is at the sliding window's edge, where a merged piece that
  straddles it counts in proportion to its part inside (at most 4 W / max_segments
  of the window is affected). Pieces that left the window are dropped.

Queues are recorded with their subtree sums (the core's QueueStatus.allocated), so a
parent's usage is the sum of its children's, as the fair share expects at every level.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from kai_ray.core import CycleResult, NodeInfo, SchedulerConfig

__all__ = ["UsageHistory", "cluster_capacity", "history_for", "queue_allocation"]

FloatArray = npt.NDArray[np.float64]
_LN2 = math.log(2.0)


class UsageHistory:
    def __init__(
        self,
        window_s: float,
        half_life_s: float = 0.0,
        window_type: Literal["sliding", "tumbling"] = "sliding",
        *,
        max_segments: int = 1024,
    ) -> None:
        if not window_s > 0:
            raise ValueError(f"usage history: window_s is {window_s}; use a duration > 0")
        if half_life_s < 0:
            raise ValueError(f"usage history: half_life_s is {half_life_s}; use 0 (no decay) or more")
        if window_type not in ("sliding", "tumbling"):
            raise ValueError(f"usage history: window_type {window_type!r}; use 'sliding' or 'tumbling'")
        if max_segments < 8:
            raise ValueError(f"usage history: max_segments is {max_segments}; use at least 8")
        self.window_s, self.half_life_s, self.window_type = float(window_s), float(half_life_s), window_type
        self.max_segments = max_segments
        self._names: list[str] = []
        self._rows: dict[str, int] = {}  # queue -> row; the last row is the capacity
        # Closed pieces: start, end, integral of each row, integral decayed to the end,
        # and whether the rate was constant (then a cut at the window's edge is exact).
        self._start: list[float] = []
        self._end: list[float] = []
        self._plain: list[FloatArray] = []
        self._decayed: list[FloatArray] = []
        self._constant: list[bool] = []
        self._last_t: float | None = None
        self._rate: FloatArray = np.zeros((1, 3))  # rows: queues then capacity

    def __len__(self) -> int:
        """Pieces kept (closed ones), for checking that memory stays bounded."""
        return len(self._start)

    def record(self, now: float, allocated: Mapping[str, Sequence[float]], capacity: Sequence[float]) -> None:
        """What each queue holds from `now` on (per resource: gpu, cpu, memory) and the
        cluster's capacity. A queue left out holds nothing. Times must not go back."""
        if self._last_t is not None:
            if now < self._last_t:
                raise ValueError(f"usage history: record at {now} is before the last one at {self._last_t}")
            if now > self._last_t:
                self._close(self._last_t, now)
        for name in allocated:
            self._row(name)
        rate = np.zeros((len(self._names) + 1, 3))
        for name, values in allocated.items():
            rate[self._rows[name]] = values[:3]
        rate[-1] = capacity[:3]
        self._rate, self._last_t = rate, now
        self._forget(now)

    def usage(self, now: float) -> dict[str, tuple[float, float, float]]:
        """Each recorded queue's usage over the window ending at `now`, normalised to
        the cluster's capacity over it: 0..1 per resource (0 without history)."""
        if self._last_t is None:
            return {}
        if now < self._last_t:
            raise ValueError(f"usage history: usage at {now} is before the last record at {self._last_t}")
        total = self._total(now, self._window_start(now))
        cap = total[-1]
        norm = np.divide(total[:-1], cap, out=np.zeros_like(total[:-1]), where=cap > 0)
        return {
            name: (float(r[0]), float(r[1]), float(r[2])) for name, r in zip(self._names, norm, strict=True)
        }

    # ------------------------------------------------------------ integrals

    def _window_start(self, now: float) -> float:
        if self.window_type == "tumbling":
            return math.floor(now / self.window_s) * self.window_s
        return now - self.window_s

    def _total(self, now: float, lo: float) -> FloatArray:
        """Sum over the pieces inside [lo, now], weighted by decay when there is one."""
        rows = len(self._names) + 1
        total = np.zeros((rows, 3))
        assert self._last_t is not None
        pieces = [(s, e, p, d, c) for s, e, p, d, c in self._pieces() if e > lo]
        open_start = max(self._last_t, lo)
        if now > open_start:
            plain, decayed = self._constant_integrals(self._rate, open_start, now)
            pieces.append((open_start, now, plain, decayed, True))
        h = self.half_life_s
        for start, end, plain, decayed, constant in pieces:
            value = decayed if h > 0 else plain
            if start < lo:  # straddles the window's edge: only its part inside counts
                if constant:
                    rate = plain / (end - start)
                    p, d = self._constant_integrals(rate, lo, end)
                    value = d if h > 0 else p
                else:
                    value = value * ((end - lo) / (end - start))
            if h > 0:
                value = value * 0.5 ** ((now - end) / h)
            total += value
        return total

    def _pieces(self) -> zip[tuple[float, float, FloatArray, FloatArray, bool]]:
        return zip(self._start, self._end, self._plain, self._decayed, self._constant, strict=True)

    def _constant_integrals(
        self, rate: FloatArray, start: float, end: float
    ) -> tuple[FloatArray, FloatArray]:
        """A constant rate over [start, end]: its integral, and its integral weighted by
        0.5 ** ((end - t) / half_life) (decayed to the piece's end)."""
        length = end - start
        if self.half_life_s <= 0:
            return rate * length, rate * length
        h = self.half_life_s
        return rate * length, rate * (h / _LN2 * (1.0 - 0.5 ** (length / h)))

    # ------------------------------------------------------------ memory

    def _row(self, name: str) -> int:
        row = self._rows.get(name)
        if row is None:
            # A new queue takes the row before the capacity's, in the stored pieces too
            # (it held nothing then): every array keeps one row per queue plus capacity.
            row = self._rows[name] = len(self._names)
            self._names.append(name)
            self._plain = [_insert_row(a, row) for a in self._plain]
            self._decayed = [_insert_row(a, row) for a in self._decayed]
        return row

    def _close(self, start: float, end: float) -> None:
        plain, decayed = self._constant_integrals(self._rate, start, end)
        self._start.append(start)
        self._end.append(end)
        self._plain.append(plain)
        self._decayed.append(decayed)
        self._constant.append(True)
        if len(self._start) > self.max_segments:
            self._coalesce()

    def _forget(self, now: float) -> None:
        """Drop the pieces that ended before the window: they can never count again."""
        lo = self._window_start(now)
        keep = next((i for i, e in enumerate(self._end) if e > lo), len(self._end))
        if keep:
            del self._start[:keep], self._end[:keep], self._plain[:keep]
            del self._decayed[:keep], self._constant[:keep]

    def _coalesce(self) -> None:
        """Merge adjacent pieces, oldest first, into pieces no longer than 4 W / max:
        the window then holds at most max / 2 of them (two neighbours together are
        always longer than that width)."""
        width = 4.0 * self.window_s / self.max_segments
        h = self.half_life_s
        merged: list[tuple[float, float, FloatArray, FloatArray, bool]] = []
        for start, end, plain, decayed, constant in self._pieces():
            if merged and end - merged[-1][0] <= width:
                s0, e0, p0, d0, _ = merged[-1]
                # Decayed integrals are kept decayed to the piece's end: the earlier one
                # decays by the time between the two ends before they add up.
                carried = d0 * 0.5 ** ((end - e0) / h) if h > 0 else d0
                merged[-1] = (s0, end, p0 + plain, carried + decayed, False)
            else:
                merged.append((start, end, plain, decayed, constant))
        self._start = [m[0] for m in merged]
        self._end = [m[1] for m in merged]
        self._plain = [m[2] for m in merged]
        self._decayed = [m[3] for m in merged]
        self._constant = [m[4] for m in merged]


def history_for(config: SchedulerConfig) -> UsageHistory | None:
    """The history the config asks for; None when time-based fair share is off."""
    if config.usage_window_s <= 0:
        return None
    return UsageHistory(config.usage_window_s, config.usage_half_life_s, config.usage_window_type)


def queue_allocation(result: CycleResult) -> dict[str, tuple[float, float, float]]:
    """What every queue holds once the cycle's decisions are carried out (subtree sums)."""
    return {name: status.allocated for name, status in result.queues.items()}


def cluster_capacity(nodes: Iterable[NodeInfo]) -> tuple[float, float, float]:
    """The cluster's capacity as the core totals it for fair share: every node's."""
    gpu = cpu = memory = 0.0
    for n in nodes:
        gpu, cpu, memory = gpu + n.gpus, cpu + n.cpu, memory + n.memory
    return (gpu, cpu, memory)


def _insert_row(values: FloatArray, row: int) -> FloatArray:
    return np.insert(values, row, 0.0, axis=0)
