"""Reservations in the simulator: `--reserve-after` runs each policy beside itself with
them, the waits are split by size, and `kai-ray sim-trace` writes the big-gang mix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kai_ray.cli import main
from kai_ray.sim.generate import big_gang_rows
from kai_ray.sim.trace import read_trace

from .helpers import GENERIC_HEADER, write_csv


def _stream(tmp_path: Path) -> Path:
    """A 16-GPU gang (2 x 8) behind a stream of 1-GPU jobs on two 8-GPU nodes."""
    rows = [f"0,{1800 * (i + 1)},4,a,1,1Gi,50,1,1,1,r{i}" for i in range(4)]
    rows.append("30,10800,8,a,1,1Gi,50,2,2,2,big")
    rows += [f"{60 + 300 * i},{2400 + 600 * (i % 5)},1,a,1,1Gi,50,1,1,1,s{i}" for i in range(40)]
    return write_csv(tmp_path / "stream.csv", GENERIC_HEADER, rows)


def test_reserve_after_runs_each_policy_beside_itself(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["sim", "--trace", str(_stream(tmp_path)), "--cluster", "2x8", "--policy", "fifo"]
    args += ["--runtime-estimates", "exact", "--reserve-after", "10m", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reserve_after_s"] == 600.0
    plain, reserving = summary["policies"]["fifo"], summary["policies"]["fifo+reserve"]
    # The gang is the one job of 16 GPUs: no big gang (32+), 44 small jobs.
    assert plain["queueing_delay_by_size_s"]["big_gangs"]["jobs"] == 0
    assert plain["queueing_delay_by_size_s"]["small_jobs"]["jobs"] == 44
    assert reserving["about"].endswith("reservations for gangs waiting 10 min, with backfill")
    assert "Queueing delay by job size" in (out / "report.html").read_text()


def test_the_big_gang_starts_sooner_with_a_reservation(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["sim", "--trace", str(_stream(tmp_path)), "--cluster", "2x8", "--policy", "fifo", "--events"]
    args += ["--runtime-estimates", "exact", "--reserve-after", "10m", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    starts = {}
    for name in ("fifo", "fifo+reserve"):
        rows = [line.split(",") for line in (out / f"events-{name}.csv").read_text().splitlines()[1:]]
        starts[name] = min(float(r[0]) for r in rows if r[1] == "start" and r[2] == "big")
    assert starts["fifo+reserve"] < starts["fifo"]


def test_a_reservation_wait_must_be_a_duration_above_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sim", "--trace", str(_stream(tmp_path)), "--cluster", "2x8", "--out", str(tmp_path / "o")]
    assert main([*args, "--reserve-after", "0"]) == 2
    assert "--reserve-after" in capsys.readouterr().err
    assert main([*args, "--reserve-after", "soon"]) == 2
    assert "not a duration" in capsys.readouterr().err


def test_the_generated_trace_is_seeded_and_has_big_gangs(tmp_path: Path) -> None:
    assert big_gang_rows(3, 1.0, 128) == big_gang_rows(3, 1.0, 128)
    assert big_gang_rows(3, 1.0, 128) != big_gang_rows(4, 1.0, 128)
    path = tmp_path / "big.csv"
    assert main(["sim-trace", "--out", str(path), "--days", "2", "--gpus", "128", "--seed", "1"]) == 0
    jobs = read_trace(path)
    big = [j for j in jobs if j.total_gpus >= 32]
    assert big and all(j.gpus == 8 and j.workers in (4, 6, 8) for j in big)
    asked = sum(j.total_gpus * j.duration for j in jobs) / (2 * 86400 * 128)
    assert 0.5 < asked < 2.0  # about the load asked for (1.0), by chance
