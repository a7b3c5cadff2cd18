"""Small fluent builders for scenario files, so each test states only what it is about."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Self

import yaml

from kai_ray.core.model.snapshot import CycleResult, Decision
from kai_ray.scenario.loader import Scenario, parse_scenario

__all__ = ["ScenarioBuilder", "cycle_result", "pending", "running", "scenario"]


def running(node: str, **fields: Any) -> dict[str, Any]:
    return {"state": "Running", "node": node, **fields}


def pending(**fields: Any) -> dict[str, Any]:
    return {"state": "Pending", **fields}


def cycle_result(*decisions: Decision, **reasons: str) -> CycleResult:
    """A hand-made core answer, for testing how the runner applies it."""
    return CycleResult(decisions=list(decisions), pending_reasons=dict(reasons), queues={})


class ScenarioBuilder:
    """Builds the YAML-shaped dict of a scenario; keys are the file's own (camelCase)."""

    def __init__(self, name: str = "test scenario") -> None:
        self.data: dict[str, Any] = {"name": name, "nodes": {}, "jobs": []}

    def set(self, key: str, value: Any) -> Self:
        self.data[key] = value
        return self

    def node(self, name: str, **fields: Any) -> Self:
        self.data["nodes"][name] = fields
        return self

    def queue(self, name: str, parent: str | None = None, **fields: Any) -> Self:
        entry: dict[str, Any] = {"name": name, **fields}
        if parent is not None:
            entry["parent"] = parent
        self.data.setdefault("queues", []).append(entry)
        return self

    def job(self, name: str, *tasks: dict[str, Any], **fields: Any) -> Self:
        entry = {"name": name, **fields}
        entry.setdefault("tasks", list(tasks) or [pending()])
        self.data["jobs"].append(entry)
        return self

    def expect(self, job: str, **fields: Any) -> Self:
        self.data.setdefault("expect", {})[job] = fields
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.data)

    def load(self, path: str = "test.yaml") -> Scenario:
        return parse_scenario(self.build(), path=path)

    def write(self, folder: Path, file: str = "scenario.yaml") -> Path:
        path = folder / file
        path.write_text(yaml.safe_dump(self.build(), sort_keys=False))
        return path


def scenario(name: str = "test scenario") -> ScenarioBuilder:
    """A builder with one 8-GPU node `node0`: enough for most tests."""
    return ScenarioBuilder(name).node("node0", gpus=8)
