"""The Philly trace's first month (about 10,000 jobs) on a 2,000-GPU cluster with the
default policy: every job replayed, and its figures agree with the trace itself. The
whole trace (82,247 jobs, about 5 minutes) is the benchmark's: BENCHMARKS.md, the
simulator's replays (`kai-ray sim --trace tests/sim/data/philly-jobs.csv.gz --cluster
250x8 --policy default`); how fast is for it to say, not a timed assert."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import json
from pathlib import Path

import pytest

from kai_ray.cli import main
from kai_ray.control.cycles import CHECK_INCREMENTAL_ENV

TRACE = Path(__file__).parent / "data" / "philly-jobs.csv.gz"
DAYS = 30
pytestmark = pytest.mark.slow


def _month(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The trace's rows submitted in its first DAYS days, read here apart from the simulator."""
    at = [dt.datetime.strptime(r["timestamp"], "%Y-%m-%d %H:%M:%S") for r in rows]
    end = min(at) + dt.timedelta(days=DAYS)
    return [r for r, t in zip(rows, at, strict=True) if t < end]


@pytest.mark.timeout(600)
def test_the_philly_traces_first_month(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # At its own speed: a full rebuild beside every cycle (the suite's
    # KAI_RAY_CHECK_INCREMENTAL) would make it several times slower. The simulator's
    # cycles are checked that way in the shorter replays of tests/sim.
    monkeypatch.delenv(CHECK_INCREMENTAL_ENV, raising=False)
    args = ["sim", "--trace", str(TRACE), "--cluster", "250x8", "--policy", "default"]
    assert main([*args, "--to", f"{DAYS}d", "--out", str(tmp_path)]) == 0
    assert "peak memory" in capsys.readouterr().err
    data = json.loads((tmp_path / "summary.json").read_text())
    s = data["policies"]["default"]
    with gzip.open(TRACE, "rt") as f:
        rows = _month(list(csv.DictReader(f)))
    assert s["jobs"] == s["completed"] == len(rows) > 5000
    # Every job's work is done once, plus what preemptions lost: the GPU-seconds held.
    work = sum(float(r["gpu_time"]) for r in rows)
    held = s["gpu_utilisation"] * 2000 * s["makespan_s"]
    assert held == pytest.approx(work + s["gpu_hours_lost"] * 3600, rel=1e-6)
    assert s["jct_s"]["p50"] >= sorted(float(r["duration"]) for r in rows)[0]
    assert 0 < s["jain_index"] <= 1
    assert 0 < s["peak_memory_mib"] < 4096
