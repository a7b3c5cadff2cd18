"""Taints and tolerations in KAI's snapshots (kai_ray.control.kaisnapshot): a node's
NoSchedule/NoExecute taints keep off the pods that do not tolerate them, by the rule every
backend shares (kai_ray.control.taints); PreferNoSchedule keeps nothing off; a running pod
on a tainted node stays; nothing about taints is warned any more."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kai_ray.control.kaisnapshot import KaiSnapshotError, read_kai_snapshot
from kai_ray.scenario import run_scenario
from kai_ray.scenario.kaisnapshot import load_kai_scenario
from kai_ray.scenario.runner import ScenarioResult

Doc = dict[str, Any]
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATES_GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _node(name: str, gpus: int, taints: list[Doc]) -> Doc:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": "40960"}},
        "spec": {"taints": taints},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(name: str, tolerations: list[Doc], node: str = "") -> Doc:
    pod: Doc = {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"pod-group-name": name.rsplit("-", 1)[0]},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}],
            "tolerations": tolerations,
        },
        "status": {"phase": "Pending"},
    }
    if node:
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "startTime": "2026-01-01T00:10:00Z"}
    return pod


def _group(name: str) -> Doc:
    return {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"minMember": 1, "queue": "team", "priorityClassName": "train"},
    }


def _snapshot(pods: list[Doc], taints: list[Doc] | None = None, cpu_node: bool = True) -> Doc:
    """Node `gpu` (4 GPUs, tainted) and node `cpu` (no GPU, untainted); one queue."""
    queue = {
        "metadata": {"name": "team", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"resources": {"gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}},
    }
    groups = sorted({p["metadata"]["annotations"]["pod-group-name"] for p in pods})
    return {
        "kaiDecideRefNow": 1767226800.0,
        "config": {"actions": "allocate, consolidation, reclaim, preempt, stalegangeviction"},
        "schedulerParams": {"schedulerName": "kai-scheduler"},
        "rawObjects": {
            "pods": pods,
            "nodes": [_node("gpu", 4, [GPU_TAINT] if taints is None else taints)]
            + ([_node("cpu", 0, [])] if cpu_node else []),
            "queues": [queue],
            "podGroups": [_group(g) for g in groups],
            "bindRequests": [],
            "priorityClasses": [],
            "topologies": [],
        },
    }


def _run(doc: Doc, tmp_path: Path) -> tuple[ScenarioResult, tuple[str, ...]]:
    """The decision for the snapshot, read from a file as `kai-ray scenario` reads one."""
    path = tmp_path / "s.kai-snapshot.json"
    path.write_text(json.dumps(doc))
    kai = load_kai_scenario(path)
    result = run_scenario(kai.scenario)
    assert result.error is None
    return result, kai.warnings


def _placed(result: ScenarioResult) -> dict[str, list[tuple[str, str | None]]]:
    return {j.name: [(t.status.value, t.node) for t in j.tasks] for j in result.jobs}


def test_a_pod_that_tolerates_the_taint_goes_there_and_one_that_does_not_waits(tmp_path: Path) -> None:
    result, warnings = _run(_snapshot([_pod("tol-0", [TOLERATES_GPU]), _pod("plain-0", [])]), tmp_path)
    assert not any("taint" in w for w in warnings), warnings
    placed = _placed(result)
    assert placed["ml/tol"] == [("Binding", "gpu")]
    assert placed["ml/plain"] == [("Pending", None)]


def test_the_reason_of_a_pod_no_node_admits_names_the_taint(tmp_path: Path) -> None:
    # Only the tainted node: with an untainted node too small for it, the core's reason is
    # that no node it may use is large enough (gang-too-big) instead.
    result, _ = _run(_snapshot([_pod("plain-0", [])], cpu_node=False), tmp_path)
    assert _placed(result)["ml/plain"] == [("Pending", None)]
    reason = result.pending_reasons["ml/plain"]
    assert reason == (
        "no schedulable node meets the required node affinity of its tasks: "
        "kai-ray.io/taint nvidia.com/gpu=present:NoSchedule DoesNotExist"
    )


@pytest.mark.parametrize(
    "toleration",
    [
        {"operator": "Exists"},  # an empty key with Exists tolerates every taint
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"},  # every effect
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},  # operator: Equal
    ],
    ids=["exists-all", "equal-any-effect", "equal-by-default"],
)
def test_kubernetes_toleration_semantics(toleration: Doc, tmp_path: Path) -> None:
    result, _ = _run(_snapshot([_pod("tol-0", [toleration])]), tmp_path)
    assert _placed(result)["ml/tol"] == [("Binding", "gpu")]


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"},  # another value
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},  # another effect
        {"key": "other", "operator": "Exists"},  # another key
    ],
    ids=["other-value", "other-effect", "other-key"],
)
def test_a_toleration_of_something_else_does_not_pass(toleration: Doc, tmp_path: Path) -> None:
    result, _ = _run(_snapshot([_pod("tol-0", [toleration])]), tmp_path)
    assert _placed(result)["ml/tol"] == [("Pending", None)]


def test_prefer_no_schedule_keeps_nothing_off(tmp_path: Path) -> None:
    soft = [{**GPU_TAINT, "effect": "PreferNoSchedule"}]
    result, warnings = _run(_snapshot([_pod("plain-0", [])], taints=soft), tmp_path)
    assert _placed(result)["ml/plain"] == [("Binding", "gpu")]
    assert not any("taint" in w for w in warnings), warnings


def test_no_execute_blocks_new_pods_and_a_running_pod_stays(tmp_path: Path) -> None:
    hard = [{**GPU_TAINT, "effect": "NoExecute"}]
    pods = [_pod("old-0", [], node="gpu"), _pod("new-0", [])]
    result, _ = _run(_snapshot(pods, taints=hard), tmp_path)
    placed = _placed(result)
    assert placed["ml/old"] == [("Running", "gpu")]  # NoExecute's eviction is not modelled
    assert placed["ml/new"] == [("Pending", None)]


def test_an_untainted_cluster_reads_as_before() -> None:
    kai = read_kai_snapshot(_snapshot([_pod("plain-0", [])], taints=[]))
    assert all(t.node_affinity is None for j in kai.snapshot.jobs for t in j.tasks)
    assert all(not any(k.startswith("kai-ray.io/") for k in n.labels) for n in kai.snapshot.nodes)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: d["rawObjects"]["nodes"][0]["spec"].update(taints=[{"key": "k", "effect": "Never"}]),
            "node gpu: spec.taints[0]",
        ),
        (lambda d: d["rawObjects"]["nodes"][0]["spec"].update(taints=["k"]), "node gpu: spec.taints[0]"),
        (
            lambda d: d["rawObjects"]["pods"][0]["spec"].update(tolerations=[{"operator": "Like"}]),
            "pod ml/plain-0: spec.tolerations[0]",
        ),
        (
            lambda d: d["rawObjects"]["pods"][0]["spec"].update(tolerations={"key": "k"}),
            "pod ml/plain-0: spec.tolerations",
        ),
    ],
    ids=["unknown-effect", "taint-not-an-object", "unknown-operator", "tolerations-not-a-list"],
)
def test_a_taint_or_toleration_that_is_not_one_is_an_error_naming_it(change: Any, expected: str) -> None:
    doc = _snapshot([_pod("plain-0", [])])
    change(doc)
    with pytest.raises(KaiSnapshotError, match="take the snapshot again") as caught:
        read_kai_snapshot(doc)
    assert expected in str(caught.value)
