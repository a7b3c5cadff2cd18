"""Scenario files (docs/scenario-format.md): load, run against the core, compare, report."""

from kai_ray.scenario.expect import JobExpectation, Mismatch, TaskExpectation
from kai_ray.scenario.loader import Scenario, load_scenario, parse_scenario
from kai_ray.scenario.runner import ScenarioResult, ScenarioRunError, run_scenario
from kai_ray.scenario.symbols import GpuSymbols

__all__ = [
    "GpuSymbols",
    "JobExpectation",
    "Mismatch",
    "Scenario",
    "ScenarioResult",
    "ScenarioRunError",
    "TaskExpectation",
    "load_scenario",
    "parse_scenario",
    "run_scenario",
]
