"""Taints, tolerations and per-task nodeSelector in scenario files: how the loader reads
them (through kai_ray.control.taints, the rule of every backend), the reasons the taint
scenarios (tests/scenarios/taints/) end with, and the files it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kai_ray.config import ConfigError
from kai_ray.core import NodeAffinity
from kai_ray.scenario.loader import load_scenario, parse_scenario
from kai_ray.scenario.runner import run_scenario
from tests.scenario.builders import pending, running, scenario

FOLDER = Path(__file__).resolve().parents[1] / "scenarios" / "taints"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
LABEL = "kai-ray.io/taint nvidia.com/gpu=present:NoSchedule"


def _reason(*taints: str) -> str:
    absent = ", ".join(f"kai-ray.io/taint {t} DoesNotExist" for t in taints)
    return f"no schedulable node meets the required node affinity of its tasks: {absent}"


@pytest.mark.parametrize(
    ("file", "job", "taint"),
    [
        ("gang-that-does-not-tolerate-waits.yaml", "plain", "dedicated=ml:NoSchedule"),
        ("gang-that-does-not-tolerate-waits.yaml", "other-value", "dedicated=ml:NoSchedule"),
        ("exists-without-key-tolerates-all.yaml", "noschedule-only", "maintenance:NoExecute"),
    ],
)
def test_a_job_that_does_not_tolerate_waits_with_the_taint_named(file: str, job: str, taint: str) -> None:
    result = run_scenario(load_scenario(FOLDER / file))
    assert result.passed, result.mismatches
    assert result.pending_reasons[job] == _reason(taint)


def test_a_tainted_node_carries_its_blocking_taints_as_labels() -> None:
    soft = {**GPU_TAINT, "key": "spot", "effect": "PreferNoSchedule"}
    node = scenario().node("node0", gpus=1, taints=[GPU_TAINT, soft]).job("j").load().snapshot.nodes[0]
    assert node.labels == {LABEL: "true"}  # PreferNoSchedule keeps nothing off: no label


def test_tasks_of_one_constraint_share_one_affinity_object() -> None:
    data = scenario().node("node0", gpus=4, taints=[GPU_TAINT]).job("j", tasks={"count": 3}).build()
    tasks = parse_scenario(data).snapshot.jobs[0].tasks
    assert tasks[0].node_affinity is not None
    assert all(t.node_affinity is tasks[0].node_affinity for t in tasks)


def test_the_taints_join_every_term_of_a_tasks_own_affinity() -> None:
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
    ]
    data = scenario().node("node0", gpus=4, taints=[GPU_TAINT]).job("j", nodeAffinity=terms).build()
    affinity = parse_scenario(data).snapshot.jobs[0].tasks[0].node_affinity
    assert affinity is not None
    assert [[(r.key, r.operator) for r in t.expressions] for t in affinity.terms] == [
        [("zone", "In"), (LABEL, "DoesNotExist")],
        [("zone", "In"), (LABEL, "DoesNotExist")],
    ]


def test_a_file_without_taints_reads_as_before() -> None:
    data = scenario().job("j", tolerations=[{"operator": "Exists"}], tasks={"count": 2}).build()
    loaded = parse_scenario(data)
    assert loaded.snapshot.nodes[0].labels == {}
    assert [t.node_affinity for t in loaded.snapshot.jobs[0].tasks] == [None, None]


def test_a_tolerating_task_has_no_constraint() -> None:
    tolerate = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    data = (
        scenario()
        .node("node0", gpus=4, taints=[GPU_TAINT])
        .job("j", pending(tolerations=tolerate), pending())
    )
    tasks = data.load().snapshot.jobs[0].tasks
    assert tasks[0].node_affinity is None
    assert tasks[1].node_affinity is not None


def test_a_tasks_own_node_selector_replaces_the_jobs() -> None:
    job = (
        scenario()
        .job("j", pending(), pending(nodeSelector={"zone": "b"}), nodeSelector={"zone": "a", "disk": "ssd"})
        .load()
        .snapshot.jobs[0]
    )
    assert job.node_selector == {}  # no pair every task keeps
    assert job.tasks[0].node_affinity == NodeAffinity.of((), {"zone": "a", "disk": "ssd"})
    assert job.tasks[1].node_affinity == NodeAffinity.of((), {"zone": "b"})


def test_the_pairs_every_task_keeps_stay_the_jobs_selector() -> None:
    job = (
        scenario()
        .job("j", pending(), pending(nodeSelector={"zone": "a", "gpu": "h100"}), nodeSelector={"zone": "a"})
        .load()
        .snapshot.jobs[0]
    )
    assert job.node_selector == {"zone": "a"}
    assert job.tasks[0].node_affinity is None
    assert job.tasks[1].node_affinity == NodeAffinity.of((), {"gpu": "h100"})


def test_a_running_task_on_a_node_it_does_not_tolerate_keeps_running() -> None:
    data = (
        scenario()
        .node("node0", gpus=2, taints=[{**GPU_TAINT, "effect": "NoExecute"}])
        .job("j", running("node0"))
        .set("rounds", 2)
        .expect("j", status="Running", node="node0")
    )
    assert run_scenario(data.load()).passed


def _node_taints(*taints: Any) -> dict[str, Any]:
    return scenario().node("node0", gpus=1, taints=list(taints)).job("j").build()


def _tolerations(*tolerations: Any, task: bool = False) -> dict[str, Any]:
    if task:
        return scenario().job("j", pending(tolerations=list(tolerations))).build()
    return scenario().job("j", tolerations=list(tolerations)).build()


INVALID = {
    "an unknown effect": (
        _node_taints({"key": "k", "effect": "NoScheduel"}),
        ("node 'node0': taints[0].effect", "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'", "NoScheduel"),
    ),
    "a taint without a key": (
        _node_taints({"effect": "NoSchedule"}),
        ("node 'node0': taints[0].key", "add it"),
    ),
    "a taint without an effect": (_node_taints({"key": "k"}), ("node 'node0': taints[0].effect", "required")),
    "a taint listed twice": (
        _node_taints(
            {"key": "k", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}
        ),
        ("node 'node0': taints", "k:NoSchedule is listed twice"),
    ),
    "a misspelt taint key": (
        _node_taints({"key": "k", "effects": "NoSchedule"}),
        ("node 'node0': taints[0]", "unknown key 'effects'", "did you mean 'effect'"),
    ),
    "an unknown operator": (
        _tolerations({"key": "k", "operator": "In"}),
        ("job 'j': tolerations[0].operator", "'Equal' or 'Exists'"),
    ),
    "Exists with a value": (
        _tolerations({"key": "k", "operator": "Exists", "value": "v"}),
        ("job 'j': tolerations[0]", "operator Exists takes no value", "remove value"),
    ),
    "Equal without a key": (
        _tolerations({"value": "v"}),
        ("job 'j': tolerations[0]", "without a key", "operator: Exists"),
    ),
    "a task's toleration with an unknown effect": (
        _tolerations({"key": "k", "effect": "Never"}, task=True),
        ("job 'j': tasks[0].tolerations[0].effect", "'NoSchedule'"),
    ),
    "tolerations that are not a list": (
        scenario().job("j", tolerations={"key": "k"}).build(),
        ("job 'j': tolerations", "a list"),
    ),
    "a task's nodeSelector that is not a map": (
        scenario().job("j", pending(nodeSelector=["zone"])).build(),
        ("job 'j': tasks[0].nodeSelector", "a map"),
    ),
}


@pytest.mark.parametrize(("data", "fragments"), INVALID.values(), ids=INVALID.keys())
def test_an_invalid_taint_or_toleration_is_refused_naming_it(data: Any, fragments: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_scenario(data, path="bad.yaml")
    message = str(caught.value)
    assert message.startswith("bad.yaml: ") and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
