"""Scheduler options as users write them -> the core's SchedulerConfig."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from kai_ray.config.base import Duration, StrictModel, read_yaml
from kai_ray.config.errors import ConfigError, from_validation_error
from kai_ray.core.model.quantity import parse_duration
from kai_ray.core.model.snapshot import DEFAULT_ACTIONS, SchedulerConfig, Topology

__all__ = [
    "PlacementSpec",
    "SchedulerOptions",
    "SchedulerSettings",
    "TopologySpec",
    "check_actions",
    "load_scheduler_config",
    "parse_scheduler_config",
    "to_scheduler_config",
    "with_preemption_delay",
    "with_reserve_after",
]

Placement = Literal["binpack", "spread"]


class PlacementSpec(StrictModel):
    gpu: Placement = "binpack"  # node choice for tasks with GPUs
    cpu: Placement = "binpack"  # the same for tasks without


class SchedulerOptions(StrictModel):
    """The `config` map of a scenario: tuning knobs, not the actions or topologies."""

    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    gpu_device_order: Literal["pack", "spread"] = "pack"
    k_value: float = Field(1.0, ge=0)
    stale_gang_grace_period: Duration = 60.0  # negative: never evict
    # How long a gang that could start only by evicting others waits first for new nodes,
    # where an autoscaler can add them (0: no wait).
    preemption_delay: Duration = 0.0
    max_consolidation_preemptees: int = Field(16, ge=0)
    full_hierarchy_fairness: bool = True
    # Time-based fair share: the window of usage history (0: off), its decay, its kind.
    usage_window: Duration = 0.0
    usage_half_life: Duration = 0.0
    usage_window_type: Literal["sliding", "tumbling"] = "sliding"
    # Reservations with backfill: a gang that has waited this long holds the room it is
    # expected to start on (0: off); at most this many gangs hold one at once.
    reserve_after: Duration = 0.0
    max_reservations: int = Field(1, ge=1)
    # Queues closed to tenants unless a queue's access.tenants (or tenantSelector) names
    # them (docs/tenants.md); off: a queue without a rule is open to all, as in KAI.
    closed_queues: bool = False

    @field_validator("usage_window", "usage_half_life", "preemption_delay", "reserve_after")
    @classmethod
    def _not_negative(cls, value: float, info: ValidationInfo) -> float:
        if value < 0:
            off, example = _ZERO_MEANS[info.field_name or ""]
            raise ValueError(f"{value:g}s is negative; use 0 ({off}) or a duration such as {example}")
        return value


# What 0 means for a duration that may not be negative, and what to write instead.
_ZERO_MEANS = {
    "usage_window": ("time-based fair share off", "7d or 1h"),
    "usage_half_life": ("no decay", "7d or 1h"),
    "preemption_delay": ("no wait for new nodes", "2m or 90s"),
    "reserve_after": ("no reservations", "30m or 2h"),
}


class TopologySpec(StrictModel):
    levels: list[str] = Field(min_length=1)  # node labels, outermost first

    @field_validator("levels")
    @classmethod
    def _distinct(cls, levels: list[str]) -> list[str]:
        seen = {level for level in levels if levels.count(level) > 1}
        if seen:
            raise ValueError(f"level {sorted(seen)[0]!r} is listed twice; list each label once")
        return levels


class SchedulerSettings(SchedulerOptions):
    """A scheduler options file: the knobs plus the actions and the topologies."""

    actions: list[str] = Field(default_factory=lambda: list(DEFAULT_ACTIONS))
    topologies: dict[str, TopologySpec] = Field(default_factory=dict)

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, actions: list[str]) -> list[str]:
        check_actions(actions)
        return actions


def check_actions(actions: Sequence[str]) -> None:
    for action in actions:
        if action not in DEFAULT_ACTIONS:
            raise ValueError(
                f"{action!r} is not an action; use some of {', '.join(DEFAULT_ACTIONS)} "
                "(in the order they should run)"
            )
    twice = [a for a in DEFAULT_ACTIONS if actions.count(a) > 1]
    if twice:
        raise ValueError(f"action {twice[0]!r} is listed twice; list each action once")


def to_scheduler_config(
    options: SchedulerOptions,
    actions: Sequence[str] | None = None,
    topologies: Mapping[str, TopologySpec] | None = None,
) -> SchedulerConfig:
    """The core's config. A SchedulerSettings brings its own actions and topologies."""
    if isinstance(options, SchedulerSettings):
        actions = options.actions if actions is None else actions
        topologies = options.topologies if topologies is None else topologies
    return SchedulerConfig(
        actions=tuple(DEFAULT_ACTIONS if actions is None else actions),
        gpu_placement=options.placement.gpu,
        cpu_placement=options.placement.cpu,
        gpu_device_order=options.gpu_device_order,
        k_value=options.k_value,
        stale_gang_grace_period=options.stale_gang_grace_period,
        preemption_delay_s=options.preemption_delay,
        max_consolidation_preemptees=options.max_consolidation_preemptees,
        full_hierarchy_fairness=options.full_hierarchy_fairness,
        usage_window_s=options.usage_window,
        usage_half_life_s=options.usage_half_life,
        usage_window_type=options.usage_window_type,
        reserve_after_s=options.reserve_after,
        max_reservations=options.max_reservations,
        closed_queues=options.closed_queues,
        topologies={
            name: Topology(name=name, levels=tuple(spec.levels)) for name, spec in (topologies or {}).items()
        },
    )


def parse_scheduler_config(data: Any, *, path: str | Path | None = None) -> SchedulerConfig:
    """A YAML map of options (None or empty: every default)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("the file must be a map of scheduler options (placement, kValue, ...)", path=path)
    try:
        settings = SchedulerSettings.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, data, path=path) from None
    return to_scheduler_config(settings)


def load_scheduler_config(path: str | Path) -> SchedulerConfig:
    return parse_scheduler_config(read_yaml(path), path=path)


def with_preemption_delay(
    config: SchedulerConfig | None, value: str | None, flag: str
) -> SchedulerConfig | None:
    """The config with a command line's preemption delay (`--preemption-delay 2m`) in
    place of its file's; as it was when the flag is not given. ConfigError naming the flag
    for a value that is not a duration of 0 or more."""
    if value is None:
        return config
    seconds = _flag_duration(value, flag, "0 (no wait)")
    return dataclasses.replace(config or SchedulerConfig(), preemption_delay_s=seconds)


def with_reserve_after(
    config: SchedulerConfig | None, value: str | None, flag: str
) -> SchedulerConfig | None:
    """The config with a command line's reservation wait (`--reserve-after 30m`) in place
    of its file's reserveAfter; as it was when the flag is not given."""
    if value is None:
        return config
    seconds = _flag_duration(value, flag, "0 (no reservations)")
    return dataclasses.replace(config or SchedulerConfig(), reserve_after_s=seconds)


def _flag_duration(value: str, flag: str, zero: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0 or math.isinf(seconds):
        raise ConfigError(
            f"{value!r} is not a duration of 0 or more; write e.g. 2m, 90s or {zero}", field=flag
        )
    return seconds
