"""The big conformance states KAI's own scheduler was timed on beside kai-ray
(benchmarks/kai-v0.17.0-scale/big*: a topology state and a sub-gang state, a hundred
times the corpus' size, drawn by `kai-ray conformance generate bigtopology|bigsubgroups`):
kai-ray decides each as KAI did, compared as the conformance corpus compares (per job,
tasks per status, Binding and Pipelined both placed), so the timing in BENCHMARKS.md is
of the same decisions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kai_ray.conformance.compare import differing_jobs, task_counts
from kai_ray.conformance.corpus import first_state, parse_name
from kai_ray.scenario import load_scenario, run_scenario

SCALE = Path(__file__).parents[2] / "benchmarks" / "kai-v0.17.0-scale"
BIG = sorted(p.name.removesuffix(".kai.json") for p in SCALE.glob("big*.kai.json"))


def test_both_big_states_are_here() -> None:
    assert BIG == ["bigsubgroups-s1-0", "bigtopology-s1-0"]


@pytest.mark.parametrize("name", BIG)
def test_a_big_state_decides_as_kai_did(name: str) -> None:
    result = run_scenario(load_scenario(SCALE / f"{name}.yaml"))
    assert result.error is None
    ours = {job.name: task_counts(t.status.value for t in job.tasks) for job in result.jobs}
    kai = json.loads((SCALE / f"{name}.kai.json").read_text())["jobs"]
    differ = differing_jobs({j: task_counts(t["status"] for t in ts) for j, ts in kai.items()}, ours)
    assert not differ, differ
    assert sum(1 for ts in kai.values() for t in ts if t["status"] != "Pending") > 0  # it decides something


@pytest.mark.parametrize("name", BIG)
def test_a_big_state_is_drawn_again_from_its_name(name: str) -> None:
    assert first_state(parse_name(name)).doc == yaml.safe_load((SCALE / f"{name}.yaml").read_text())
