"""Step functions of virtual time (GPUs held, a fair share), recorded compactly as change
points and averaged over time windows at the end."""

from __future__ import annotations

from array import array

import numpy as np
import numpy.typing as npt

__all__ = ["StepSeries"]

FloatArray = npt.NDArray[np.float64]


class StepSeries:
    """A value that holds from each change point until the next; 0 before the first."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times = array("d")
        self.values = array("d")

    def record(self, t: float, value: float) -> None:
        if self.times and self.times[-1] == t:
            self.values[-1] = value  # several changes at one time: the last one holds
        elif not self.values or self.values[-1] != value:
            self.times.append(t)
            self.values.append(value)

    @property
    def last(self) -> float:
        return self.values[-1] if self.values else 0.0

    def integral(self, edges: FloatArray) -> FloatArray:
        """The integral from 0 to each of `edges` (ascending)."""
        t = np.frombuffer(self.times, dtype=np.float64) if self.times else np.zeros(0)
        v = np.frombuffer(self.values, dtype=np.float64) if self.values else np.zeros(0)
        if not len(t):
            return np.zeros(len(edges))
        cum = np.concatenate(([0.0], np.cumsum(v[:-1] * np.diff(t))))
        k = np.searchsorted(t, edges, side="right") - 1
        inside = k >= 0
        out = np.zeros(len(edges))
        kk = k[inside]
        out[inside] = cum[kk] + v[kk] * (edges[inside] - t[kk])
        return out

    def means(self, edges: FloatArray) -> FloatArray:
        """The time-weighted mean over each window [edges[i], edges[i+1])."""
        widths = np.diff(edges)
        areas = np.diff(self.integral(edges))
        return np.divide(areas, widths, out=np.zeros(len(widths)), where=widths > 0)

    def mean(self, start: float, end: float) -> float:
        return float(self.means(np.array([start, end]))[0]) if end > start else self.last
