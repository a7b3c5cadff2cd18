"""Durations on the simulator's command line (`90`, `90s`, `15m`, `12h`, `30d`, `2w`):
`parse_duration`, with the flag it came from named in its error. A module of its own so
that the command (commands.py) and the autoscaler's `--autoscale` spec (autoscale.py)
read them alike without the autoscaler importing the command that runs it."""

from __future__ import annotations

import re

from kai_ray.config.errors import ConfigError

__all__ = ["parse_duration"]

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(value: str, flag: str) -> float:
    """Seconds from `90`, `90s`, `15m`, `12h`, `30d`, `2w`."""
    m = _DURATION.match(value)
    if not m:
        raise ConfigError(f"{value!r} is not a duration; write seconds or e.g. 30d, 12h, 2w", field=flag)
    return float(m.group(1)) * _UNITS[m.group(2)]
