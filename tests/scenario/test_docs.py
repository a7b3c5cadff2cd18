"""docs/scenario-format.md is the format's documentation for users: its complete
examples must run and pass, and the limits it states must be the loader's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kai_ray.scenario.loader import parse_scenario
from kai_ray.scenario.report import text_lines
from kai_ray.scenario.runner import run_scenario
from kai_ray.scenario.schema import MAX_GPUS_PER_NODE, MAX_ROUNDS, MAX_TASKS

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenario-format.md"
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _scenarios() -> list[object]:
    """The yaml blocks that are whole scenarios (a fragment lacks nodes: or jobs:)."""
    blocks = [yaml.safe_load(text) for text in BLOCK.findall(DOC.read_text(encoding="utf-8"))]
    return [
        pytest.param(b, id=b.get("name", "?"))
        for b in blocks
        if isinstance(b, dict) and {"nodes", "jobs"} <= set(b)
    ]


def test_the_document_has_whole_examples() -> None:
    assert len(_scenarios()) >= 3


@pytest.mark.parametrize("data", _scenarios())
def test_a_documented_example_passes(data: dict[str, object]) -> None:
    result = run_scenario(parse_scenario(data, path=f"{DOC.name} example"), keep_traceback=True)
    assert result.passed, "\n".join(text_lines(result))


def test_the_documented_limits_are_the_loaders() -> None:
    limits = DOC.read_text(encoding="utf-8").split("## Limits", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in limits.splitlines()
        if line.startswith("| ")
    }
    assert rows["`rounds`"] == str(MAX_ROUNDS)
    assert rows["tasks in the file (all jobs, `{count: N}` included)"] == str(MAX_TASKS)
    assert rows["`gpus` of a node"] == str(MAX_GPUS_PER_NODE)
