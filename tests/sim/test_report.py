"""The command end to end: report.html and summary.json, checked against the event log."""

from __future__ import annotations

import base64
import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kai_ray.cli import main
from tests.sim.helpers import write_csv

ROWS = [
    # queue a borrows the whole cluster; b comes later and reclaims (default policy)
    "0,4000,8,a,,,,2,,,a-big",
    "100,600,4,a,,,,1,,,a-mid",
    "1500,1200,8,b,,,,1,,,b-1",
    "1600,300,2,b,,,,1,,,b-2",
    "2000,900,1,a,,,,1,,,a-small",
    "2100,3000,4,b,,,,1,,,b-3",
]
HEADER = "submit_time,duration,gpus,queue,cpu,memory,priority,gang_size,min_workers,max_workers,name"


def _events(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [{**r, "time": float(r["time"]), "gpus": float(r["gpus"])} for r in csv.DictReader(f)]


def _from_log(events: list[dict[str, Any]], total_gpus: float) -> dict[str, Any]:
    """The headline figures, recomputed from the event log alone."""
    submit, first, finish = {}, {}, {}
    held_since: dict[str, tuple[float, float]] = {}
    gpu_s, lost = 0.0, 0.0
    for e in events:
        job, t = e["job"], e["time"]
        if e["event"] == "submit":
            submit[job] = t
        elif e["event"] == "start":
            first.setdefault(job, t)
            held_since[job] = (t, e["gpus"])
        elif e["event"] in ("preempt", "finish"):
            start, gpus = held_since.pop(job)
            gpu_s += (t - start) * gpus
            if e["event"] == "finish":
                finish[job] = t
            else:
                lost += float(e["detail"].split()[0].removeprefix("lost=")) * gpus
    makespan = max(finish.values())
    jct = [finish[j] - submit[j] for j in finish]
    delay = [first[j] - submit[j] for j in first]
    return {
        "jct_mean": float(np.mean(jct)),
        "jct_p95": float(np.percentile(jct, 95)),
        "delay_mean": float(np.mean(delay)),
        "delay_p50": float(np.percentile(delay, 50)),
        "preemptions": sum(1 for e in events if e["event"] == "preempt"),
        "gpu_hours_lost": lost / 3600,
        "makespan": makespan,
        "utilisation": gpu_s / (total_gpus * makespan),
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sim")
    trace = write_csv(tmp / "t.csv", HEADER, ROWS)
    out = tmp / "out"
    args = [
        "sim",
        "--trace",
        str(trace),
        "--cluster",
        "2x8",
        "--out",
        str(out),
        "--events",
        "--checkpoint",
        "600",
    ]
    assert main(args) == 0
    return out


@pytest.mark.parametrize("policy", ["fifo", "default", "timeshare"])
def test_summary_agrees_with_the_event_log(run: Path, policy: str) -> None:
    summary = json.loads((run / "summary.json").read_text())["policies"][policy]
    log = _from_log(_events(run / f"events-{policy}.csv"), total_gpus=16)
    assert summary["completed"] == len(ROWS)
    assert summary["jct_s"]["mean"] == pytest.approx(log["jct_mean"])
    assert summary["jct_s"]["p95"] == pytest.approx(log["jct_p95"])
    assert summary["queueing_delay_s"]["mean"] == pytest.approx(log["delay_mean"])
    assert summary["queueing_delay_s"]["p50"] == pytest.approx(log["delay_p50"])
    assert summary["preemptions"] == log["preemptions"]
    assert summary["gpu_hours_lost"] == pytest.approx(log["gpu_hours_lost"])
    assert summary["makespan_s"] == pytest.approx(log["makespan"])
    assert summary["gpu_utilisation"] == pytest.approx(log["utilisation"])


def test_the_policies_differ_where_they_should(run: Path) -> None:
    policies = json.loads((run / "summary.json").read_text())["policies"]
    assert policies["fifo"]["preemptions"] == 0
    assert policies["default"]["preemptions"] > 0  # b reclaims its quota from a
    assert (
        policies["default"]["queues"]["b"]["queueing_delay_s"]["mean"]
        < (policies["fifo"]["queues"]["b"]["queueing_delay_s"]["mean"])
    )


def test_per_queue_figures_add_up(run: Path) -> None:
    for summary in json.loads((run / "summary.json").read_text())["policies"].values():
        queues = summary["queues"].values()
        assert sum(q["completed"] for q in queues) == summary["completed"]
        assert sum(q["preemptions"] for q in queues) == summary["preemptions"]
        held = sum(q["mean_gpus_held"] for q in queues)
        assert held == pytest.approx(summary["gpu_utilisation"] * 16)


def test_the_report_is_one_file_with_embedded_plots(run: Path) -> None:
    page = (run / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) >= 6  # 3 overall + one per policy
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    assert 'src="http' not in page and "<script" not in page
    for name in ("fifo", "default", "timeshare"):
        assert f"<td>{name}</td>" in page


def test_peak_memory_is_reported(run: Path) -> None:
    data = json.loads((run / "summary.json").read_text())
    assert data["peak_memory_mib"] > 10
    assert all(p["peak_memory_mib"] > 10 for p in data["policies"].values())


def test_bad_cluster_spec_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_csv(tmp_path / "t.csv", HEADER, ROWS)
    assert main(["sim", "--trace", str(trace), "--cluster", "8 by 2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--cluster: '8 by 2' is neither NODESxGPUS nor a file" in err


def test_malformed_trace_row_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_csv(tmp_path / "t.csv", HEADER, [*ROWS, "3000,ten,1,a,,,,,,,x"])
    assert main(["sim", "--trace", str(trace), "--cluster", "2x8", "--out", str(tmp_path / "o")]) == 2
    assert f"{trace}: line 8: column 'duration': 'ten' is not a number" in capsys.readouterr().err


def test_missing_arguments_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--cluster", "2x8"]) == 2
    assert "--trace, --out missing" in capsys.readouterr().err


def test_an_empty_window_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_csv(tmp_path / "t.csv", HEADER, ROWS)
    args = ["sim", "--trace", str(trace), "--cluster", "2x8", "--out", str(tmp_path), "--from", "30d"]
    assert main(args) == 2
    assert "no jobs were submitted between --from and --to" in capsys.readouterr().err


def test_series_over_time_match_the_totals(run: Path) -> None:
    for s in json.loads((run / "summary.json").read_text())["policies"].values():
        series = s["series"]
        util = series["gpu_utilisation"]
        assert len(util) == 200
        assert series["window_s"] * 200 == pytest.approx(s["makespan_s"])
        assert sum(util) / len(util) == pytest.approx(s["gpu_utilisation"], rel=1e-3)
        for team, q in s["queues"].items():
            held = series["gpus_held"][team]
            assert sum(held) / len(held) == pytest.approx(q["mean_gpus_held"], rel=1e-2, abs=1e-2)


def test_a_progress_bar_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_csv(tmp_path / "t.csv", HEADER, ROWS)
    args = ["sim", "--trace", str(trace), "--cluster", "2x8", "--policy", "fifo", "--out", str(tmp_path)]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"[fifo] [{'#' * 30}] 6/6 jobs" in err
    assert re.search(r"kai-ray sim: fifo: 6 jobs in [\d.]+s, \d+ steps, peak memory \d+ MiB", err)
    assert main([*args, "--no-progress"]) == 0
    assert "[fifo] [" not in capsys.readouterr().err
