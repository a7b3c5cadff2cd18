"""KAI-Scheduler's own snapshots, read as they are (kai_ray.control.kaisnapshot).

(a) Each of the 200 KAI v0.17.0 states: the snapshot read from NAME.kai-snapshot.json is
the state of its twin NAME.yaml (same nodes, queues, jobs, tasks), and one kai-ray cycle
decides the same on both. (b) The zip form, warnings for what is not understood, errors
for what cannot be read, and `kai-ray sim --snapshot` on a KAI snapshot.
"""

from __future__ import annotations

import copy
import io
import json
import math
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from kai_ray.cli import main
from kai_ray.control.kaisnapshot import KaiSnapshot, KaiSnapshotError, read_kai_bytes, read_kai_snapshot
from kai_ray.core import Bind, ClusterSnapshot, JobInfo, TaskInfo, TaskStatus, run_cycle
from kai_ray.scenario import load_scenario, run_scenario
from kai_ray.scenario.kaisnapshot import kai_scenario, load_kai_scenario

STATES = Path(__file__).resolve().parent / "kai-v0.17.0"
NAMES = sorted(p.name.removesuffix(".kai-snapshot.json") for p in STATES.glob("*.kai-snapshot.json"))
# Labels a KAI node carries that its scenario twin leaves implicit.
NODE_LABELS = {"kubernetes.io/hostname", "nvidia.com/gpu.count", "nvidia.com/gpu.memory"}
Doc = dict[str, Any]


def _short(job: str) -> str:
    return job.split("/", 1)[1]  # "default/p0": the pod group's namespace, then its name


def _nodes(snapshot: ClusterSnapshot) -> list[tuple[Any, ...]]:
    return [
        (n.name, n.gpus, n.cpu, n.memory, n.gpu_memory, n.unschedulable, n.used_outside, _labels(n.labels))
        for n in snapshot.nodes
    ]


def _labels(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in NODE_LABELS}


def _jobs(snapshot: ClusterSnapshot, now: float) -> list[tuple[Any, ...]]:
    """Each job as the core reads it, by its scenario name; running tasks' start relative to
    the clock in whole seconds (KAI's pod times are whole seconds, its clock is not)."""
    return [
        (
            j.name.split("/")[-1],
            j.queue,
            j.priority,
            j.preemptible,
            j.gang_size,
            j.topology,
            dict(j.node_selector),
            dict(j.subgroups),
            [_task(t, now) for t in j.tasks],
        )
        for j in snapshot.jobs
    ]


def _task(t: TaskInfo, now: float) -> tuple[Any, ...]:
    started = t.since - math.floor(now) if t.status is TaskStatus.RUNNING else None
    return (t.name, t.status, t.node, t.request, t.gpu_group, t.subgroup, t.node_affinity, started)


def _same_state(yaml: ClusterSnapshot, yaml_now: float, kai: ClusterSnapshot, kai_now: float) -> None:
    assert _nodes(kai) == _nodes(yaml)
    assert kai.queues == yaml.queues
    assert _jobs(kai, kai_now) == _jobs(yaml, yaml_now)  # the same jobs, in the same (age) order


def _decided(jobs: list[JobInfo], name: Callable[[str], str]) -> dict[str, list[tuple[str, str | None]]]:
    return {name(j.name): [(t.status.value, t.node) for t in j.tasks] for j in jobs}


@pytest.mark.parametrize("name", NAMES)
def test_a_kai_snapshot_is_its_scenario_twin_and_decides_the_same(name: str) -> None:
    yaml = load_scenario(STATES / f"{name}.yaml")
    kai = load_kai_scenario(STATES / f"{name}.kai-snapshot.json")
    assert kai.warnings == ()
    assert kai.scenario.config == yaml.config
    _same_state(yaml.snapshot, yaml.now, kai.scenario.snapshot, kai.scenario.now)
    ours, theirs = run_scenario(yaml), run_scenario(kai.scenario)
    assert ours.error is None and theirs.error is None
    assert _decided(theirs.jobs, _short) == _decided(ours.jobs, str)


def test_all_200_states_are_here() -> None:
    assert len(NAMES) == 200


# ---------------------------------------------------------------- a small snapshot


def _pod(name: str, group: str | None, gpu: str = "1", node: str = "") -> Doc:
    requests = {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": gpu}
    pod: Doc = {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {},
            "annotations": {"pod-group-name": group} if group else {},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "resources": {"requests": requests}}],
        },
        "status": {"phase": "Pending"},
    }
    if node:
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "startTime": "2026-01-01T00:10:00Z"}
    return pod


def _group(name: str, **spec: Any) -> Doc:
    return {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"minMember": 1, "queue": "team", "priorityClassName": "train", **spec},
    }


def _snapshot() -> Doc:
    """One 4-GPU node; queue team; job `run` running 2 GPUs, job `wait` asking for 4."""
    node = {
        "metadata": {"name": "n0", "labels": {"nvidia.com/gpu.memory": "40960"}},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "4"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    queue = {
        "metadata": {"name": "team", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"resources": {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 1}}},
    }
    return {
        "kaiDecideRefNow": 1767226800.0,  # 2026-01-01T00:20:00Z
        "config": {"actions": "allocate, consolidation, reclaim, preempt, stalegangeviction"},
        "schedulerParams": {
            "schedulerName": "kai-scheduler",
            "globalDefaultStalenessGracePeriod": 60 * 10**9,
        },
        "rawObjects": {
            "pods": [_pod("run-0", "run", "2", node="n0"), _pod("wait-0", "wait", "4")],
            "nodes": [node],
            "queues": [queue],
            "podGroups": [_group("run"), _group("wait")],
            "bindRequests": [],
            "priorityClasses": [],
            "configMaps": [],
            "topologies": [],
        },
    }


def _set(path: str, value: Any) -> Callable[[Doc], None]:
    """A change to a snapshot: `value` at a dotted path (list indices as numbers)."""

    def change(doc: Doc) -> None:
        *parents, last = path.split(".")
        into: Any = doc
        for part in parents:
            into = into[int(part)] if isinstance(into, list) else into.setdefault(part, {})
        into[last] = value

    return change


def _read(doc: Doc) -> KaiSnapshot:
    return read_kai_snapshot(json.loads(json.dumps(doc)))


def _zip(doc: Doc, names: tuple[str, ...] = ("snapshot.json",)) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in names:
            archive.writestr(name, json.dumps(doc))
    return buffer.getvalue()


def _job(kai: KaiSnapshot, name: str) -> JobInfo:
    return next(j for j in kai.snapshot.jobs if j.name == f"ml/{name}")


def test_the_zip_kai_serves_reads_as_the_json_inside_it() -> None:
    doc = _snapshot()
    assert read_kai_bytes(_zip(doc)) == read_kai_bytes(json.dumps(doc).encode()) == _read(doc)
    kai = _read(doc)
    assert kai.now == 1767226800.0 and kai.warnings == ()
    run, wait = _job(kai, "run"), _job(kai, "wait")
    assert [(t.status, t.node, t.request.gpu) for t in run.tasks] == [(TaskStatus.RUNNING, "n0", 2.0)]
    assert run.tasks[0].since == 1767226200.0 and (run.priority, run.preemptible) == (50, True)
    assert [t.status for t in wait.tasks] == [TaskStatus.PENDING]
    assert kai.snapshot.nodes[0].gpu_memory == 40 * 2**30 and kai.snapshot.queues[0].quota[0] == 4


def test_what_kai_says_of_pods_becomes_the_tasks_state() -> None:
    doc = _snapshot()
    raw = doc["rawObjects"]
    raw["pods"][0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:19:00Z"  # being deleted
    frac, mem, bound = (
        _pod("frac-0", "frac", "0", node="n0"),
        _pod("mem-0", "mem", "0"),
        _pod("bound-0", "bound"),
    )
    frac["metadata"].update(annotations={"pod-group-name": "frac", "gpu-fraction": "0.5"})
    frac["metadata"]["labels"]["runai-gpu-group"] = "uuid-a"  # the device KAI gave it
    mem["metadata"]["annotations"]["gpu-memory"] = "10240"  # MiB of one device
    raw["pods"] += [frac, mem, bound]
    raw["podGroups"] += [_group("frac"), _group("mem"), _group("bound")]
    # A BindRequest in flight: KAI chose n0, its binder has not bound the pod yet.
    raw["bindRequests"] = [
        {"metadata": {"name": "b", "namespace": "ml"}, "spec": {"podName": "bound-0", "selectedNode": "n0"}}
    ]
    kai = _read(doc)
    assert _job(kai, "run").tasks[0].status is TaskStatus.RELEASING
    shared = _job(kai, "frac").tasks[0]
    assert (shared.request.gpu, shared.node, shared.gpu_group) == (0.5, "n0", 0)
    assert _job(kai, "mem").tasks[0].request.gpu_memory == 10240 * 2**20
    held = _job(kai, "bound").tasks[0]
    assert (held.status, held.node) == (TaskStatus.RUNNING, "n0")
    assert kai_scenario(kai).scenario.symbols.index_of("n0", "uuid-a") == 0


def test_pod_groups_give_the_gang_subgroups_priority_and_topology() -> None:
    doc = _snapshot()
    raw = doc["rawObjects"]
    raw["topologies"] = [{"metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": "rack"}]}}]
    raw["priorityClasses"] = [{"metadata": {"name": "urgent"}, "value": 90}]
    raw["podGroups"][1]["spec"].update(
        minMember=None,
        priorityClassName="urgent",
        preemptibility="non-preemptible",
        subGroups=[{"name": "head", "minMember": 1}, {"name": "gpu", "minMember": 2}],
        topologyConstraint={"topology": "dc", "requiredTopologyLevel": "rack"},
    )
    raw["pods"] += [_pod("wait-1", "wait"), _pod("wait-2", "wait")]
    for pod, subgroup in zip(raw["pods"][1:], ("head", "gpu", "gpu"), strict=True):
        pod["metadata"]["labels"]["kai.scheduler/subgroup-name"] = subgroup
    kai = _read(doc)
    wait = _job(kai, "wait")
    assert dict(wait.subgroups) == {"head": 1, "gpu": 2} and wait.gang_size == 3
    assert [t.subgroup for t in wait.tasks] == ["head", "gpu", "gpu"]
    assert (wait.priority, wait.preemptible) == (90, False)
    assert wait.topology is not None and wait.topology.required == "rack"
    assert kai.config.topologies["dc"].levels == ("rack",)
    assert kai.warnings == ()


@pytest.mark.parametrize("defined", [True, False])
def test_a_pod_group_naming_a_topology_the_snapshot_lacks_waits_as_in_kai(defined: bool) -> None:
    """KAI's topology plugin refuses a job whose Topology does not exist ("Requested
    topology ... does not exist"): it waits, with the reason; defined, it is placed."""
    doc = _snapshot()
    raw = doc["rawObjects"]
    if defined:
        raw["topologies"] = [{"metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": "rack"}]}}]
        raw["nodes"][0]["metadata"]["labels"]["rack"] = "r0"
    raw["pods"][1] = _pod("wait-0", "wait", "2")
    raw["podGroups"][1]["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": "rack"}
    kai = _read(doc)
    result = run_cycle(kai.snapshot, kai.config, kai.now)
    placed = {d.job for d in result.decisions if isinstance(d, Bind)}
    assert ("ml/wait" in placed) == defined
    if not defined:
        assert kai.config.topologies["dc"].levels == ()
        assert any(
            "topology 'dc' is not among the snapshot's topologies; the job waits" in w for w in kai.warnings
        )
        assert "topology dc is not defined in the cluster" in result.pending_reasons["ml/wait"]


def test_a_partitioned_kai_reads_its_node_pool_only() -> None:
    doc = _snapshot()
    raw = doc["rawObjects"]
    other = copy.deepcopy(raw["nodes"][0])
    other["metadata"] = {"name": "n1", "labels": {"pool": "b"}}
    raw["nodes"][0]["metadata"]["labels"]["pool"] = "a"
    raw["nodes"].append(other)
    raw["podGroups"][0]["metadata"]["labels"] = {"pool": "a"}
    raw["podGroups"][1]["metadata"]["labels"] = {"pool": "b"}
    doc["schedulerParams"]["partitionParams"] = {"NodePoolLabelKey": "pool", "NodePoolLabelValue": "a"}
    kai = _read(doc)
    assert [n.name for n in kai.snapshot.nodes] == ["n0"]
    assert [j.name for j in kai.snapshot.jobs] == ["ml/run"]
    assert any("ml/wait-0: its PodGroup 'wait' is outside the node pool" in w for w in kai.warnings)


def test_a_pod_kai_would_not_schedule_still_holds_its_room() -> None:
    doc = _snapshot()
    doc["rawObjects"]["pods"][0]["metadata"]["annotations"] = {}  # no pod group
    other = _pod("other", None, "1", node="n0")
    other["spec"]["schedulerName"] = "default-scheduler"
    holder = _pod("gpu-holder", None, "1", node="n0")  # KAI's device holder for GPU sharing:
    holder["metadata"]["namespace"] = "kai-resource-reservation"  # the sharing pods count instead
    doc["rawObjects"]["pods"] += [other, holder]
    kai = _read(doc)
    assert dict(kai.snapshot.nodes[0].used_outside)["gpu"] == 3.0
    assert [j.name for j in kai.snapshot.jobs] == ["ml/wait"]  # run has no pods left: noted, no job


POD1, GROUP1 = "rawObjects.pods.1", "rawObjects.podGroups.1"
WARNED = {
    "an unknown action": (_set("config.actions", "allocate, backfill"), "'backfill' is not an action"),
    "a plugin": (_set("config.tiers", [{"plugins": [{"name": "mine"}]}]), "plugin 'mine'"),
    "a queue depth": (_set("config.queueDepthPerAction", {"allocate": 5}), "queueDepthPerAction"),
    "a parameter on": (_set("schedulerParams.isInferencePreemptible", True), "isInferencePreemptible"),
    "an unknown parameter": (_set("schedulerParams.newKnob", 3), "schedulerParams.newKnob"),
    "config maps": (_set("rawObjects.configMaps", [{"metadata": {"name": "c"}}]), "configMaps: 1 not read"),
    "volumes": (_set("rawObjects.persistentVolumeClaims", [{}]), "persistentVolumeClaims"),
    "no clock": (lambda d: d.pop("kaiDecideRefNow"), "kaiDecideRefNow: not given"),
    "an annotation": (_set(f"{POD1}.metadata.annotations.mps", "true"), "pod ml/wait-0: annotation mps"),
    "anti-affinity": (_set(f"{POD1}.spec.affinity.podAntiAffinity", {"x": 1}), "podAntiAffinity is not"),
    "a pod without its group": (
        _set("rawObjects.pods.0.metadata.annotations", {}),
        "pod ml/run-0: no annotation pod-group-name",
    ),
    "a queue field": (_set("rawObjects.queues.0.spec.newField", 1), "queue team: spec.newField"),
    "a topology not there": (_set(f"{GROUP1}.spec.topologyConstraint.topology", "x"), "topology 'x' is not"),
    "an unknown class": (_set(f"{GROUP1}.spec.priorityClassName", "gold"), "class 'gold' does not exist"),
}


@pytest.mark.parametrize(("change", "expected"), WARNED.values(), ids=WARNED.keys())
def test_what_is_not_understood_is_named_in_a_warning(change: Callable[[Doc], Any], expected: str) -> None:
    doc = _snapshot()
    change(doc)
    warnings = _read(doc).warnings
    assert any(expected in w for w in warnings), warnings


REQUESTS = "rawObjects.pods.1.spec.containers.0.resources.requests"
ERRORS = {
    "not a snapshot": (lambda d: d.pop("rawObjects"), "rawObjects: missing; not a KAI snapshot"),
    "a pod without a name": (
        _set("rawObjects.pods.0.metadata.name", None),
        r"pods\[0\]: metadata.name: missing",
    ),
    "a pod without containers": (
        _set("rawObjects.pods.0.spec.containers", []),
        "run-0: spec.containers: missing",
    ),
    "a bad quantity": (
        _set(f"{REQUESTS}.cpu", "lots"),
        "wait-0: container 'main': cpu: 'lots' is not a quantity",
    ),
    "a bad fraction": (
        _set(f"{POD1}.metadata.annotations.gpu-fraction", "2"),
        "gpu-fraction is '2': it must be",
    ),
    "a bad queue": (_set("rawObjects.queues.0.spec.resources.gpu.limit", 2), "queue 'team'"),
    "a bad preemptibility": (
        _set(f"{GROUP1}.spec.preemptibility", "maybe"),
        "ml/wait: spec.preemptibility is",
    ),
    "pods as a map": (_set("rawObjects.pods", {}), "rawObjects.pods: expected a list"),
}


@pytest.mark.parametrize(("change", "expected"), ERRORS.values(), ids=ERRORS.keys())
def test_what_cannot_be_read_is_an_error_naming_the_object_and_field(
    change: Callable[[Doc], Any], expected: str
) -> None:
    doc = _snapshot()
    change(doc)
    with pytest.raises(KaiSnapshotError, match=expected) as caught:
        _read(doc)
    assert "take the snapshot again" in str(caught.value) or "fix the Queue" in str(caught.value)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{not json", "line 1: not JSON"),
        (b"PK\x03\x04 broken", "a damaged zip"),
        (_zip(_snapshot(), ("a.json", "b.json")), "the zip holds 2 JSON files"),
    ],
)
def test_bytes_that_are_no_snapshot_are_refused(raw: bytes, expected: str) -> None:
    with pytest.raises(KaiSnapshotError, match=expected):
        read_kai_bytes(raw)


def test_kai_ray_sim_replays_a_kai_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "contended-s1-13"
    assert main(["sim", "--snapshot", str(STATES / f"{name}.kai-snapshot.json")]) == 0
    text = capsys.readouterr().out
    assert "binds," in text and "waiting:" in text and "in queue" in text
    yaml = run_scenario(load_scenario(STATES / f"{name}.yaml"))
    for job, reason in yaml.pending_reasons.items():  # the same reasons as the scenario twin gives
        assert f"default/{job}: [" in text and reason in text
    doc = json.loads((STATES / f"{name}.kai-snapshot.json").read_text())
    del doc["kaiDecideRefNow"]  # as KAI serves it
    zipped = tmp_path / "snapshot.zip"
    zipped.write_bytes(_zip(doc))
    assert main(["sim", "--snapshot", str(zipped), "--json"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["bind"] or data["evict"] or data["pipeline"]
    waiting = next(iter(data["waiting"].values()))
    assert {"code", "reason", "queue", "position", "of", "forecast"} <= set(waiting)
    assert any("kaiDecideRefNow" in w for w in data["warnings"]) and "kai-ray: warning:" in out.err


def test_kai_ray_sim_names_a_bad_kai_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _snapshot()
    del doc["rawObjects"]["pods"][0]["spec"]["containers"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert main(["sim", "--snapshot", str(path)]) == 2
    assert f"{path}: pod ml/run-0: spec.containers: missing" in capsys.readouterr().err
