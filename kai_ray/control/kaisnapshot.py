"""KAI-Scheduler's own snapshot -> the core's ClusterSnapshot, SchedulerConfig and clock.

KAI's scheduler serves its state from `/get-snapshot`: a zip holding one JSON document
(`snapshot.json`) with `config`, `schedulerParams` and `rawObjects` (the Kubernetes
objects it schedules from). This reads that document (or the zip) as KAI reads it:

- nodes: allocatable resources, labels, GPU memory (kai_ray.control.kubenodes); Ready and
  not cordoned to take new pods; what other pods hold there is use outside the jobs; their
  NoSchedule/NoExecute taints keep off the pods that do not tolerate them
  (kai_ray.control.taints, the rule of every backend);
- queues (scheduling.run.ai/v2) in KAI's units (kai_ray.config.queues);
- priority classes, over KAI's four defaults (kai_ray.config.priority);
- pod groups and their pods, bind requests in flight (kai_ray.control.kaijobs);
- topologies (kai.scheduler Topology: its levels' node labels);
- the scheduler's configuration (kai_ray.control.kaiconfig).

Anything read but not understood is named in a warning (KaiSnapshot.warnings), never
dropped in silence; input that is not a KAI snapshot, or an object without the fields
every reader needs, is a KaiSnapshotError naming the object, the field and the fix.
docs/kai-snapshots.md has the mapping field by field.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kai_ray.config.errors import ConfigError
from kai_ray.config.priority import PriorityClasses
from kai_ray.config.queues import KaiQueueSpec, check_queue_tree, parse_queue_object
from kai_ray.control.kaiconfig import KaiParams, read_kai_config
from kai_ray.control.kaijobs import JobContext, read_jobs
from kai_ray.control.kaiobjects import (
    FIX,
    KaiSnapshotError,
    Notes,
    as_list,
    as_map,
    in_node_pool,
    instant,
    key_of,
    object_name,
    section,
)
from kai_ray.control.kaipods import pod_tolerations
from kai_ray.control.kubenodes import GPU_MEMORY_LABEL, node_info, outside_use
from kai_ray.control.taints import EFFECTS, Taint, Toleration, apply_taints
from kai_ray.core import ClusterSnapshot, JobInfo, NodeInfo, QueueInfo, SchedulerConfig, Topology
from kai_ray.core.model.quantity import QuantityError

__all__ = [
    "CLOCK_KEY",
    "USAGE_KEY",
    "ZIP_MAGIC",
    "KaiSnapshot",
    "KaiSnapshotError",
    "is_kai_snapshot",
    "kai_document",
    "read_kai_bytes",
    "read_kai_snapshot",
]

CLOCK_KEY = "kaiDecideRefNow"  # not KAI's: the time the state is taken at, where a tool adds it
# Not KAI's either: the usage history KAI's usage database would answer with (queue ->
# resource -> share of the cluster over the window), where a tool adds it.
USAGE_KEY = "kaiDecideUsage"
ZIP_MAGIC = b"PK\x03\x04"
_READ = ("pods", "nodes", "queues", "podGroups", "bindRequests", "priorityClasses", "topologies")
_TOP_KEYS = frozenset({"config", "schedulerParams", "rawObjects", "discovery", CLOCK_KEY, USAGE_KEY})


@dataclass(frozen=True, slots=True)
class KaiSnapshot:
    """What `load_scenario` gives for a scenario file, from a KAI snapshot: the state, the
    scheduler's configuration, the clock; and what was not understood."""

    snapshot: ClusterSnapshot
    config: SchedulerConfig
    now: float
    warnings: tuple[str, ...] = ()
    # The shared devices KAI named (its runai-gpu-group symbols): node -> symbol -> index.
    devices: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)


def is_kai_snapshot(data: object) -> bool:
    """Whether a parsed JSON document is KAI's snapshot (its `rawObjects` say so)."""
    return isinstance(data, Mapping) and isinstance(data.get("rawObjects"), Mapping)


def kai_document(raw: bytes) -> Any:
    """The JSON inside KAI's zip, or `raw` itself parsed as JSON; KaiSnapshotError for
    anything else."""
    if raw.startswith(ZIP_MAGIC):
        raw = _unzip(raw)
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise KaiSnapshotError(f"not JSON and not a zip; {FIX}") from None
    except json.JSONDecodeError as e:
        raise KaiSnapshotError(f"line {e.lineno}: not JSON ({e.msg}); {FIX}") from None


def _unzip(raw: bytes) -> bytes:
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            names = [n for n in archive.namelist() if not n.endswith("/")]
            inside = [n for n in names if n.endswith(".json")] or names
            if len(inside) != 1:
                raise KaiSnapshotError(
                    f"the zip holds {len(inside)} JSON files ({', '.join(inside) or 'none'}), where KAI's "
                    f"holds one (snapshot.json); {FIX}"
                )
            return archive.read(inside[0])
    except zipfile.BadZipFile as e:
        raise KaiSnapshotError(f"a damaged zip ({e}); {FIX}") from None


def read_kai_bytes(raw: bytes) -> KaiSnapshot:
    """A KAI snapshot from the bytes of its zip or of the JSON inside it."""
    return read_kai_snapshot(kai_document(raw))


def read_kai_snapshot(doc: object) -> KaiSnapshot:
    """A KAI snapshot from its JSON document."""
    if not is_kai_snapshot(doc):
        raise KaiSnapshotError(
            "rawObjects: missing; not a KAI snapshot (KAI's /get-snapshot serves a zip whose "
            f"snapshot.json has config, schedulerParams and rawObjects); {FIX}"
        )
    assert isinstance(doc, Mapping)
    notes = Notes()
    for key in sorted(set(doc) - _TOP_KEYS):
        notes.add(f"{key}: not a part of KAI's snapshot kai-ray knows; not read")
    raw = as_map(doc["rawObjects"], "rawObjects")
    _note_unread_objects(raw, notes)
    params = read_kai_config(doc.get("config"), doc.get("schedulerParams"), notes)
    objects = {key: as_list(raw.get(key), f"rawObjects.{key}") for key in _READ}
    topologies = _topologies(objects["topologies"])
    config = dataclasses.replace(params.config, topologies=topologies)
    now = _clock(doc, objects, notes)
    nodes, taints = _nodes(objects["nodes"], params, notes)
    classes, default_class = _classes(objects["priorityClasses"])
    context = JobContext(
        nodes={n.name: n for n in nodes},
        classes=classes,
        default_class=default_class,
        topologies=topologies,
        scheduler_name=params.scheduler_name,
        node_pool=params.node_pool,
        now=now,
        notes=notes,
    )
    jobs = read_jobs(objects["pods"], objects["podGroups"], objects["bindRequests"], context)
    config = _undefined_topologies(config, jobs.jobs)
    nodes = [_with_outside(n, jobs.outside.get(n.name, ())) for n in nodes]
    tolerations = _tolerations(objects["pods"], jobs.jobs)
    nodes, job_list = apply_taints(nodes, taints, jobs.jobs, tolerations)
    queues = _queues(objects["queues"], notes)
    usage = _usage(doc.get(USAGE_KEY), {q.name for q in queues})
    snapshot = ClusterSnapshot(nodes=nodes, queues=queues, jobs=job_list, usage=usage)
    return KaiSnapshot(snapshot, config, now, tuple(notes.lines()), jobs.devices)


def _usage(raw: object, queues: set[str]) -> dict[str, tuple[float, float, float]]:
    """The usage history as KAI's usage database gives it: per queue, per resource, the
    share of the cluster it used over the window (a queue or resource left out: 0)."""
    usage: dict[str, tuple[float, float, float]] = {}
    for queue, shares in as_map(raw, USAGE_KEY).items():
        where = f"{USAGE_KEY}.{queue}"
        if queue not in queues:
            raise KaiSnapshotError(f"{where}: no such queue in rawObjects.queues; {FIX}")
        values = as_map(shares, where)
        for key in set(values) - {"gpu", "cpu", "memory"}:
            raise KaiSnapshotError(f"{where}.{key}: not a resource (gpu, cpu, memory); {FIX}")
        usage[str(queue)] = tuple(_share(values.get(r, 0), f"{where}.{r}") for r in ("gpu", "cpu", "memory"))  # type: ignore[assignment]
    return usage


def _share(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1e6:
        raise KaiSnapshotError(f"{where}: {value!r} is not a share of the cluster (a number from 0); {FIX}")
    return float(value)


def _note_unread_objects(raw: Mapping[str, Any], notes: Notes) -> None:
    for key in sorted(set(raw) - set(_READ)):
        objects = raw[key]
        if objects:  # KAI lists every kind it knows, most of them empty
            count = len(objects) if isinstance(objects, list) else 1
            notes.add(f"rawObjects.{key}: {count} not read; {_UNREAD.get(key, 'kai-ray has no such object')}")


_UNREAD = {
    "configMaps": "kai-ray reads no ConfigMap (GPU sharing's are written at bind time)",
    "persistentVolumeClaims": "storage is not modelled",
    "csiStorageCapacities": "storage is not modelled",
    "storageClasses": "storage is not modelled",
    "csiDrivers": "storage is not modelled",
    "resourceClaims": "dynamic resource allocation (DRA) is not modelled",
    "resourceSlices": "dynamic resource allocation (DRA) is not modelled",
    "deviceClasses": "dynamic resource allocation (DRA) is not modelled",
}


# ---------------------------------------------------------------- the clock


def _clock(doc: Mapping[str, Any], objects: Mapping[str, Sequence[Any]], notes: Notes) -> float:
    """The snapshot's time; KAI's own snapshots carry none, so then the latest time its
    objects name (the state is at least that recent), with a warning."""
    given = doc.get(CLOCK_KEY)
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int | float):
            raise KaiSnapshotError(f"{CLOCK_KEY}: {given!r} is not a time in seconds since the epoch")
        return float(given)
    latest = max(_times(objects), default=0.0)
    notes.add(
        f"{CLOCK_KEY}: not given (KAI's snapshots carry no clock); taken as the latest time in the "
        "snapshot, so running work may look younger than it is (min-runtime) and stale gangs fresher"
    )
    return latest


def _times(objects: Mapping[str, Sequence[Any]]) -> list[float]:
    """Every time the objects name (creation, start, time annotations)."""
    out = []
    for kind in ("pods", "podGroups", "nodes", "queues"):
        for obj in objects[kind]:
            for value in _time_fields(obj):
                try:
                    at = instant(value, "")
                except KaiSnapshotError:
                    at = None  # an annotation that is not a time
                if at is not None:
                    out.append(at)
    return out


def _time_fields(obj: object) -> list[str]:
    if not isinstance(obj, Mapping):
        return []
    meta, status = obj.get("metadata"), obj.get("status")
    meta = meta if isinstance(meta, Mapping) else {}
    status = status if isinstance(status, Mapping) else {}
    annotations = meta.get("annotations")
    values = [meta.get("creationTimestamp"), status.get("startTime")]
    values += list(annotations.values()) if isinstance(annotations, Mapping) else []
    return [v for v in values if isinstance(v, str)]


# ---------------------------------------------------------------- nodes


def _nodes(
    raw: Sequence[Any], params: KaiParams, notes: Notes
) -> tuple[list[NodeInfo], dict[str, list[Taint]]]:
    """The node pool's nodes, and each one's taints."""
    out, taints = [], {}
    for i, obj in enumerate(raw):
        name = object_name(obj, f"rawObjects.nodes[{i}]")
        if in_node_pool(section(obj, "labels", f"node {name}"), params.node_pool):
            info = _node(obj, name)
            _check_node(info, notes)
            out.append(info)
            taints[name] = _taints(obj, name)
    names = [n.name for n in out]
    if len(set(names)) != len(names):
        raise KaiSnapshotError(f"rawObjects.nodes: a node is listed twice; {FIX}")
    return out, taints


def _node(obj: Mapping[str, Any], name: str) -> NodeInfo:
    """The node by kai_ray.control.kubenodes' rule, once its fields have the types it reads."""
    status = as_map(obj.get("status"), f"node {name}: status")
    spec = as_map(obj.get("spec"), f"node {name}: spec")
    as_map(status.get("allocatable") or status.get("capacity"), f"node {name}: status.allocatable")
    for k, condition in enumerate(as_list(status.get("conditions"), f"node {name}: status.conditions")):
        if not isinstance(condition, Mapping):
            raise KaiSnapshotError(f"node {name}: status.conditions[{k}]: expected an object; {FIX}")
    try:
        return node_info({**obj, "status": status, "spec": spec}, gpu_type_label=None)  # KAI has no types
    except (QuantityError, ValueError, TypeError) as e:  # a quantity, or a label that is no number
        raise KaiSnapshotError(f"node {name}: status.allocatable or its labels: {e}; {FIX}") from None


def _check_node(info: NodeInfo, notes: Notes) -> None:
    if info.gpus and not info.labels.get(GPU_MEMORY_LABEL):
        notes.add(
            f"no label {GPU_MEMORY_LABEL}: its GPUs' memory is taken as 80Gi (gpu-memory requests are "
            "sized against it)",
            "node",
            info.name,
        )


def _taints(obj: Mapping[str, Any], name: str) -> list[Taint]:
    """spec.taints, every effect (apply_taints keeps the blocking ones; PreferNoSchedule is
    a preference the core does not score)."""
    where = f"node {name}: spec.taints"
    out = []
    for i, raw in enumerate(as_list(as_map(obj.get("spec"), f"node {name}: spec").get("taints"), where)):
        taint = as_map(raw, f"{where}[{i}]")
        key, value, effect = (taint.get(k) or "" for k in ("key", "value", "effect"))
        if not (isinstance(key, str) and key and isinstance(value, str) and effect in EFFECTS):
            raise KaiSnapshotError(
                f"{where}[{i}]: {dict(taint)!r} is not a taint (a key, an optional value, an effect of "
                f"{', '.join(EFFECTS)}); {FIX}"
            )
        out.append((key, value, effect))
    return out


def _tolerations(
    pods: Sequence[Any], jobs: Sequence[JobInfo]
) -> dict[tuple[str, str], frozenset[Toleration]]:
    """(job, task) -> the tolerations of the task's pod (a job's pods share its namespace)."""
    by_pod = {key_of(pod): pod_tolerations(pod) for pod in pods}
    return {
        (job.name, task.name): by_pod.get((job.name.split("/", 1)[0], task.name), frozenset())
        for job in jobs
        for task in job.tasks
    }


def _with_outside(node: NodeInfo, pods: Sequence[Mapping[str, Any]]) -> NodeInfo:
    if not pods:
        return node
    # Without their uids: pod_request caches by uid, unique in one cluster but not across
    # snapshots read in one process.
    used = outside_use([{**pod, "metadata": {**pod["metadata"], "uid": ""}} for pod in pods])
    return dataclasses.replace(node, used_outside=tuple(sorted((k, v) for k, v in used.items() if v > 0)))


# ---------------------------------------------------------------- queues, classes, topologies


_QUEUE_FIELDS = frozenset((f.alias or name) for name, f in KaiQueueSpec.model_fields.items()) | frozenset(
    KaiQueueSpec.model_fields
)


def _queues(raw: Sequence[Any], notes: Notes) -> list[QueueInfo]:
    """The Queues, oldest first (the core's tie-break, as the operator orders them)."""
    read: list[tuple[float, str, QueueInfo]] = []
    for i, obj in enumerate(raw):
        name = object_name(obj, f"rawObjects.queues[{i}]")
        spec = dict(as_map(as_map(obj, name).get("spec"), f"queue {name}: spec"))
        for key in sorted(set(spec) - _QUEUE_FIELDS):
            notes.add(f"spec.{key} is not a Queue field kai-ray reads", "queue", name)
            del spec[key]
        doc = {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": spec,
        }
        try:
            queue = parse_queue_object(doc)
        except ConfigError as e:
            raise KaiSnapshotError(f"{e}; fix the Queue, or {FIX}") from None
        created = instant(
            obj["metadata"].get("creationTimestamp"), f"queue {name}: metadata.creationTimestamp"
        )
        read.append((created or 0.0, name, queue))
    queues = [q for _, _, q in sorted(read, key=lambda r: (r[0], r[1]))]
    try:
        check_queue_tree(queues)
    except ConfigError as e:
        raise KaiSnapshotError(f"rawObjects.queues: {e}") from None
    return queues


def _classes(raw: Sequence[Any]) -> tuple[PriorityClasses, str | None]:
    """The cluster's PriorityClasses over KAI's four defaults, and the global default."""
    values: dict[str, int] = {}
    default = None
    for i, obj in enumerate(raw):
        name = object_name(obj, f"rawObjects.priorityClasses[{i}]")
        value = as_map(obj, name).get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            raise KaiSnapshotError(f"priority class {name}: value: {value!r} is not an integer; {FIX}")
        values[name] = value
        if obj.get("globalDefault") is True:
            default = name
    return PriorityClasses.of_cluster(values), default


def _undefined_topologies(config: SchedulerConfig, jobs: Sequence[JobInfo]) -> SchedulerConfig:
    """Each topology a job names that the snapshot does not hold, listed with no levels:
    the core then refuses the job, as KAI does (Placer.refused_topology)."""
    named = {j.topology.topology for j in jobs if j.topology is not None}
    undefined = sorted(named - set(config.topologies))
    if not undefined:
        return config
    topologies = {**config.topologies, **{name: Topology(name, ()) for name in undefined}}
    return dataclasses.replace(config, topologies=topologies)


def _topologies(raw: Sequence[Any]) -> dict[str, Topology]:
    """KAI's Topology objects: their levels' node labels, outermost first."""
    out = {}
    for i, obj in enumerate(raw):
        name = object_name(obj, f"rawObjects.topologies[{i}]")
        spec = as_map(as_map(obj, name).get("spec"), f"topology {name}: spec")
        levels = []
        for k, level in enumerate(as_list(spec.get("levels"), f"topology {name}: spec.levels")):
            label = as_map(level, f"topology {name}: spec.levels[{k}]").get("nodeLabel")
            if not isinstance(label, str) or not label:
                raise KaiSnapshotError(f"topology {name}: spec.levels[{k}].nodeLabel: missing; {FIX}")
            levels.append(label)
        if not levels:
            raise KaiSnapshotError(
                f"topology {name}: spec.levels: empty; a topology has a level at least; {FIX}"
            )
        out[name] = Topology(name, tuple(levels))
    return out
