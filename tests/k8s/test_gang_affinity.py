"""Pods' nodeSelector and required node affinity -> the core's per-task constraints, without
a server: what is read per pod, what a pod written wrong is told, and what the core then
does with a gang whose pods differ. (On a real API server: test_affinity.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.core import NodeAffinity, QueueInfo, SchedulerConfig, run_cycle
from kai_ray.k8s.gangs import Gang, build_gangs
from kai_ray.k8s.report import in_pods
from kai_ray.k8s.world import build_world
from tests.core.builders import affinity, name_req, req
from tests.k8s.test_gangs import PodBuilder, cases, only, raycluster, rc_pod, run
from tests.k8s.test_world import node, pod

TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"key": key, "operator": operator}
    return entry | ({"values": list(values)} if values else {})


A100 = required({"matchExpressions": [expr("gpu-type", "In", "a100")]})
PREFERRED = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", "a")]}}
        ]
    }
}

# (name, pods of RayCluster rc, each pod's constraint beyond the shared selector)
READ = [
    ("nothing to read", [rc_pod("h").head(), rc_pod("w").worker()], {}),
    (
        "a worker's required affinity",
        [rc_pod("h").head(), rc_pod("w").worker().spec(affinity=A100)],
        {"w": affinity([req("gpu-type", "In", "a100")])},
    ),
    (
        "a worker's own nodeSelector items, beside the shared ones",
        [
            rc_pod("h").head().spec(nodeSelector={"zone": "a"}),
            rc_pod("w").worker().spec(nodeSelector={"zone": "a", "gpu": "h100"}),
        ],
        {"w": affinity(gpu="h100")},
    ),
    (
        "both, and terms ORed with fields",
        [
            rc_pod("h").head(),
            rc_pod("w")
            .worker()
            .spec(
                nodeSelector={"pool": "gpu"},
                affinity=required(
                    {"matchExpressions": [expr("cores", "Gt", "8"), expr("spot", "DoesNotExist")]},
                    {"matchFields": [expr("metadata.name", "In", "n7")]},
                ),
            ),
        ],
        {
            "w": affinity(
                [req("cores", "Gt", "8"), req("spot", "DoesNotExist")], [name_req("In", "n7")], pool="gpu"
            )
        },
    ),
    ("preferred affinity is not read", [rc_pod("h").head().spec(affinity=PREFERRED)], {}),
]


@pytest.mark.parametrize(("pods", "expected"), cases(READ))
def test_each_pods_own_constraint_is_read(pods: list[PodBuilder], expected: dict[str, NodeAffinity]) -> None:
    gang = only(run(pods, [raycluster()]))
    assert (gang.affinities, gang.problem) == (expected, "")


PROBLEMS = [
    (
        "an unknown operator",
        required({"matchExpressions": [expr("gpu", "Equal", "a")]}),
        f"RayCluster ml/rc: pod ml/w: {TERMS}[0].matchExpressions[0]: operator 'Equal' is unknown; "
        "use one of In, NotIn, Exists, DoesNotExist, Gt, Lt",
    ),
    (
        "Gt with a non-integer",
        required({"matchExpressions": [expr("cores", "Gt", "eight")]}),
        f"pod ml/w: {TERMS}[0].matchExpressions[0]: operator Gt compares integers, and 'eight' is not one",
    ),
    (
        "In without values",
        required({"matchExpressions": [expr("gpu", "In")]}),
        "operator In needs at least one value; list the values under values",
    ),
    (
        "a field other than the node's name",
        required({"matchFields": [expr("metadata.uid", "In", "x")]}),
        f"{TERMS}[0].matchFields[0]: matchFields key 'metadata.uid' is not a node field",
    ),
    ("no terms", required(), f"{TERMS}: expected a non-empty list of terms"),
]


@pytest.mark.parametrize(("written", "words"), cases(PROBLEMS))
def test_an_affinity_written_wrong_names_the_pod_the_field_and_the_fix(
    written: dict[str, Any], words: str
) -> None:
    gang = only(run([rc_pod("h").head(), rc_pod("w").worker().spec(affinity=written)], [raycluster()]))
    assert words in gang.problem


def _world(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Any:
    return build_world(
        nodes,
        pods,
        build_gangs(pods, {}, {}),
        [QueueInfo("default-queue", quota=(-1, -1, -1))],
        scheduler_names=("kai-ray",),
        assumed={},
        placeholders={},
    )


def _with(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    obj["spec"].update(spec)
    return obj


def test_a_gang_written_wrong_loses_nothing_it_holds() -> None:
    """Its bound pod stays where it is, counted as used there; its pending pod is not
    placed; nothing of it is evicted."""
    bad = required({"matchExpressions": [expr("gpu", "Gt", "x")]})
    pods = [pod("a", owner="rc", node_name="n0"), _with(pod("b", owner="rc"), affinity=bad)]
    w = _world([node("n0", gpus=2)], pods)
    assert w.snapshot.jobs == [] and list(w.problems) == ["ns/RayCluster/rc"]
    assert dict(w.snapshot.nodes[0].used_outside)["gpu"] == 1
    assert run_cycle(w.snapshot, SchedulerConfig(), 0.0).decisions == []


def test_workers_go_only_where_their_affinity_admits_and_the_head_anywhere() -> None:
    nodes = [node("plain", gpus=4), node("gpu-a", gpus=4, labels={"gpu-type": "a100"})]
    head = pod("h", gpus=0, owner="rc")
    head["metadata"]["labels"]["ray.io/node-type"] = "head"
    pods = [head, *(_with(pod(f"w{i}", owner="rc"), affinity=A100) for i in range(3))]
    result = run_cycle(_world(nodes, pods).snapshot, SchedulerConfig(), 0.0)
    assert sorted((d.task, d.node) for d in result.decisions) == [
        ("h", "plain"),
        ("w0", "gpu-a"),
        ("w1", "gpu-a"),
        ("w2", "gpu-a"),
    ]


def test_a_gang_no_node_admits_waits_and_its_pod_is_named() -> None:
    pods = [pod("h", owner="rc"), _with(pod("w", owner="rc"), affinity=A100)]
    w = _world([node("n0", gpus=4)], pods)
    result = run_cycle(w.snapshot, SchedulerConfig(), 0.0)
    gang: Gang = w.gangs["ns/RayCluster/rc"]
    reason = result.waiting[gang.id]
    assert (reason.code, in_pods(reason.text, gang.namespace)) == (
        "node-affinity",
        "no schedulable node meets the required node affinity of pod ns/w: gpu-type In [a100]",
    )


@pytest.mark.parametrize(
    ("core", "said"),
    [
        pytest.param("... affinity of task w-1: a In [b]", "... affinity of pod ml/w-1: a In [b]", id="task"),
        pytest.param(
            "... affinity of its tasks: a Exists", "... affinity of its pods: a Exists", id="its-tasks"
        ),
        pytest.param("gang of 2 tasks (1 GPU each)", "gang of 2 tasks (1 GPU each)", id="untouched"),
    ],
)
def test_the_core_names_tasks_and_kubernetes_says_pods(core: str, said: str) -> None:
    assert in_pods(core, "ml") == said
