"""kai_ray.conformance.kaiwrite: a scenario written as KAI-Scheduler's snapshot.

(a) Each of the 200 KAI v0.17.0 states: NAME.yaml written at its clock is its stored
NAME.kai-snapshot.json, and reads back (kai_ray.control.kaisnapshot) deciding as the YAML.
(b) Every scenario file of one round under tests/scenarios/ that KAI's objects can hold
reads back deciding as the file; the others are refused with a ValueError naming what.
(c) Binds in flight, shared devices, usage history, and what is refused.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.conformance.kaiwrite import CLOCK_KEY, USAGE_KEY, go_duration, kai_snapshot
from kai_ray.control.kaisnapshot import read_kai_snapshot
from kai_ray.core import JobInfo, TaskStatus
from kai_ray.scenario import Scenario, load_scenario, parse_scenario, run_scenario
from kai_ray.scenario.kaisnapshot import kai_scenario

STATES = Path(__file__).resolve().parent / "kai-v0.17.0"
NAMES = sorted(p.name.removesuffix(".kai-snapshot.json") for p in STATES.glob("*.kai-snapshot.json"))
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
ONE_ROUND = sorted(
    str(p.relative_to(SCENARIOS))
    for p in SCENARIOS.rglob("*.yaml")
    if (yaml.safe_load(p.read_text()) or {}).get("rounds", 1) == 1
)
NOW = 1_795_737_600.0  # 2026-11-27T00:00:00Z: whole seconds, so no start moves by truncation
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
Doc = dict[str, Any]


def normalised(doc: Doc) -> Doc:
    """KAI names a shared device by a uuid (random in KAI, derived from node and symbol
    here): each uuid becomes `device-N`, N in order of first appearance, in every place it
    is written (pod labels, bind requests, reservation pods' names and labels). Nothing
    else is changed: the rest is compared as written."""
    names: dict[str, str] = {}
    text = _UUID.sub(lambda m: names.setdefault(m[0], f"device-{len(names)}"), json.dumps(doc))
    text = re.sub(r"(gpu-reservation-[^\"]*-)[0-9a-f]{5}\"", r"\1\"", text)  # the id's first letters
    loaded: Doc = json.loads(text)
    return loaded


@functools.cache
def _written(name: str) -> str:
    stored = json.loads((STATES / f"{name}.kai-snapshot.json").read_text())
    doc = yaml.safe_load((STATES / f"{name}.yaml").read_text())
    return json.dumps(kai_snapshot(doc, now=stored[CLOCK_KEY]))


def _decided(
    jobs: list[JobInfo], name: Callable[[str], str] = str
) -> dict[str, list[tuple[str, str | None]]]:
    return {name(j.name): [(t.status.value, t.node) for t in j.tasks] for j in jobs}


def _short(job: str) -> str:
    return job.split("/", 1)[1]  # "default/p0": the pod group's namespace, then its name


def _read_back(snapshot: Doc) -> tuple[Scenario, tuple[str, ...]]:
    kai = kai_scenario(read_kai_snapshot(snapshot))
    return kai.scenario, kai.warnings


def _same_decisions(yaml_scenario: Scenario, snapshot: Doc) -> None:
    read, warnings = _read_back(snapshot)
    assert warnings == ()
    ours, theirs = run_scenario(yaml_scenario), run_scenario(read)
    assert ours.error is None and theirs.error is None
    assert _decided(theirs.jobs, _short) == _decided(ours.jobs)


# ---------------------------------------------------------------- (a) the 200 states


@pytest.mark.parametrize("name", NAMES)
def test_a_state_is_written_as_its_stored_kai_snapshot(name: str) -> None:
    stored = json.loads((STATES / f"{name}.kai-snapshot.json").read_text())
    assert normalised(json.loads(_written(name))) == normalised(stored)


@pytest.mark.parametrize("name", NAMES)
def test_a_written_state_decides_as_its_yaml(name: str) -> None:
    _same_decisions(load_scenario(STATES / f"{name}.yaml"), json.loads(_written(name)))


def test_all_200_states_are_here() -> None:
    assert len(NAMES) == 200


# ---------------------------------------------------------------- (b) the scenario files


@pytest.mark.parametrize("path", ONE_ROUND)
def test_a_scenario_file_reads_back_deciding_the_same(path: str) -> None:
    doc = yaml.safe_load((SCENARIOS / path).read_text())
    try:
        snapshot = kai_snapshot(doc, now=NOW)
    except ValueError as e:
        assert "cannot be written as KAI's objects" in str(e)
        pytest.skip(f"not KAI's: {e}")
    _same_decisions(load_scenario(SCENARIOS / path), snapshot)


def test_the_scenario_files_cover_the_features_the_writer_writes() -> None:
    """The files (b) reads back use each feature at least once, so none goes unchecked."""
    text = "\n".join((SCENARIOS / p).read_text() for p in ONE_ROUND)
    for key in (
        "topologies:",
        "subGroups:",
        "nodeAffinity:",
        "nodeSelector:",
        "tolerations:",
        "taints:",
        "gpuMemory:",
        "gpuGroup:",
        "Releasing",
        "staleSince:",
        "preemptMinRuntime:",
        "reclaimMinRuntime:",
        "gpuDeviceOrder:",
        "placement:",
        "unschedulable:",
    ):
        assert key in text, key


# ---------------------------------------------------------------- (c) binds in flight, devices


SHARED = {
    "name": "shares of devices, one of them bound in flight",
    "actions": ["allocate"],
    "nodes": {"n0": {"gpus": 2}},
    "jobs": [
        {
            "name": "a",
            "gpu": 0.5,
            "tasks": [{"state": "Running", "node": "n0", "gpuGroup": "g0", "since": -60}],
        },
        {
            "name": "b",
            "gpu": 0.25,
            "tasks": [{"state": "Running", "node": "n0", "gpuGroup": "g0", "since": -30}],
        },
        {
            "name": "c",
            "gpu": 0.5,
            "tasks": [{"state": "Running", "node": "n0", "gpuGroup": "g1", "since": -10}],
        },
        {"name": "d", "gpu": 0.25, "tasks": {"count": 3}},
    ],
}


def _objects(snapshot: Doc, kind: str) -> dict[str, Doc]:
    return {o["metadata"]["name"]: o for o in snapshot["rawObjects"][kind]}


def test_a_bind_in_flight_is_a_pending_pod_and_kais_bind_request() -> None:
    snapshot = kai_snapshot(SHARED, now=NOW, in_flight=["b-0"])
    pod = _objects(snapshot, "pods")["b-0"]
    assert "nodeName" not in pod["spec"] and pod["status"] == {"phase": "Pending"}
    assert "runai-gpu-group" not in pod["metadata"]["labels"]  # its binder sets it when it binds
    bound = _objects(snapshot, "pods")["a-0"]
    (bind,) = snapshot["rawObjects"]["bindRequests"]
    assert bind["spec"] == {
        "podName": "b-0",
        "selectedNode": "n0",
        "selectedGPUGroups": [bound["metadata"]["labels"]["runai-gpu-group"]],  # the device a-0 is on
        "receivedResourceType": "Fraction",
        "receivedGPU": {"count": 1, "portion": "0.25"},
    }
    assert bind["status"] == {"phase": "Pending"}
    assert bind["metadata"]["ownerReferences"][0]["name"] == "b-0"


def test_a_shared_device_has_one_reservation_pod() -> None:
    snapshot = kai_snapshot(SHARED, now=NOW)
    pods = snapshot["rawObjects"]["pods"]
    reservations = [p for p in pods if p["metadata"]["namespace"] == "kai-resource-reservation"]
    groups = {
        p["metadata"]["labels"]["runai-gpu-group"]
        for p in pods
        if p["metadata"]["name"] in ("a-0", "b-0", "c-0")
    }
    assert len(groups) == 2  # a and b share g0, c is on g1
    assert {p["metadata"]["labels"]["runai-gpu-group"] for p in reservations} == groups
    assert all(p["spec"]["nodeName"] == "n0" for p in reservations)
    assert all(
        p["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"} for p in reservations
    )


def test_binds_in_flight_read_back_deciding_the_same() -> None:
    snapshot = kai_snapshot(SHARED, now=NOW, in_flight=["b-0", "c-0"])
    read, warnings = _read_back(snapshot)
    assert warnings == ()
    tasks = {t.name: t for j in read.snapshot.jobs for t in j.tasks}
    assert (tasks["b-0"].status, tasks["b-0"].node) == (TaskStatus.RUNNING, "n0")
    assert tasks["b-0"].gpu_group == tasks["a-0"].gpu_group != tasks["c-0"].gpu_group
    _same_decisions(parse_scenario(SHARED), snapshot)


PROTECTED = {
    "name": "the victim with the shorter run is protected; its bind is in flight",
    "actions": ["preempt"],
    "nodes": {"node0": {"gpus": 2}},
    "queues": [{"name": "q", "preemptMinRuntime": "300s", "resources": {"gpu": {"quota": 2}}}],
    "jobs": [
        {
            "name": "t-old",
            "queue": "q",
            "gpu": 1,
            "tasks": [{"state": "Running", "node": "node0", "since": -400}],
        },
        {
            "name": "t-new",
            "queue": "q",
            "gpu": 1,
            "tasks": [{"state": "Running", "node": "node0", "since": -100}],
        },
        {"name": "build", "queue": "q", "priority": "build", "gpu": 1, "tasks": [{"state": "Pending"}]},
    ],
}


def test_a_bind_in_flight_keeps_its_start_for_kai() -> None:
    """KAI's min-runtime reads the pod group's last start, written from the task's start."""
    snapshot = kai_snapshot(PROTECTED, now=NOW, in_flight=["t-new-0"])
    group = _objects(snapshot, "podGroups")["t-new"]
    assert group["metadata"]["annotations"]["kai.scheduler/last-start-timestamp"] == "2026-11-26T23:58:20Z"


def test_a_bind_in_flight_reads_back_protected_by_min_runtime() -> None:
    _same_decisions(parse_scenario(PROTECTED), kai_snapshot(PROTECTED, now=NOW, in_flight=["t-new-0"]))


# ---------------------------------------------------------------- (c) usage, settings


def test_usage_history_is_written_as_kai_decide_usage_and_reads_back() -> None:
    doc = yaml.safe_load((SCENARIOS / "fairshare/usage-history-shifts-over-quota.yaml").read_text())
    doc["config"] = {"kValue": 0.5}
    snapshot = kai_snapshot(doc, now=NOW)
    assert snapshot[USAGE_KEY] == {
        q: {"gpu": 0.0, "cpu": 0.0, "memory": 0.0, **u} for q, u in doc["usage"].items()
    }
    assert "usageDBConfig" not in snapshot["schedulerParams"]
    read = read_kai_snapshot(snapshot)
    assert read.config.k_value == 0.5 and read.warnings == ()
    assert {q: u[0] for q, u in read.snapshot.usage.items()} == {
        q: u.get("gpu", 0.0) for q, u in doc["usage"].items()
    }
    plugins = {p["name"]: p for p in snapshot["config"]["tiers"][0]["plugins"]}
    assert plugins["proportion"]["arguments"] == {"kValue": "0.5"}
    assert plugins["nodeplacement"]["arguments"] == {"cpu": "binpack", "gpu": "binpack"}
    # KAI's default list has the job solver's scenario generators: without them KAI's
    # reclaim, preempt and consolidation never find a victim.
    assert {"sg-nodelocalgreedy", "sg-multinodegang"} <= set(plugins)
    without = copy.deepcopy(snapshot)
    tier = without["config"]["tiers"][0]
    tier["plugins"] = [p for p in tier["plugins"] if not p["name"].startswith("sg-")]
    assert any(
        "sg-multinodegang, sg-nodelocalgreedy are not listed" in w
        for w in read_kai_snapshot(without).warnings
    )


def test_default_settings_write_no_tiers_and_others_read_back() -> None:
    assert "tiers" not in kai_snapshot(SHARED, now=NOW)["config"]
    doc = {
        **SHARED,
        "config": {
            "placement": {"gpu": "spread"},
            "gpuDeviceOrder": "spread",
            "staleGangGracePeriod": -1,
            "maxConsolidationPreemptees": 0,
            "fullHierarchyFairness": False,
        },
    }
    read, warnings = _read_back(kai_snapshot(doc, now=NOW))
    assert warnings == ()
    assert read.config == parse_scenario(doc).config


def test_min_runtimes_are_go_durations() -> None:
    assert [go_duration(s) for s in (0, 0.25, 1.5, 90, 600, 3600, 5400.5)] == [
        "0s",
        "250ms",
        "1.5s",
        "1m30s",
        "10m0s",
        "1h0m0s",
        "1h30m0.5s",
    ]


def _job(**extra: Any) -> Doc:
    return {"name": "j", "gpu": 1, "tasks": [{"state": "Running", "node": "n0"}], **extra}


REFUSED: dict[str, tuple[Doc, str]] = {
    "a GPU type": ({"nodes": {"n0": {"gpus": 1, "gpuType": "H100"}}}, "node 'n0': gpuType"),
    "a job's GPU types": ({"jobs": [_job(gpuTypes=["H100"])]}, "job 'j': gpuTypes"),
    "a tenant": ({"jobs": [_job(tenant="t")]}, "job 'j': tenant"),
    "a queue's access": (
        {"queues": [{"name": "default", "access": {"tenants": ["t"]}}]},
        "queue 'default': access",
    ),
    "a growing cluster": ({"clusterCanGrow": True}, "clusterCanGrow"),
    "a preemption delay": ({"config": {"preemptionDelay": 60}}, "config.preemptionDelay"),
    "a recorded usage window": ({"config": {"usageWindow": "1h"}}, "config.usageWindow"),
    "reservations": ({"config": {"reserveAfter": "30m"}}, "config.reserveAfter"),
    "a group on a whole GPU": (
        {"jobs": [_job(tasks=[{"state": "Running", "node": "n0", "gpuGroup": "g0"}])]},
        "gpuGroup",
    ),
    "memory not in MiB": ({"jobs": [_job(gpu=0, gpuMemory=1000)]}, "not whole MiB"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_kai_cannot_hold_is_refused_by_name(case: str) -> None:
    change, words = REFUSED[case]
    doc: Doc = {"name": case, "nodes": {"n0": {"gpus": 1}}, "jobs": [_job()], **change}
    with pytest.raises(ValueError, match=re.escape(words)):
        kai_snapshot(doc, now=NOW)


def test_only_a_running_task_can_be_in_flight() -> None:
    with pytest.raises(ValueError, match="d-0 is not a Running task"):
        kai_snapshot(SHARED, now=NOW, in_flight=["d-0"])
