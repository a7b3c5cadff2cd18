"""GPU types in the simulator: typed cluster files, the trace's gpu_types column,
`sim-trace --gpu-types`, and summary.json's per_gpu_type block."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from kai_ray.cli import main
from kai_ray.config.errors import ConfigError
from kai_ray.core import QueueInfo
from kai_ray.sim.cluster import parse_cluster
from kai_ray.sim.engine import Options, Simulation
from kai_ray.sim.policies import make_policy
from kai_ray.sim.trace import SimJob, TraceError, read_trace
from tests.sim.helpers import job, simulate, write_csv


def typed(name: str, submit: float, duration: float, gpus: float, types: str, workers: int = 1) -> SimJob:
    """A job of queue `a` accepting `types` (`H100|A100`; empty: any)."""
    accepted = tuple(types.split("|")) if types else ()
    return dataclasses.replace(job(name, submit, duration, gpus, workers=workers), gpu_types=accepted)


# ---------------------------------------------------------------- the cluster


def test_a_cluster_file_with_typed_nodes(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "nodes:\n"
        "  - {count: 2, gpus: 8, gpu_type: H100}\n"
        "  - {count: 1, gpus: 4, gpu_type: NVIDIA-A100-SXM4-80GB}\n"
        "  - {count: 1, gpus: 8}\n"
    )
    nodes = parse_cluster(str(path))
    assert [n.gpu_type for n in nodes] == ["H100", "H100", "NVIDIA-A100-SXM4-80GB", "default"]
    assert [n.gpus for n in nodes] == [8, 8, 4, 8]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("''", "is empty"),
        ("100", "100 is not a string"),
        ("[H100]", "is not a string"),
        ("'H 100'", "'H 100'"),
    ],
)
def test_a_bad_gpu_type_names_the_group_the_field_and_the_fix(
    tmp_path: Path, value: str, problem: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"nodes:\n  - {{count: 1, gpus: 8}}\n  - {{count: 1, gpus: 8, gpu_type: {value}}}\n")
    with pytest.raises(ConfigError) as err:
        parse_cluster(str(path))
    text = str(err.value)
    assert text.startswith(f"{path}: nodes[1].gpu_type: ")
    assert problem in text and "write a name such as H100" in text and "leave it out" in text


def test_the_short_form_splits_the_nodes_evenly_between_types() -> None:
    nodes = parse_cluster("5x8:H100,A100")
    assert [n.gpu_type for n in nodes] == ["H100"] * 3 + ["A100"] * 2
    assert len({n.name for n in nodes}) == 5
    assert {n.gpu_type for n in parse_cluster("2x8")} == {"default"}


@pytest.mark.parametrize("spec", ["4x8:", "4x8:H100,,A100", "4x8:H100,H100", "4x8:H 100"])
def test_a_bad_type_in_the_short_form(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"^--cluster: .*GPU type"):
        parse_cluster(spec)


# ---------------------------------------------------------------- the trace

HEADER = "submit_time,duration,gpus,queue,gpu_types,name"


def test_the_gpu_types_column_is_read_in_preference_order(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "t.csv", HEADER, ["0,60,1,a,H100|A100,x", "1,60,1,a,,y", "2,60,1,a,L4; H100,z"]
    )
    jobs = {j.id: j.gpu_types for j in read_trace(path)}
    assert jobs == {"x": ("H100", "A100"), "y": (), "z": ("L4", "H100")}


def test_a_trace_without_the_column_accepts_any_type(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", "submit_time,duration,gpus,queue", ["0,60,1,a"])
    assert [j.gpu_types for j in read_trace(path)] == [()]


@pytest.mark.parametrize(
    ("cell", "problem"), [("H100||A100", "a type is empty"), ("H100|H100", "names a type twice")]
)
def test_a_bad_gpu_types_cell_names_line_and_column(tmp_path: Path, cell: str, problem: str) -> None:
    path = write_csv(tmp_path / "t.csv", HEADER, ["0,60,1,a,,x", f"1,60,1,a,{cell},y"])
    with pytest.raises(TraceError, match=rf"line 3: column 'gpu_types': '{cell}': {problem}; write"):
        read_trace(path)


# ---------------------------------------------------------------- sim-trace


def _generate(out: Path, seed: int, *extra: str) -> list[dict[str, str]]:
    argv = ["sim-trace", "--out", str(out), "--days", "1", "--gpus", "64", "--seed", str(seed), *extra]
    assert main(argv) == 0
    with out.open(newline="") as f:
        return list(csv.DictReader(f))


def test_sim_trace_gpu_types_is_seeded_and_round_trips(tmp_path: Path) -> None:
    flag = ["--gpu-types", "H100,A100,L4"]
    rows = _generate(tmp_path / "a.csv", 3, *flag)
    _generate(tmp_path / "b.csv", 3, *flag)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert _generate(tmp_path / "c.csv", 4, *flag) != rows
    lists = [tuple(r["gpu_types"].split("|")) if r["gpu_types"] else () for r in rows]
    assert all(set(types) <= {"H100", "A100", "L4"} for types in lists)
    assert {len(types) for types in lists} == {0, 1, 2}  # any, one, or an ordered pair
    read = {j.id: j.gpu_types for j in read_trace(tmp_path / "a.csv")}
    assert [read[r["name"]] for r in rows] == lists
    # The jobs themselves are those of the same seed without types: only the column is added.
    plain = _generate(tmp_path / "d.csv", 3)
    assert [{k: v for k, v in r.items() if k != "gpu_types"} for r in rows] == plain


def test_sim_trace_refuses_a_bad_type_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.csv"
    assert main(["sim-trace", "--out", str(out), "--gpu-types", "H100,,A100"]) == 2
    assert "--gpu-types: 'H100,,A100': a GPU type is empty" in capsys.readouterr().err


# ---------------------------------------------------------------- the simulation


def test_per_gpu_type_figures_on_a_two_type_cluster() -> None:
    jobs = [
        typed("h1", 0, 100, 4, "H100"),
        typed("h2", 0, 100, 4, "H100"),  # waits for h1: one H100 node of 4
        typed("a1", 0, 50, 4, "A100"),
        typed("any", 10, 50, 2, ""),
    ]
    _, metrics = simulate(jobs, "fifo", cluster="2x4:H100,A100")
    summary = metrics.summary
    block = summary["per_gpu_type"]
    assert set(block) == {"A100", "H100"}
    assert block["H100"]["gpus"] == 4 and block["A100"]["gpus"] == 4
    for figures in block.values():
        assert 0.0 < figures["gpu_utilisation"] <= 1.0
        assert figures["jobs"] >= 1 and figures["completed"] == figures["jobs"]
    # GPU-seconds per type add up to the cluster's.
    total = sum(f["gpu_utilisation"] * f["gpus"] for f in block.values())
    assert total == pytest.approx(summary["gpu_utilisation"] * 8)
    assert summary["completed"] == 4 and summary["rejected"] == 0


def test_jobs_accepting_only_h100_never_run_on_a100_nodes() -> None:
    """Needs the core to honour JobInfo.gpu_types (docs/gpu-types.md)."""
    jobs = [typed(f"h{i}", 0, 100, 4, "H100") for i in range(3)] + [typed("a", 0, 100, 4, "A100")]
    sim, metrics = simulate(jobs, "fifo", cluster="2x4:H100,A100")
    assert all(sim.runs[f"h{i}"].ran_on == {"H100"} for i in range(3))
    assert sim.runs["a"].ran_on == {"A100"}
    starts = sorted(sim.runs[f"h{i}"].first_start or 0.0 for i in range(3))
    assert starts == [0.0, 100.0, 200.0]  # one at a time on the one H100 node
    block = metrics.summary["per_gpu_type"]
    assert block["H100"]["jobs"] == 3 and block["A100"]["jobs"] == 1
    assert block["H100"]["queueing_delay_s"]["mean"] == pytest.approx(100.0)


def test_a_job_takes_its_first_type_with_room() -> None:
    """Needs the core to honour JobInfo.gpu_types: its types in preference order."""
    jobs = [typed("first", 0, 100, 4, "A100|H100"), typed("second", 1, 100, 4, "A100|H100")]
    sim, _ = simulate(jobs, "fifo", cluster="2x4:H100,A100")
    assert sim.runs["first"].ran_on == {"A100"} and sim.runs["second"].ran_on == {"H100"}


def test_a_job_no_type_it_accepts_can_hold_is_rejected() -> None:
    jobs = [
        typed("nowhere", 0, 60, 1, "L4"),
        typed("too-big", 0, 60, 4, "H100", workers=2),  # 8 GPUs, and H100 has 4
        typed("fits", 0, 60, 4, "H100|A100"),
    ]
    sim, metrics = simulate(jobs, "fifo", cluster="2x4:H100,A100")
    assert "no type it accepts (L4)" in sim.runs["nowhere"].rejected
    assert "2 worker(s) of 4 GPUs" in sim.runs["too-big"].rejected
    assert not sim.runs["fits"].rejected and metrics.summary["rejected"] == 2


def test_a_default_cluster_gets_one_default_block_equal_to_the_overall_figures() -> None:
    jobs = [job("x", 0, 100, 4), job("y", 0, 100, 2), job("z", 50, 30, 1)]
    _, metrics = simulate(jobs, "default", cluster="1x4")
    summary = metrics.summary
    default = summary["per_gpu_type"]["default"]
    assert list(summary["per_gpu_type"]) == ["default"]
    assert default["gpus"] == 4 and default["gpu_utilisation"] == summary["gpu_utilisation"]
    assert default["queueing_delay_s"] == summary["queueing_delay_s"]
    assert default["jct_s"] == summary["jct_s"]


def test_typed_runs_decide_the_same_with_and_without_incremental_cycles() -> None:
    kinds = ("H100", "A100|H100", "")
    jobs = [typed(f"j{i}", i * 7.0, 40.0 + i * 13 % 50, 1 + i % 4, kinds[i % 3]) for i in range(24)]
    nodes = parse_cluster("4x4:H100,A100")
    logs = []
    for incremental in (True, False):
        options = Options(checkpoint_s=0.0, event_log=True, incremental=incremental)
        sim = Simulation(jobs, nodes, [QueueInfo(name="a")], make_policy("default"), options)
        logs.append(sim.run().events)
    assert logs[0] == logs[1]


def test_sim_writes_the_per_type_block_end_to_end(tmp_path: Path) -> None:
    trace = write_csv(
        tmp_path / "t.csv", HEADER, ["0,600,4,a,H100,x", "0,600,4,b,A100|H100,y", "60,60,1,a,,z"]
    )
    out = tmp_path / "out"
    argv = ["sim", "--trace", str(trace), "--cluster", "2x4:H100,A100", "--out", str(out), "--no-progress"]
    assert main([*argv, "--policy", "fifo"]) == 0
    data = json.loads((out / "summary.json").read_text())
    block = data["policies"]["fifo"]["per_gpu_type"]
    assert {t: b["gpus"] for t, b in block.items()} == {"A100": 4, "H100": 4}
    assert "gpu_utilisation" in data["policies"]["fifo"]  # the overall figures stay
    assert "<p>Per GPU type</p>" in (out / "report.html").read_text()
