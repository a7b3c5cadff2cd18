"""Trace readers and cluster specs: what they read, and the errors bad input gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.config.errors import ConfigError
from kai_ray.sim.cluster import parse_cluster, sim_queues, team_queues
from kai_ray.sim.trace import TraceError, read_trace
from tests.sim.helpers import GENERIC_HEADER, write_csv

PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster"


def test_philly_rows_become_gangs_over_nodes_of_eight(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "p.csv",
        PHILLY,
        [
            "2017-10-01 00:00:10,100.0,16,1600.0,vc1",
            "2017-10-01 00:00:00,50.0,1,50.0,vc2",
            "2017-10-01 00:01:00,60.0,12,720.0,vc1",
        ],
    )
    jobs = read_trace(path)
    assert [(j.submit, j.queue, j.workers, j.gpus) for j in jobs] == [
        (0.0, "vc2", 1, 1.0),
        (10.0, "vc1", 2, 8.0),
        (60.0, "vc1", 2, 6.0),
    ]
    assert [j.total_gpus for j in jobs] == [1, 16, 12]


def test_from_and_to_keep_a_window_shifted_to_zero(tmp_path: Path) -> None:
    rows = [f"{t},10,1,a" for t in (0, 100, 200, 300)]
    path = write_csv(tmp_path / "g.csv", "submit_time,duration,gpus,queue", rows)
    assert [j.submit for j in read_trace(path, 100, 300)] == [0.0, 100.0]


def test_generic_rows_with_elastic_jobs_and_quantities(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "g.csv",
        GENERIC_HEADER,
        [
            "0,60,2,team,4,16Gi,100,2,,,gang",
            "5,60,1,team,,,,,2,4,elastic",
            "7,30,0.5,team,,,,,,,frac",
            "9,30,1,team,,,,,,3,grows-from-one",
        ],
    )
    gang, elastic, frac, grows = read_trace(path)
    assert (grows.workers, grows.min_workers) == (3, 1)
    assert (gang.workers, gang.min_workers, gang.gpus, gang.memory, gang.priority) == (
        2,
        0,
        2,
        16 * 1024**3,
        100,
    )
    assert (elastic.workers, elastic.min_workers) == (4, 2)
    assert frac.gpus == 0.5 and frac.priority == 50


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("0,abc,1,a", "line 3: column 'duration': 'abc' is not a number"),
        ("0,10,-1,a", "line 3: column 'gpus': -1 is below 0"),
        ("0,10,1,", "line 3: column 'queue': is empty"),
        ("0,10,1.5,a", "line 3: column 'gpus': 1.5: above 1 a GPU count must be whole"),
        ("0,10,1", "line 3: 3 values for 4 columns"),
    ],
)
def test_a_malformed_row_names_file_line_and_column(tmp_path: Path, row: str, expected: str) -> None:
    path = write_csv(tmp_path / "bad.csv", "submit_time,duration,gpus,queue", ["0,10,1,a", row])
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path}: ")
    assert expected in str(err.value)


def test_a_bad_philly_time_says_the_format(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "p.csv", PHILLY, ["10/01/2017,1,1,1,vc"])
    with pytest.raises(TraceError, match=r"line 2: column 'timestamp'.*YYYY-MM-DD HH:MM:SS"):
        read_trace(path)


def test_an_unknown_header_lists_both_formats(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "x.csv", "when,how_long", ["1,2"])
    with pytest.raises(TraceError, match=r"neither the Philly trace's .* it lacks submit_time"):
        read_trace(path)


def test_elastic_min_above_max_is_refused(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "g.csv", GENERIC_HEADER, ["0,60,1,team,,,,,5,4,e"])
    with pytest.raises(TraceError, match="column 'min_workers': 5 is above max_workers 4"):
        read_trace(path)


def test_a_missing_trace_file() -> None:
    with pytest.raises(TraceError, match="cannot read the trace"):
        read_trace("/nonexistent/trace.csv")


def test_cluster_spec_short_form() -> None:
    nodes = parse_cluster("250x8")
    assert len(nodes) == 250 and {n.gpus for n in nodes} == {8}
    assert len({n.name for n in nodes}) == 250


@pytest.mark.parametrize("spec", ["250*8", "x8", "0x8", "nodes.yaml"])
def test_a_bad_cluster_spec_says_how_to_write_one(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"--cluster: .*(NODESxGPUS|at least one node)"):
        parse_cluster(spec)


def test_cluster_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - {count: 2, gpus: 8, memory: 1Ti}\n  - {count: 1, gpus: 4, cpu: 16}\n")
    nodes = parse_cluster(str(path))
    assert [n.gpus for n in nodes] == [8, 8, 4]
    assert nodes[0].memory == 1024**4 and nodes[2].cpu == 16
    path.write_text("nodes:\n  - {count: 2, gpu: 8}\n")
    with pytest.raises(ConfigError, match=r"c.yaml: nodes\[0\]: unknown key 'gpu'"):
        parse_cluster(str(path))


def test_default_queues_share_the_cluster_equally() -> None:
    queues = team_queues(["b", "a"], parse_cluster("3x8"))
    assert [(q.name, q.quota[0]) for q in queues] == [("a", 12.0), ("b", 12.0)]


def test_a_queues_file_must_hold_every_trace_queue(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text("- name: a\n")
    with pytest.raises(ConfigError, match=r"queue 'b'.*not a leaf queue of this file"):
        sim_queues(str(path), ["a", "b"], parse_cluster("1x8"))


def test_job_names_must_be_unique_and_plain(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "g.csv", "submit_time,duration,gpus,queue,name", ["0,1,1,a,x", "1,1,1,a,x"])
    with pytest.raises(TraceError, match="line 3: column 'name': 'x' is already the name of line 2"):
        read_trace(path)
    path = write_csv(tmp_path / "g.csv", "submit_time,duration,gpus,queue,name", ["0,1,1,a,x/y"])
    with pytest.raises(TraceError, match="contains '/'"):
        read_trace(path)
