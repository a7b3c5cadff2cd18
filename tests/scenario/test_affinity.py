"""Node affinity in scenario files: how the loader reads it (job-wide, per task, shared
objects), and the reasons the affinity scenarios (tests/scenarios/affinity/) end with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from kai_ray.core import NodeAffinity, NodeRequirement, NodeSelectorTerm
from kai_ray.scenario.loader import Scenario, load_scenario, parse_scenario
from kai_ray.scenario.runner import run_scenario
from tests.scenario.builders import pending, scenario

FOLDER = Path(__file__).resolve().parents[1] / "scenarios" / "affinity"
A100 = [{"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["a100"]}]}]


@dataclass
class Waits:
    file: str
    job: str
    reason: str  # the whole text the job ends with


WAITING = [
    Waits(
        "gang-waits-for-its-affinity.yaml",
        "rc",
        "no schedulable node meets the required node affinity of task rc-2: gpu-type In [b200]",
    ),
    Waits(
        "in-notin.yaml",
        "want-b200",
        "no schedulable node meets the required node affinity of its tasks: gpu-type In [b200]",
    ),
    Waits(
        "gt-lt.yaml",
        "more-than-100",
        "no schedulable node meets the required node affinity of its tasks: gpu-memory-gb Gt 100",
    ),
]


@pytest.mark.parametrize("case", WAITING, ids=[f"{c.file}:{c.job}" for c in WAITING])
def test_a_job_no_node_admits_waits_with_its_affinity_named(case: Waits) -> None:
    result = run_scenario(load_scenario(FOLDER / case.file))
    assert result.passed, result.mismatches
    assert result.pending_reasons[case.job] == case.reason


def test_the_jobs_affinity_is_every_tasks_unless_a_task_gives_its_own() -> None:
    own = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node0"]}]}]
    data = scenario().job("j", pending(), pending(nodeAffinity=own), nodeAffinity=A100).build()
    job = load_scenario_data(data).snapshot.jobs[0]
    wanted = NodeAffinity((NodeSelectorTerm((NodeRequirement("gpu-type", "In", ("a100",)),)),))
    assert job.tasks[0].node_affinity == wanted
    name = NodeRequirement("metadata.name", "In", ("node0",), field=True)
    assert job.tasks[1].node_affinity == NodeAffinity((NodeSelectorTerm(fields=(name,)),))


def test_tasks_that_share_an_entry_share_one_affinity() -> None:
    data = scenario().job("j", tasks={"count": 3, "nodeAffinity": A100}).job("k", nodeAffinity=A100).build()
    jobs = load_scenario_data(data).snapshot.jobs
    first = jobs[0].tasks[0].node_affinity
    assert first is not None and all(t.node_affinity is first for t in jobs[0].tasks)
    assert jobs[1].tasks[0].node_affinity == first


def test_values_written_as_numbers_are_text() -> None:
    gt = [{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": [4]}]}]
    job = load_scenario_data(scenario().job("j", nodeAffinity=gt).build()).snapshot.jobs[0]
    assert job.tasks[0].node_affinity is not None
    assert job.tasks[0].node_affinity.terms[0].expressions[0].values == ("4",)


def load_scenario_data(data: dict[str, object]) -> Scenario:
    return parse_scenario(data, path="test.yaml")
