"""`kai-ray scenario run`: output and exit codes, in-process and once as the real command.

In-process runs replace the core with a scripted one, so these tests check the command,
not the scheduling; test_conformance.py runs the real core.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kai_ray import __version__
from kai_ray.cli import main
from kai_ray.core import cycle as core_cycle
from kai_ray.core.model.snapshot import Bind, ClusterSnapshot, CycleResult, SchedulerConfig
from tests.scenario.builders import cycle_result, scenario

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def scripted_core(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The core binds every pending task named `ok-*` to node0 and nothing else."""

    def fake(snapshot: ClusterSnapshot, _config: SchedulerConfig, _now: float) -> CycleResult:
        return cycle_result(
            *(
                Bind(job.name, t.name, "node0", None)
                for job in snapshot.jobs
                if job.name.startswith("ok")
                for t in job.tasks
                if t.status.value == "Pending"
            )
        )

    monkeypatch.setattr(core_cycle, "run_cycle", fake)
    yield


def write(folder: Path, file: str, *, passing: bool = True) -> Path:
    builder = scenario(file.removesuffix(".yaml")).job("ok")
    builder.expect("ok", status="Binding" if passing else "Running")
    folder.mkdir(parents=True, exist_ok=True)
    return builder.write(folder, file)


def write_invalid(folder: Path) -> Path:
    path = folder / "invalid.yaml"
    path.write_text(
        "nodes: {node0: {gpus: 1}}\njobs:\n- {name: j, queue: nowhere, tasks: [{state: Pending}]}\n"
    )
    return path


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"kai-ray {__version__}"


@pytest.mark.parametrize("argv", [[], ["scenario"]], ids=["no command", "no subcommand"])
def test_missing_command_shows_help_and_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage: kai-ray" in capsys.readouterr().err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "run"]) == 2
    assert "PATH" in capsys.readouterr().err


def test_all_passed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a.yaml")
    write(tmp_path / "sub", "b.yaml")
    assert main(["scenario", "run", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["PASS a", "PASS b", "2 passed, 0 failed"]


def test_one_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = write(tmp_path, "a.yaml"), write(tmp_path, "b.yaml", passing=False)
    assert main(["scenario", "run", str(good), str(bad)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "PASS a",
        "FAIL b",
        "  job ok, task ok-0: status expected Running, actual Binding",
        "1 passed, 1 failed",
    ]


def test_an_invalid_file_exits_2_and_the_others_still_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "a.yaml", passing=False)
    invalid = write_invalid(tmp_path)
    assert main(["scenario", "run", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "FAIL a" in out
    assert err.splitlines() == [
        f"kai-ray: invalid scenario: {invalid}: job 'j': queue: queue 'nowhere' does not exist; "
        "use one of the leaf queues (default)"
    ]


def test_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a.yaml")
    write(tmp_path, "b.yaml", passing=False)
    write_invalid(tmp_path)
    assert main(["scenario", "run", str(tmp_path), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert (data["passed"], data["failed"]) == (1, 1)
    assert [(r["name"], r["passed"]) for r in data["results"]] == [("a", True), ("b", False)]
    assert data["results"][1]["mismatches"] == [
        {"job": "ok", "task": "ok-0", "field": "status", "expected": "Running", "actual": "Binding"}
    ]
    assert data["results"][0]["final"] == {
        "ok": {"tasks": [{"name": "ok-0", "status": "Binding", "node": "node0", "gpuGroup": None}]}
    }
    assert len(data["invalid"]) == 1


def test_a_path_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "run", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"kai-ray: error: {tmp_path / 'nope'}: no such file or folder; check the path"
    ]


def test_a_folder_without_scenarios(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "run", str(tmp_path)]) == 2
    assert "no *.yaml scenario files" in capsys.readouterr().err


def test_bad_yaml_is_an_invalid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.yaml").write_text("nodes: {a: [\n")
    assert main(["scenario", "run", str(tmp_path)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_the_installed_command(tmp_path: Path) -> None:
    """Once through the real console script and the real core, on the examples."""
    command = shutil.which("kai-ray", path=str(Path(sys.executable).parent)) or "kai-ray"
    done = subprocess.run(
        [command, "scenario", "run", str(REPO / "examples" / "scenarios"), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["failed"] == 0 and data["passed"] >= 3
