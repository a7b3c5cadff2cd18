"""Conformance scenarios: every YAML file is one test, run through the real core.

Two sets run here:
- this project's own scenarios, `tests/scenarios/<area>/*.yaml`;
- the scenarios transcribed from KAI Scheduler's tests, `../shared/scenarios/kai`
  (relative to the repository root). When that folder is absent (a checkout without
  the shared tree next to it) that part is skipped with a message saying so.

A failing scenario fails its own test, named by its file, and the failure message
lists every mismatch (job, task, field, expected, actual) as `kai-ray scenario run`
prints it. Format: docs/scenario-format.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.config.errors import ConfigError
from kai_ray.scenario.loader import load_scenario
from kai_ray.scenario.report import text_lines
from kai_ray.scenario.runner import run_scenario

REPO = Path(__file__).resolve().parents[1]
OWN = REPO / "tests" / "scenarios"
KAI = REPO / ".." / "shared" / "scenarios" / "kai"


def _yaml_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.yaml")) if folder.is_dir() else []


def _params() -> list[object]:
    params: list[object] = [pytest.param(path, id=str(path.relative_to(OWN))) for path in _yaml_files(OWN)]
    if KAI.is_dir():
        params += [pytest.param(path, id="kai/" + str(path.relative_to(KAI))) for path in _yaml_files(KAI)]
    else:
        params.append(
            pytest.param(
                None,
                id="kai",
                marks=pytest.mark.skip(
                    reason=f"KAI scenarios not found at {KAI.resolve()} "
                    "(../shared/scenarios/kai relative to the repository): skipped"
                ),
            )
        )
    return params


@pytest.mark.parametrize("path", _params())
def test_scenario(path: Path) -> None:
    try:
        scenario = load_scenario(path)
    except ConfigError as e:
        pytest.fail(f"invalid scenario file {path}: {e}", pytrace=False)
    result = run_scenario(scenario, keep_traceback=True)
    if not result.passed:
        pytest.fail(f"{path}\n" + "\n".join(text_lines(result)), pytrace=False)


def test_own_scenarios_exist() -> None:
    """A guard against the parametrized test silently running nothing."""
    assert len(_yaml_files(OWN)) >= 40, f"expected 40+ scenario files under {OWN}"
