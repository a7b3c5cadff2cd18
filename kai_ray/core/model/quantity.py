"""Kubernetes quantity notation: `500m`, `16Gi`, `1.5`, `2e3`, `10G`."""

from __future__ import annotations

import functools
import re

__all__ = ["QuantityError", "format_bytes", "parse_duration", "parse_quantity", "parse_run_time"]

_SUFFIX: dict[str, float] = {
    "": 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 1024.0,
    "Mi": 1024.0**2,
    "Gi": 1024.0**3,
    "Ti": 1024.0**4,
    "Pi": 1024.0**5,
    "Ei": 1024.0**6,
}
_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-zA-Z]*)\s*$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNIT = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class QuantityError(ValueError):
    """A quantity or duration that cannot be read; the message says what is accepted."""


def parse_quantity(value: object) -> float:
    """A number, or a string in Kubernetes quantity notation, as a float."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity; write a number such as 4, 500m or 16Gi")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity; write a number such as 4, 500m or 16Gi")
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> float:
    # The same few strings ("1", "500m", "16Gi") come back in every pod of a cluster.
    match = _QUANTITY.match(value)
    if match is None or match.group(2) not in _SUFFIX:
        raise QuantityError(
            f"{value!r} is not a quantity; write a number with an optional suffix "
            "(m, k, M, G, T, Ki, Mi, Gi, Ti), e.g. 500m or 16Gi"
        )
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def parse_duration(value: object) -> float:
    """Seconds from a number, or a string like `90s`, `5m`, `1h30m`, `-300`, `250ms`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        try:
            return sign * float(body)
        except ValueError:
            pass
        parts = _DURATION.findall(body)
        if parts and "".join(n + u for n, u in parts) == body:
            return sign * sum(float(n) * _DURATION_UNIT[u] for n, u in parts)
    raise QuantityError(f"{value!r} is not a duration; write seconds or e.g. 90s, 5m, 1h30m")


def parse_run_time(value: object) -> float:
    """A run time (expected or max): a duration above 0 and finite, in seconds. Raises
    QuantityError (a ValueError) saying what is wrong; callers add where it was written."""
    seconds = parse_duration(value)
    if not 0 < seconds < float("inf"):
        raise QuantityError("must be a run time above 0 (leave it out for none)")
    return seconds


def format_bytes(value: float) -> str:
    """A byte count the way a person reads it: 16Gi, 1.5Ti, 100Mi."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _SUFFIX[suffix]
        if abs(value) >= unit:
            return f"{value / unit:.4g}{suffix}"
    return f"{value:.4g}"
