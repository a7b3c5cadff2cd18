"""User-facing configuration: queues, priority classes and scheduler options, from YAML.

Pydantic models validate what users write and convert it to the core's plain
dataclasses; every mistake becomes one ConfigError naming the file, object, field and fix.
"""

from kai_ray.config.errors import ConfigError
from kai_ray.config.priority import (
    DEFAULT_PRIORITY_CLASSES,
    PriorityClasses,
    PriorityClassSpec,
    ResolvedPriority,
    UnknownPriorityClassError,
    load_priority_classes,
    parse_priority_classes,
)
from kai_ray.config.queues import (
    KAI_API_VERSION,
    KAI_RAY_API_VERSION,
    QueueSpec,
    load_queues,
    parse_queues,
    queues_from_specs,
)
from kai_ray.config.scheduler import (
    SchedulerOptions,
    SchedulerSettings,
    load_scheduler_config,
    parse_scheduler_config,
    to_scheduler_config,
    with_preemption_delay,
    with_reserve_after,
)

__all__ = [
    "DEFAULT_PRIORITY_CLASSES",
    "KAI_API_VERSION",
    "KAI_RAY_API_VERSION",
    "ConfigError",
    "PriorityClassSpec",
    "PriorityClasses",
    "QueueSpec",
    "ResolvedPriority",
    "SchedulerOptions",
    "SchedulerSettings",
    "UnknownPriorityClassError",
    "load_priority_classes",
    "load_queues",
    "load_scheduler_config",
    "parse_priority_classes",
    "parse_queues",
    "parse_scheduler_config",
    "queues_from_specs",
    "to_scheduler_config",
    "with_preemption_delay",
    "with_reserve_after",
]
