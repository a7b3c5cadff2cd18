"""The real core on real scenario files: the shared KAI set and this repo's examples.

Each file is one test, so a failure names the scenario and lists its mismatches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.scenario.loader import load_scenario
from kai_ray.scenario.report import text_lines
from kai_ray.scenario.runner import run_scenario

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "scenarios"  # the team's shared set, next to the repo
EXAMPLES = REPO / "examples" / "scenarios"


def files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.yaml")) if folder.is_dir() else []


@pytest.mark.parametrize("path", files(EXAMPLES), ids=lambda p: p.name)
def test_example(path: Path) -> None:
    result = run_scenario(load_scenario(path), keep_traceback=True)
    assert result.passed, "\n".join(text_lines(result))


@pytest.mark.skipif(
    not SHARED.is_dir(),
    reason=f"the team's shared scenarios are not at {SHARED} (../shared/scenarios next to the "
    "repository): skipped; this project's own scenarios are tests/scenarios",
)
@pytest.mark.parametrize(
    "path", files(SHARED), ids=lambda p: str(p.relative_to(SHARED)) if SHARED.is_dir() else ""
)
def test_shared(path: Path) -> None:
    result = run_scenario(load_scenario(path), keep_traceback=True)
    assert result.passed, "\n".join(text_lines(result))


def test_there_are_examples() -> None:
    assert len(files(EXAMPLES)) >= 3
