"""The text and JSON reports."""

from __future__ import annotations

import json

from kai_ray.config import ConfigError
from kai_ray.core.model.snapshot import Bind, CycleResult
from kai_ray.scenario.report import report_json, result_json, text_lines
from kai_ray.scenario.runner import ScenarioResult, run_scenario
from tests.scenario.builders import ScenarioBuilder, cycle_result, pending, running


def result(builder: ScenarioBuilder, answer: CycleResult) -> ScenarioResult:
    return run_scenario(builder.load(path="dir/case.yaml"), lambda _s, _c, _n: answer)


def fractions() -> ScenarioBuilder:
    return (
        ScenarioBuilder("fractions")
        .node("n", gpus=2)
        .job("old", running("n", gpuGroup="g0"), gpu=0.5)
        .job("new", pending(), gpu=0.5)
        .job("big", pending(), gpu=2)
    )


def test_pass_is_one_line() -> None:
    assert text_lines(result(fractions(), cycle_result())) == ["PASS fractions"]


def test_fail_lists_every_mismatch_and_why_a_job_is_pending() -> None:
    builder = fractions().expect("new", status="Binding").expect("big", status="Running", node="n")
    lines = text_lines(result(builder, cycle_result(big="2 GPUs asked, 1.5 free")))
    assert lines == [
        "FAIL fractions",
        "  job new, task new-0: status expected Binding, actual Pending",
        "  job big, task big-0: status expected Running, actual Pending",
        "    why big is pending: 2 GPUs asked, 1.5 free",
        "  job big, task big-0: node expected n, actual none",
    ]


def test_a_core_error_is_shown() -> None:
    def broken(*_args: object) -> CycleResult:
        raise RuntimeError("boom")

    failed = run_scenario(fractions().load(), broken)
    assert text_lines(failed) == ["FAIL fractions", "  error: RuntimeError: boom"]
    assert result_json(failed)["error"] == "RuntimeError: boom"


def test_json_result_shape() -> None:
    builder = fractions().expect("new", gpuGroups=["g1"])
    data = result_json(
        result(
            builder,
            CycleResult(
                decisions=[Bind("new", "new-0", "n", 0)],
                pending_reasons={"big": "too big", "new": "stale reason"},
                queues={},
            ),
        )
    )
    assert set(data) == {"file", "name", "passed", "mismatches", "final", "pendingReasons"}
    assert (data["file"], data["name"], data["passed"]) == ("dir/case.yaml", "fractions", False)
    assert data["mismatches"] == [
        {"job": "new", "task": "new-0", "field": "gpuGroups", "expected": ["g1"], "actual": ["g0"]}
    ]
    assert data["final"] == {
        "old": {"tasks": [{"name": "old-0", "status": "Running", "node": "n", "gpuGroup": 0}]},
        "new": {"tasks": [{"name": "new-0", "status": "Binding", "node": "n", "gpuGroup": 0}]},
        "big": {"tasks": [{"name": "big-0", "status": "Pending", "node": None, "gpuGroup": None}]},
    }
    # Only jobs still pending keep a reason.
    assert data["pendingReasons"] == {"big": "too big"}
    json.dumps(data)  # plain JSON types only


def test_whole_report_counts_and_lists_invalid_files() -> None:
    passed = result(fractions(), cycle_result())
    failed = result(fractions().expect("new", status="Running"), cycle_result())
    invalid = ConfigError("rounds: must be >= 1", path="bad.yaml")
    data = report_json([passed, failed], [invalid])
    assert (data["passed"], data["failed"]) == (1, 1)
    assert [r["passed"] for r in data["results"]] == [True, False]
    assert data["invalid"] == [{"file": "bad.yaml", "error": "bad.yaml: rounds: must be >= 1"}]
    assert "invalid" not in report_json([passed])
