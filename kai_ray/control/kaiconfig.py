"""KAI's scheduler configuration, as its snapshot carries it, read into the core's
SchedulerConfig: `config` (the actions and the plugins with their arguments) and
`schedulerParams` (the scheduler's command-line parameters). What would change a
decision and has no equivalent in kai-ray is named in a warning; what changes no
decision (worker counts, periods, logging) is read silently.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kai_ray.control.kaiobjects import FIX, KaiSnapshotError, Notes, as_list, as_map
from kai_ray.core import DEFAULT_ACTIONS, SchedulerConfig
from kai_ray.core.model.quantity import QuantityError, parse_duration

__all__ = ["DEFAULT_PLUGINS", "DEFAULT_PLUGIN_ORDER", "KaiParams", "read_kai_config"]

# KAI's default plugins (its conf_util's default configuration, v0.17), in its order: the
# policy kai-ray implements. A snapshot listing others, or fewer, runs another policy.
DEFAULT_PLUGIN_ORDER = (
    "predicates",
    "proportion",
    "priority",
    "elastic",
    "kubeflow",
    "ray",
    "nodeavailability",
    "gpusharingorder",
    "gpupack",
    "resourcetype",
    "subgrouporder",
    "taskorder",
    "nominatednode",
    "dynamicresources",
    "nodeplacement",
    "minruntime",
    "topology",
    "snapshot",
    # The job solver's scenario generators: without them KAI's reclaim, preempt and
    # consolidation find no victim (kai-ray's solver proposes as both do).
    "sg-nodelocalgreedy",
    "sg-multinodegang",
)
DEFAULT_PLUGINS = frozenset(DEFAULT_PLUGIN_ORDER)
# Plugins a default configuration may list beside or instead of those above.
_ALSO_KNOWN = frozenset({"gpuspread", "podaffinity"})
# Missing from the list, they change nothing kai-ray decides (or kai-ray has no such rule).
_OPTIONAL = frozenset({"snapshot", "kubeflow", "ray", "dynamicresources", "nominatednode", "gpupack"})
_PLACEMENTS = ("binpack", "spread")

# schedulerParams that change no decision of one session.
_SILENT_PARAMS = frozenset(
    {"useSchedulingSignatures", "numOfStatusRecordingWorkers", "schedulePeriod", "detailedFitErrors"}
)
# Parameters off by default that kai-ray cannot follow when on: what each would change.
_FLAGS = {
    "restrictSchedulingNodes": "KAI then places GPU and CPU work only on nodes labelled as "
    "GPU or CPU workers; kai-ray uses every node",
    "isInferencePreemptible": "KAI then lets inference work be preempted; kai-ray reads "
    "preemptibility from each pod group and its priority class",
    "scheduleCSIStorage": "KAI then places pods by their volumes' storage capacity; kai-ray "
    "does not model storage",
    "nodeLevelScheduler": "KAI then leaves the final node choice to a node-level scheduler; "
    "kai-ray decides alone",
}
# Read below; anything else is warned about.
_READ_PARAMS = frozenset(
    {
        "schedulerName",
        "partitionParams",
        "maxNumberConsolidationPreemptees",
        "fullHierarchyFairness",
        "globalDefaultStalenessGracePeriod",
        "allowConsolidatingReclaim",
    }
)
_NANOSECONDS = 1e9


@dataclass(frozen=True, slots=True)
class KaiParams:
    """What the snapshot's configuration says to the rest of the reader."""

    config: SchedulerConfig
    scheduler_name: str  # pods naming another scheduler are not KAI's: use outside it
    # The node pool of a partitioned KAI (label key, value); value "" = nodes without the
    # key. None: every node and pod group.
    node_pool: tuple[str, str] | None = None


def _lower_first(key: str) -> str:
    # Go writes struct fields without json tags as they are named (SchedulerName); the
    # snapshot's own tags are camelCase (schedulerName). Read both.
    return key[:1].lower() + key[1:]


def _keys(raw: object, where: str) -> dict[str, Any]:
    return {_lower_first(str(k)): v for k, v in as_map(raw, where).items()}


def read_kai_config(config: object, params: object, notes: Notes) -> KaiParams:
    """The core's config from `config` and `schedulerParams` (absent: KAI's defaults)."""
    base = _from_plugins(_keys(config, "config"), notes)
    values = _keys(params, "schedulerParams")
    for key in sorted(values):
        _check_param(key, values[key], notes)
    changes: dict[str, Any] = {}
    if "maxNumberConsolidationPreemptees" in values:
        changes["max_consolidation_preemptees"] = _count(values["maxNumberConsolidationPreemptees"])
    if "fullHierarchyFairness" in values:
        changes["full_hierarchy_fairness"] = _flag(values["fullHierarchyFairness"], "fullHierarchyFairness")
    if "globalDefaultStalenessGracePeriod" in values:
        changes["stale_gang_grace_period"] = _grace(values["globalDefaultStalenessGracePeriod"])
    name = values.get("schedulerName") or "kai-scheduler"
    return KaiParams(
        config=dataclasses.replace(base, **changes),
        scheduler_name=str(name),
        node_pool=_node_pool(values.get("partitionParams")),
    )


def _check_param(key: str, value: object, notes: Notes) -> None:
    if key in _READ_PARAMS or key in _SILENT_PARAMS:
        return
    if key in _FLAGS:
        if value:
            notes.add(f"schedulerParams.{key} is on: not followed; {_FLAGS[key]}")
        return
    notes.add(f"schedulerParams.{key} ({value!r}): not a parameter kai-ray knows; not read")


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise KaiSnapshotError(
            f"schedulerParams.maxNumberConsolidationPreemptees: {value!r} is not a count of 0 or more; {FIX}"
        )
    return value


def _flag(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise KaiSnapshotError(f"schedulerParams.{key}: {value!r} is not true or false; {FIX}")
    return value


def _grace(value: object) -> float:
    """KAI's grace period: a Go duration, in JSON nanoseconds (or a string like 60s)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) / _NANOSECONDS
    try:
        return parse_duration(value)
    except (QuantityError, ValueError):
        raise KaiSnapshotError(
            f"schedulerParams.globalDefaultStalenessGracePeriod: {value!r} is not a duration "
            f"(nanoseconds, or e.g. 60s); {FIX}"
        ) from None


def _node_pool(raw: object) -> tuple[str, str] | None:
    pool = _keys(raw, "schedulerParams.partitionParams")
    key = pool.get("nodePoolLabelKey") or ""
    if not key:
        return None
    return str(key), str(pool.get("nodePoolLabelValue") or "")


# ---------------------------------------------------------------- config: actions, plugins


def _from_plugins(config: Mapping[str, Any], notes: Notes) -> SchedulerConfig:
    for key in sorted(set(config) - {"actions", "tiers"}):
        if key == "queueDepthPerAction" and config[key]:
            notes.add(
                "config.queueDepthPerAction: not followed; KAI then tries only that many jobs per "
                "queue in an action, kai-ray tries every job"
            )
        elif key == "usageDBConfig":
            notes.add(
                "config.usageDBConfig: KAI reads the queues' usage history from that database, "
                "which a snapshot does not hold; kai-ray decides with the history given as "
                "kaiDecideUsage, and with none without it"
            )
        elif key != "queueDepthPerAction":
            notes.add(f"config.{key}: not read; kai-ray has no such setting")
    actions = _actions(config.get("actions"), notes)
    placement = _plugins(as_list(config.get("tiers"), "config.tiers"), notes)
    return SchedulerConfig(
        actions=actions,
        gpu_placement=placement.gpu,
        cpu_placement=placement.cpu,
        gpu_device_order=placement.devices,
        k_value=placement.k_value,
    )


@dataclass(slots=True)
class _Placement:
    """Node choice (nodeplacement's arguments) and device choice (gpupack or gpuspread)."""

    gpu: Literal["binpack", "spread"] = "binpack"
    cpu: Literal["binpack", "spread"] = "binpack"
    devices: Literal["pack", "spread"] = "pack"
    k_value: float = 1.0  # proportion's kValue: the weight of usage history


def _actions(raw: object, notes: Notes) -> tuple[str, ...]:
    """KAI's comma-separated action list; an empty one means KAI's default actions."""
    if raw is None or raw == "":
        return DEFAULT_ACTIONS
    if not isinstance(raw, str):
        raise KaiSnapshotError(f"config.actions: {raw!r} is not a comma-separated list of actions; {FIX}")
    out: list[str] = []
    for action in (a.strip() for a in raw.split(",")):
        if not action:
            continue
        if action not in DEFAULT_ACTIONS:
            notes.add(
                f"config.actions: {action!r} is not an action kai-ray has ({', '.join(DEFAULT_ACTIONS)}); "
                "left out"
            )
        elif action in out:
            notes.add(f"config.actions: {action!r} is listed twice; it runs once")
        else:
            out.append(action)
    return tuple(out)


def _plugins(tiers: object, notes: Notes) -> _Placement:
    """The placement settings the plugins' arguments give (binpack/spread for nodes, pack or
    spread for GPU devices); a warning for every plugin, switch or argument not followed."""
    names: list[str] = []
    out = _Placement()
    for t, tier in enumerate(as_list(tiers, "config.tiers")):
        for p, raw in enumerate(as_list(_keys(tier, f"config.tiers[{t}]").get("plugins"), "plugins")):
            where = f"config.tiers[{t}].plugins[{p}]"
            plugin = _keys(raw, where)
            name = str(plugin.get("name") or "")
            names.append(name)
            _plugin(name, plugin, where, out, notes)
    if names:
        _missing(set(names), notes)
    return out


def _plugin(name: str, plugin: Mapping[str, Any], where: str, out: _Placement, notes: Notes) -> None:
    if name not in DEFAULT_PLUGINS | _ALSO_KNOWN:
        notes.add(f"{where}: plugin {name!r} is not one of KAI's default plugins; kai-ray does not run it")
    if name == "gpuspread":
        out.devices = "spread"
    for key, value in plugin.items():
        # YAML's disableJobOrder, or Go's field name JobOrderDisabled where it has no tag.
        if (key.startswith("disable") or key.endswith("Disabled")) and value:
            notes.add(f"{where}: {key} on plugin {name!r} is not followed; kai-ray keeps every rule on")
    arguments = as_map(plugin.get("arguments"), f"{where}.arguments")
    for key, value in arguments.items():
        if name == "nodeplacement" and key == "gpu" and value in _PLACEMENTS:
            out.gpu = "binpack" if value == "binpack" else "spread"
        elif name == "nodeplacement" and key == "cpu" and value in _PLACEMENTS:
            out.cpu = "binpack" if value == "binpack" else "spread"
        elif name == "proportion" and key == "kValue":
            out.k_value = _k_value(value, where)
        else:
            notes.add(f"{where}: argument {key}={value!r} of plugin {name!r} is not read")


def _k_value(value: object, where: str) -> float:
    """KAI's rule: not above 0 counts as 0 (history off)."""
    try:
        k = float(str(value))
    except ValueError:
        raise KaiSnapshotError(f"{where}.arguments.kValue: {value!r} is not a number; {FIX}") from None
    if not math.isfinite(k):
        raise KaiSnapshotError(f"{where}.arguments.kValue: {value!r} is not a finite number; {FIX}")
    return max(k, 0.0)


def _missing(names: set[str], notes: Notes) -> None:
    gone = sorted(DEFAULT_PLUGINS - names - _OPTIONAL)
    if "gpupack" not in names and "gpuspread" not in names:
        gone.append("gpupack")
    if gone:
        notes.add(
            f"config.tiers: KAI's default plugins {', '.join(gone)} are not listed, so KAI runs "
            "without them; kai-ray applies their rules anyway"
        )
