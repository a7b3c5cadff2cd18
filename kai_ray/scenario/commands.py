"""`kai-ray scenario run PATH... [--json]`: run scenario files and report the verdicts.

Exit status: 0 every scenario passed; 1 one failed; 2 a file is invalid (each invalid
file is named on stderr with its field and the problem; the valid ones still run).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from kai_ray.config.errors import ConfigError
from kai_ray.scenario.loader import load_scenario
from kai_ray.scenario.report import report_json, text_lines
from kai_ray.scenario.runner import ScenarioResult, run_scenario

__all__ = ["add_commands", "collect_files", "run_files"]

EXIT_PASSED, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    scenario = subparsers.add_parser(
        "scenario",
        help="run scheduling scenarios (YAML files) against the core",
        description="Scheduling scenarios; the file format: docs/scenario-format.md",
    )
    scenario.set_defaults(func=lambda _args: _usage(scenario))
    commands = scenario.add_subparsers(title="commands", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run scenario files and compare with their expectations",
        description="Run each scenario and print PASS or FAIL with every mismatch. "
        "Exit 0: all passed; 1: one failed; 2: a file is invalid.",
    )
    run.add_argument(
        "paths", nargs="+", metavar="PATH", help="a scenario file, or a folder to search for *.yaml"
    )
    run.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    run.add_argument(
        "--traceback",
        action="store_true",
        help="when the core fails on a scenario, show the whole traceback",
    )
    run.set_defaults(func=_run)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_INVALID


def collect_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, folders searched recursively for *.yaml (sorted); each file once."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(path.rglob("*.yaml"))
            if not found:
                raise ConfigError("no *.yaml scenario files in this folder", path=path)
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError("no such file or folder; check the path", path=path)
    return list(dict.fromkeys(files))


def run_files(
    files: Sequence[Path], *, keep_traceback: bool = False
) -> tuple[list[ScenarioResult], list[ConfigError]]:
    """Load and run each file: results of the valid ones, errors of the invalid ones."""
    results: list[ScenarioResult] = []
    invalid: list[ConfigError] = []
    for file in files:
        try:
            scenario = load_scenario(file)
        except ConfigError as e:
            invalid.append(e)
            continue
        results.append(run_scenario(scenario, keep_traceback=keep_traceback))
    return results, invalid


def _run(args: argparse.Namespace) -> int:
    files = collect_files(args.paths)
    results, invalid = run_files(files, keep_traceback=args.traceback)
    for error in invalid:
        print(f"kai-ray: invalid scenario: {error}", file=sys.stderr)
    if args.json:
        print(json.dumps(report_json(results, invalid), indent=2))
    else:
        for result in results:
            print("\n".join(text_lines(result)))
        print(_summary(results, invalid))
    if invalid:
        return EXIT_INVALID
    return EXIT_PASSED if all(r.passed for r in results) else EXIT_FAILED


def _summary(results: Sequence[ScenarioResult], invalid: Sequence[ConfigError]) -> str:
    passed = sum(r.passed for r in results)
    text = f"{passed} passed, {len(results) - passed} failed"
    return text + (f", {len(invalid)} invalid" if invalid else "")
