"""A kai-ray scenario -> the snapshot KAI-Scheduler v0.17 serves at /get-snapshot (`config`,
`schedulerParams`, `rawObjects`), so KAI can decide the state a scenario describes. The
inverse of kai_ray.control.kaisnapshot; tests/conformance/kai-v0.17.0/ holds 200 states
written this way, each as NAME.yaml and NAME.kai-snapshot.json.

The conventions, as those files have them:
- the clock: `now` is written as the top-level key `kaiDecideRefNow` (not KAI's); a time
  of the scenario (a task's `since`, `staleSince`) is `now` plus its offset. Nodes,
  queues, topologies and pod groups date from 30 days before `now`, one minute apart in
  their order (a pod group by its `createdAt`, by default its position); a pod from its
  pod group. Kubernetes times are whole seconds; KAI's annotations keep microseconds;
- objects are named as the scenario names them, in namespace `default`, with uids derived
  from their names (`node-n0`, `queue-d0`, `pc-train`, a pod's and a pod group's own name);
- units: a Queue counts cpu in millicores and memory in MB of 10^6 bytes; a node and a
  pod count cpu in millicores (`64000m`) and memory in bytes; `gpuMemory` is the node label
  nvidia.com/gpu.memory in MiB, and a pod's annotation `gpu-memory` in MiB;
- KAI's scheduler settings at their defaults unless the scenario says otherwise; plugin
  tiers (config.tiers) only where an argument differs from KAI's default configuration,
  and then all of KAI's default plugins, its job solver's scenario generators included
  (without them KAI's reclaim, preempt and consolidation evict nothing).

kaiwritejobs.py writes the jobs: pod groups, pods, bind requests in flight, the
reservation pods of shared devices. What KAI's objects cannot say (GPU types, tenants, a
growing cluster, reservations, a recorded usage window) is a ValueError naming it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from kai_ray.conformance.kaiwritejobs import (
    SCHEDULER,
    Clock,
    KaiJobs,
    class_name,
    kubernetes_entries,
    write_jobs,
)
from kai_ray.control.kaiconfig import DEFAULT_PLUGIN_ORDER
from kai_ray.core.model.snapshot import DEFAULT_GPU_TYPE, UNLIMITED, NodeInfo, QueueInfo, SchedulerConfig
from kai_ray.scenario.loader import Scenario, parse_scenario
from kai_ray.scenario.schema import ScenarioFile

__all__ = ["CLOCK_KEY", "USAGE_KEY", "kai_snapshot"]

Obj = dict[str, Any]
CLOCK_KEY = "kaiDecideRefNow"  # not KAI's: the time the state is taken at
USAGE_KEY = "kaiDecideUsage"  # not KAI's: each queue's usage history, normalised (0..1)
_NS_PER_S = 1_000_000_000
_MIB = 1024**2
# KAI's four priority classes (kai_ray.config.priority has the same), always listed.
_DEFAULT_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
# KAI v0.17's default plugins, in its order (the reader's list: one list for both sides).
_DEFAULT_PLUGINS = DEFAULT_PLUGIN_ORDER
# Scenario settings with no KAI equivalent: each must keep kai-ray's default.
_NOT_KAI = {
    "preemption_delay_s": "config.preemptionDelay",
    "reserve_after_s": "config.reserveAfter",
    "max_reservations": "config.maxReservations",
    "usage_window_s": "config.usageWindow",
    "usage_half_life_s": "config.usageHalfLife",
    "usage_window_type": "config.usageWindowType",
    "closed_queues": "config.closedQueues",
}


def kai_snapshot(
    scenario: Mapping[str, Any], *, now: float, in_flight: Collection[str] = ()
) -> dict[str, Any]:
    """KAI's snapshot of the state `scenario` (a scenario document as parsed from YAML)
    describes, taken at `now` (epoch seconds). `in_flight`: running tasks KAI has bound
    through a BindRequest its binder has not carried out (their pods have no node yet).
    ConfigError (a ValueError) for an invalid scenario, ValueError for one KAI cannot hold."""
    parsed = parse_scenario(dict(scenario))  # every reference checked, every default applied
    spec = ScenarioFile.model_validate(dict(scenario))
    _refuse_what_kai_lacks(spec, parsed)
    clock = Clock(now, parsed.now)
    nodes = {n.name: n for n in parsed.snapshot.nodes}
    jobs = write_jobs(scenario["jobs"], spec.jobs, parsed.snapshot.jobs, nodes, clock, in_flight)
    doc: Obj = {
        CLOCK_KEY: now,
        "config": _config(parsed.config),
        "schedulerParams": _params(parsed.config),
        "rawObjects": _raw_objects(scenario, spec, parsed, jobs, clock),
    }
    if spec.usage:
        _add_usage(doc, spec)
    return doc


def _raw_objects(
    scenario: Mapping[str, Any], spec: ScenarioFile, parsed: Scenario, jobs: KaiJobs, clock: Clock
) -> Obj:
    raw_nodes = {str(k): v for k, v in (scenario.get("nodes") or {}).items()}  # YAML reads node 1 as an int
    return {
        "pods": jobs.pods + list(jobs.reservations.values()),
        "nodes": [_node(n, raw_nodes.get(n.name) or {}, clock) for n in parsed.snapshot.nodes],
        "queues": [_queue(q, i, clock) for i, q in enumerate(parsed.snapshot.queues)],
        "podGroups": jobs.groups,
        "bindRequests": jobs.binds,
        "priorityClasses": _classes(spec),
        "configMaps": [],
        "topologies": [_topology(name, t.levels, clock) for name, t in parsed.config.topologies.items()],
    }


# ---------------------------------------------------------------- what KAI cannot hold


def _refuse_what_kai_lacks(spec: ScenarioFile, parsed: Scenario) -> None:
    default = SchedulerConfig()
    for attr, key in _NOT_KAI.items():
        if getattr(parsed.config, attr) != getattr(default, attr):
            _refuse(key, "a kai-ray extension")
    if parsed.snapshot.can_grow:
        _refuse("clusterCanGrow", "an autoscaler's room is a kai-ray extension")
    for node in parsed.snapshot.nodes:
        if node.gpu_type != DEFAULT_GPU_TYPE:
            _refuse(f"node {node.name!r}: gpuType", "KAI has no GPU types")
    for queue in parsed.snapshot.queues:
        _refuse_queue(queue)
    for job in spec.jobs:
        for key, value in (("gpuTypes", job.gpu_types), ("mixedGpuTypes", job.mixed_gpu_types)):
            if value:
                _refuse(f"job {job.name!r}: {key}", "KAI has no GPU types")
        if job.tenant or job.tenant_labels:
            _refuse(f"job {job.name!r}: tenant", "KAI has no tenants")


def _refuse_queue(queue: QueueInfo) -> None:
    where = f"queue {queue.name!r}"
    if queue.gpu_types or queue.gpu_type_fungibility is not None:
        _refuse(f"{where}: resources.gpuTypes or gpuTypeFungibility", "KAI has no GPU types")
    if queue.access is not None:
        _refuse(f"{where}: access", "KAI has no tenants")
    if queue.expected_runtime is not None or queue.max_runtime is not None:
        _refuse(f"{where}: expectedRuntime or maxRuntime", "a KAI Queue has no run times")


def _refuse(where: str, why: str) -> None:
    raise ValueError(f"{where}: cannot be written as KAI's objects ({why}); remove it or set its default")


# ---------------------------------------------------------------- config, schedulerParams


def _config(config: SchedulerConfig) -> Obj:
    out: Obj = {"actions": ", ".join(config.actions)}
    default = SchedulerConfig()
    changed = (
        config.gpu_placement != default.gpu_placement
        or config.cpu_placement != default.cpu_placement
        or config.gpu_device_order != default.gpu_device_order
        or config.k_value != default.k_value
    )
    if changed:  # KAI takes no tiers as its defaults: write them only to change one
        out["tiers"] = [{"plugins": [_plugin(name, config) for name in _DEFAULT_PLUGINS]}]
    return out


def _plugin(name: str, config: SchedulerConfig) -> Obj:
    """One of KAI's default plugins with the scenario's arguments (KAI's are strings)."""
    if name == "gpupack" and config.gpu_device_order == "spread":
        return {"name": "gpuspread"}  # which device a share lands on
    if name == "nodeplacement":
        return {"name": name, "arguments": {"cpu": config.cpu_placement, "gpu": config.gpu_placement}}
    if name == "proportion" and config.k_value != SchedulerConfig().k_value:
        return {"name": name, "arguments": {"kValue": repr(config.k_value)}}
    return {"name": name}


def _params(config: SchedulerConfig) -> Obj:
    """The scheduler's parameters at KAI's defaults, with the scenario's own. Written even
    where Go's omitempty would drop a zero or false, so a reader cannot take its default."""
    return {
        "schedulerName": SCHEDULER,
        "partitionParams": {"NodePoolLabelKey": "", "NodePoolLabelValue": ""},
        "maxNumberConsolidationPreemptees": config.max_consolidation_preemptees,
        "useSchedulingSignatures": True,
        "fullHierarchyFairness": config.full_hierarchy_fairness,
        "allowConsolidatingReclaim": True,
        "numOfStatusRecordingWorkers": 5,
        "globalDefaultStalenessGracePeriod": round(config.stale_gang_grace_period * _NS_PER_S),
        "schedulePeriod": _NS_PER_S,
    }


def _add_usage(doc: Obj, spec: ScenarioFile) -> None:
    """The scenario's usage history as the non-KAI key kaiDecideUsage: what KAI's usage
    database would answer (KAI's snapshot holds no usage; its config's usageDBConfig only
    says where the database is)."""
    doc[USAGE_KEY] = {q: {"gpu": u.gpu, "cpu": u.cpu, "memory": u.memory} for q, u in spec.usage.items()}


# ---------------------------------------------------------------- nodes, queues, classes, topologies


def _node(node: NodeInfo, raw: Mapping[str, Any], clock: Clock) -> Obj:
    labels = {"kubernetes.io/hostname": node.name}
    resources = {"cpu": _millicores(node.cpu), "memory": _bytes(node.memory), "pods": "100000"}
    if node.gpus:  # what NVIDIA's GPU operator puts on a GPU node
        mib = float(node.gpu_memory) / _MIB
        if not mib.is_integer():
            raise ValueError(f"node {node.name!r}: gpuMemory: not whole MiB, the unit of KAI's label")
        labels.update({"nvidia.com/gpu.count": str(node.gpus), "nvidia.com/gpu.memory": str(int(mib))})
        resources["nvidia.com/gpu"] = str(node.gpus)
    labels.update(node.labels)
    spec: Obj = {}
    if node.unschedulable:
        spec["unschedulable"] = True
    if raw.get("taints"):
        spec["taints"] = kubernetes_entries(raw["taints"])
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "uid": f"node-{node.name}",
            "labels": labels,
            "creationTimestamp": clock.created(0),
        },
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _millicores(cores: float) -> str:
    milli = float(cores) * 1000
    return f"{int(milli)}m" if milli.is_integer() else repr(cores)


def _bytes(amount: float) -> str:
    return str(int(amount)) if float(amount).is_integer() else repr(amount)


def _queue(queue: QueueInfo, position: int, clock: Clock) -> Obj:
    resources = {
        resource: {
            "quota": _kai_units(resource, queue.quota[i]),
            "limit": _kai_units(resource, queue.limit[i]),
            "overQuotaWeight": float(queue.over_quota_weight[i]),
        }
        for i, resource in enumerate(("gpu", "cpu", "memory"))
    }
    spec: Obj = {"resources": resources, "priority": queue.priority}
    if queue.parent:
        spec["parentQueue"] = queue.parent
    # KAI's Queue fields (metav1.Duration); the minruntime plugin resolves them up the tree.
    if queue.preempt_min_runtime is not None:
        spec["preemptMinRuntime"] = go_duration(queue.preempt_min_runtime)
    if queue.reclaim_min_runtime is not None:
        spec["reclaimMinRuntime"] = go_duration(queue.reclaim_min_runtime)
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {
            "name": queue.name,
            "uid": f"queue-{queue.name}",
            "creationTimestamp": clock.created(position),
        },
        "spec": spec,
    }


def _kai_units(resource: str, value: float) -> float:
    """kai-ray's units (cores, bytes) -> a KAI Queue's (millicores, MB); -1 stays -1."""
    if value == UNLIMITED:
        return float(value)
    return float({"cpu": value * 1000, "memory": value / 1e6}.get(resource, value))


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String(), as metav1.Duration writes it: 1h0m0s, 1m30s, 500ms."""
    sign, left = ("-", -seconds) if seconds < 0 else ("", seconds)
    if left == 0:
        return "0s"
    if left < 1:
        return f"{sign}{left * 1000:g}ms"
    hours, rest = divmod(left, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:.9f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{sign}{int(hours)}h{int(minutes)}m{text}"
    return f"{sign}{int(minutes)}m{text}" if minutes else f"{sign}{text}"


def _classes(spec: ScenarioFile) -> list[Obj]:
    """KAI's four classes (with the scenario's values where it redefines them), the
    scenario's own, and one per integer priority a job names (KAI needs a class)."""
    values = dict(_DEFAULT_CLASSES)
    values.update({name: c.value for name, c in spec.priority_classes.items()})
    for job in spec.jobs:
        if isinstance(job.priority, int):
            values.setdefault(class_name(job.priority), job.priority)
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "uid": f"pc-{name}"},
            "value": value,
        }
        for name, value in values.items()
    ]


def _topology(name: str, levels: tuple[str, ...], clock: Clock) -> Obj:
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name, "uid": f"topology-{name}", "creationTimestamp": clock.created(0)},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }
