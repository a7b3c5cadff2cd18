"""The cluster as the core sees it, from API objects: nodes, outside use, pods as tasks."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.core import TaskStatus
from kai_ray.k8s.gangs import build_gangs
from kai_ray.k8s.world import SUBMITTER_TASK, build_world, node_info

GI = 2**30


def node(
    name: str = "n0",
    *,
    gpus: int = 8,
    ready: bool = True,
    cordoned: bool = False,
    taint: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    alloc = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "110",
        "nvidia.com/gpu": str(gpus),
        "example.com/nic": "2",
        "hugepages-2Mi": "0",
        "ephemeral-storage": "100Gi",
    }
    spec: dict[str, Any] = {"unschedulable": cordoned}
    if taint:
        spec["taints"] = [{"key": "k", "effect": taint}]
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


def pod(
    name: str,
    *,
    gpus: int = 1,
    node_name: str = "",
    scheduler: str = "kai-ray",
    deleting: bool = False,
    phase: str = "Pending",
    owner: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": owner, "uid": "rc", "controller": True}
        ]
        meta["labels"] = {"ray.io/cluster": owner, "ray.io/node-type": "worker", "ray.io/group": "g"}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("obj", "schedulable"),
    [
        pytest.param(node(), True, id="ready"),
        pytest.param(node(ready=False), False, id="not-ready"),
        pytest.param(node(cordoned=True), False, id="cordoned"),
        pytest.param(node(taint="NoSchedule"), True, id="tainted-left-to-tolerations"),
    ],
)
def test_which_nodes_take_new_pods(obj: dict[str, Any], schedulable: bool) -> None:
    assert node_info(obj).unschedulable is not schedulable


def test_node_allocatable_and_device_memory() -> None:
    info = node_info(node(labels={"nvidia.com/gpu.memory": "40960", "nvidia.com/gpu.product": "A100"}))
    assert (info.gpus, info.cpu, info.memory) == (8, 64.0, 512 * GI)
    assert info.gpu_memory == 40 * GI and info.gpu_model == "A100"
    assert info.extended == (("example.com/nic", 2.0),)  # no pods, hugepages or disk


def world(pods: list[dict[str, Any]], **kw: Any) -> Any:
    gangs = build_gangs(pods, {}, {})
    return build_world(
        [node()],
        pods,
        gangs,
        [],
        scheduler_names=("kai-ray",),
        assumed=kw.get("assumed", {}),
        placeholders=kw.get("placeholders", {}),
    )


def test_other_schedulers_pods_count_as_used_outside_and_finished_ones_do_not() -> None:
    w = world(
        [
            pod("theirs", gpus=3, node_name="n0", scheduler="default-scheduler"),
            pod("done", gpus=2, node_name="n0", scheduler="default-scheduler", phase="Succeeded"),
            pod("mine", gpus=1, node_name="n0"),
        ]
    )
    used = dict(w.snapshot.nodes[0].used_outside)
    assert used["gpu"] == 3 and used["cpu"] == 1


@pytest.mark.parametrize(
    ("p", "assumed", "status", "node_name"),
    [
        pytest.param(pod("a"), {}, TaskStatus.PENDING, None, id="unbound"),
        pytest.param(pod("a", node_name="n0"), {}, TaskStatus.RUNNING, "n0", id="bound"),
        pytest.param(pod("a"), {"uid-a": "n0"}, TaskStatus.RUNNING, "n0", id="bind-sent-not-seen"),
        pytest.param(
            pod("a", node_name="n0", deleting=True), {}, TaskStatus.RELEASING, "n0", id="terminating"
        ),
    ],
)
def test_pods_as_tasks(
    p: dict[str, Any], assumed: dict[str, str], status: TaskStatus, node_name: str | None
) -> None:
    w = world([p], assumed=assumed)
    (task,) = w.snapshot.jobs[0].tasks
    assert (task.status, task.node) == (status, node_name)


def test_a_rayjob_waiting_for_its_submitter_holds_room_for_it() -> None:
    job = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "j", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"rayClusterSpec": {"workerGroupSpecs": [{"groupName": "g", "replicas": 1}]}},
    }
    rc = {
        "metadata": {
            "name": "rc",
            "namespace": "ns",
            "uid": "rc",
            "ownerReferences": [
                {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "j", "uid": "j", "controller": True}
            ],
        },
        "spec": job["spec"]["rayClusterSpec"],
    }
    pods = [pod("h", owner="rc"), pod("w", owner="rc")]
    gangs = build_gangs(pods, {("RayJob", "ns", "j"): job, ("RayCluster", "ns", "rc"): rc}, {})
    w = build_world([node()], pods, gangs, [], scheduler_names=("kai-ray",), assumed={}, placeholders={})
    (j,) = w.snapshot.jobs
    assert j.min_member == 3 and [t.name for t in j.tasks][-1] == SUBMITTER_TASK
    # Sub-gangs: the head, the worker group, the submitter (its placeholder task included).
    assert j.subgroups == {"head": 1, "g": 1, "submitter": 1}
    assert [t.subgroup for t in j.tasks] == ["g", "g", "submitter"]  # both pods here say group g
    w = build_world(
        [node()], pods, gangs, [], scheduler_names=("kai-ray",), assumed={}, placeholders={j.name: "n0"}
    )
    held = w.snapshot.jobs[0].tasks[-1]
    assert (held.status, held.node) == (TaskStatus.RUNNING, "n0")


def tolerating(p: dict[str, Any], *tolerations: dict[str, str]) -> dict[str, Any]:
    p["spec"]["tolerations"] = list(tolerations)
    return p


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
KV = {"key": "k", "value": "v", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("taint", "tolerations", "usable"),
    [
        pytest.param(GPU, [], False, id="not-tolerated"),
        pytest.param(GPU, [GPU_TAINT], True, id="tolerated-by-key"),
        pytest.param(GPU, [{"operator": "Exists"}], True, id="tolerates-everything"),
        pytest.param({**GPU, "effect": "NoExecute"}, [GPU_TAINT], False, id="other-effect"),
        pytest.param(
            KV, [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}], True, id="equal"
        ),
        pytest.param(KV, [{"key": "k", "operator": "Equal", "value": "w"}], False, id="other-value"),
        pytest.param({**GPU, "effect": "PreferNoSchedule"}, [], True, id="soft-taint-blocks-nothing"),
    ],
)
def test_tainted_nodes_take_only_the_gangs_that_tolerate_them(
    taint: dict[str, str], tolerations: list[dict[str, str]], usable: bool
) -> None:
    from kai_ray.core import QueueInfo, SchedulerConfig, run_cycle
    from kai_ray.k8s.taints import describe

    tainted = node("gpu")
    tainted["spec"]["taints"] = [taint]
    pods = [tolerating(pod("a", owner="rc"), *tolerations), tolerating(pod("b", owner="rc"), *tolerations)]
    w = build_world(
        [tainted],
        pods,
        build_gangs(pods, {}, {}),
        [QueueInfo("default-queue", quota=(-1, -1, -1))],
        scheduler_names=("kai-ray",),
        assumed={},
        placeholders={},
    )
    result = run_cycle(w.snapshot, SchedulerConfig(), 0.0)
    assert (len(result.decisions) == 2) is usable
    if not usable:
        (reason,) = result.waiting.values()
        assert "tolerations that match the nodes' taints" in describe(reason.text)


def test_a_cluster_without_taints_gets_no_labels() -> None:
    w = world([pod("a")])
    assert not any(k.startswith("kai-ray.io/") for k in w.snapshot.nodes[0].labels)
    assert w.snapshot.jobs[0].node_selector == {}
