"""The simulator's autoscaler (`kai-ray sim --autoscale`, kai_ray/sim/autoscale.py): small
cases worked out by hand. Nodes of one shape come a fixed latency after a gang waits for
room, up to a maximum, and go after an idle time; the snapshot then says the cluster can
grow, so the preemption delay applies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kai_ray.cli import main
from kai_ray.config.errors import ConfigError
from kai_ray.core import QueueInfo, SchedulerConfig
from kai_ray.sim.autoscale import DEFAULT_IDLE_S, DEFAULT_LATENCY_S, parse_autoscale
from kai_ray.sim.cluster import parse_cluster
from kai_ray.sim.engine import Options, Simulation
from kai_ray.sim.policies import make_policy
from kai_ray.sim.trace import SimJob

from .helpers import GENERIC_HEADER, job, write_csv

LATENCY, IDLE = 300.0, 600.0
SHAPE = "2x8,latency=5m,idle=10m"


def _run(
    jobs: list[SimJob],
    autoscale: str | None = SHAPE,
    delay_s: float = 0.0,
    queues: list[QueueInfo] | None = None,
    cluster: str = "1x8",
) -> Simulation:
    config = SchedulerConfig(preemption_delay_s=delay_s)
    options = Options(
        checkpoint_s=0.0, event_log=True, autoscale=parse_autoscale(autoscale) if autoscale else None
    )
    queues = queues or [QueueInfo(name=q) for q in sorted({j.queue for j in jobs})]
    sim = Simulation(jobs, parse_cluster(cluster), queues, make_policy("default", config), options)
    sim.run()
    return sim


def test_the_spec_names_the_shape_the_most_nodes_and_the_times() -> None:
    shape = parse_autoscale("4x8")
    assert (shape.max_nodes, shape.node.gpus, shape.node.gpu_type) == (4, 8, "default")
    assert (shape.latency_s, shape.idle_s) == (DEFAULT_LATENCY_S, DEFAULT_IDLE_S)
    shape = parse_autoscale("2x4:H100,latency=90,idle=1h")
    assert (shape.max_nodes, shape.node.gpus, shape.node.gpu_type) == (2, 4, "H100")
    assert (shape.latency_s, shape.idle_s) == (90.0, 3600.0)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("lots", "MAXxGPUS"),
        ("0x8", "at least one node"),
        ("2x8,soon=5m", "'soon=5m' is not latency=T or idle=T"),
        ("2x8,latency=later", "not a duration"),
        ("2x8:A|B", "not a GPU type's name"),
    ],
)
def test_a_bad_spec_says_what_to_write(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_autoscale(spec)


def test_a_gang_that_does_not_fit_waits_one_latency_for_a_node_that_then_goes_when_idle() -> None:
    # One node of 8 GPUs, full until 7200; a 4-GPU job of the same queue comes at 600: no
    # one to take room from, so it asks for a node, ready at 900; it runs 900..2700, and
    # the node goes after 600 s idle, at 3300.
    jobs = [job(f"a{i}", 0, 7200, 1) for i in range(8)] + [job("new", 600, 1800, 4)]
    sim = _run(jobs)
    assert sim.runs["new"].first_start == 600 + LATENCY
    assert sim.metrics.summary["autoscale"] == {
        "nodes_added": 1,
        "node_hours": pytest.approx((2700 + IDLE - 900) / 3600),
        "peak_nodes": 1,
    }
    # Utilisation counts the added node's GPUs while it was there: 8 x 7200 + 4 x 1800 held
    # of 8 x 7200 + 8 x 2400.
    held, there = 8 * 7200 + 4 * 1800, 8 * 7200 + 8 * 2400
    assert sim.metrics.summary["gpu_utilisation"] == pytest.approx(held / there)
    assert [n.name for n in sim.ctl.nodes.values()] == ["node-00000"]


def test_it_adds_no_more_nodes_than_its_maximum() -> None:
    # Three whole-node jobs wait on a full cluster: two nodes at most, the third waits for
    # a node to free up.
    jobs = [job("full", 0, 7200, 8)] + [job(f"w{i}", 60, 1800, 8) for i in range(3)]
    sim = _run(jobs)
    starts = sorted(sim.runs[f"w{i}"].first_start or 0.0 for i in range(3))
    assert starts == [60 + LATENCY, 60 + LATENCY, 60 + LATENCY + 1800]
    assert sim.metrics.summary["autoscale"]["peak_nodes"] == 2
    assert sim.metrics.summary["autoscale"]["nodes_added"] == 2


def test_work_held_back_by_its_queue_asks_for_no_node() -> None:
    # Queue a may hold 8 GPUs at most: its second job waits for its queue, not for room.
    queues = [QueueInfo(name="a", limit=(8.0, -1.0, -1.0))]
    jobs = [job("first", 0, 3600, 8), job("second", 60, 600, 4)]
    sim = _run(jobs, queues=queues)
    assert sim.runs["second"].first_start == 3600
    assert sim.metrics.summary["autoscale"]["nodes_added"] == 0


def test_a_gang_larger_than_the_cluster_is_accepted_up_to_what_it_may_grow_to() -> None:
    # 1 node of 8 and up to 2 more: a gang of 24 GPUs fits once both came; 32 never does.
    jobs = [job("three-nodes", 0, 600, 8, workers=3), job("four-nodes", 0, 600, 8, workers=4)]
    sim = _run(jobs)
    assert sim.runs["three-nodes"].first_start == LATENCY
    assert "more than the cluster may grow to (24 GPUs)" in sim.runs["four-nodes"].rejected


def test_nodes_of_a_type_a_gang_does_not_accept_are_not_added_for_it() -> None:
    a100 = SimJob(id="a100", submit=60, duration=600, queue="a", gpus=8, gpu_types=("A100",))
    jobs = [job("full", 0, 3600, 8), a100]
    sim = _run(jobs, autoscale="2x8:H100", cluster="1x8:A100")
    assert sim.runs["a100"].first_start == 3600
    assert sim.metrics.summary["autoscale"]["nodes_added"] == 0


def _reclaim_world() -> tuple[list[SimJob], list[QueueInfo]]:
    """Queue a borrows all 8 GPUs of the one node; at 600, queue b (quota 4) asks for a gang
    of 2 x 2 GPUs, which it could reclaim at once."""
    queues = [QueueInfo(name="a", quota=(4.0, 0, 0)), QueueInfo(name="b", quota=(4.0, 0, 0))]
    jobs = [job(f"a{i}", 0, 7200, 1, queue="a") for i in range(8)]
    return [*jobs, job("b", 600, 1800, 2, queue="b", workers=2)], queues


def test_with_a_delay_past_the_latency_the_gang_takes_the_new_node_and_evicts_nobody() -> None:
    jobs, queues = _reclaim_world()
    at_once = _run(jobs, queues=queues)
    assert at_once.runs["b"].first_start == 600 and at_once.metrics.summary["preemptions"] == 4
    waits = _run(jobs, queues=queues, delay_s=2 * LATENCY)
    assert waits.runs["b"].first_start == 600 + LATENCY and waits.metrics.summary["preemptions"] == 0
    assert waits.ctl.cluster_grows


def test_time_alone_ends_the_delay_when_no_node_comes_in_time() -> None:
    # The delay (120 s) ends before the node (300 s): the gang evicts at 720 with no event
    # then, as a scheduler stepping every second would.
    jobs, queues = _reclaim_world()
    sim = _run(jobs, queues=queues, delay_s=120.0)
    assert sim.runs["b"].first_start == pytest.approx(720.0, abs=0.01)
    assert sim.metrics.summary["preemptions"] == 4


def test_without_an_autoscaler_the_delay_never_applies() -> None:
    jobs, queues = _reclaim_world()
    sim = _run(jobs, autoscale=None, queues=queues, delay_s=600.0)
    assert sim.runs["b"].first_start == 600 and not sim.ctl.cluster_grows


def test_sim_autoscale_writes_what_it_added(tmp_path: Path) -> None:
    rows = [f"0,7200,1,a,1,1Gi,50,1,,,a{i}" for i in range(8)] + ["600,1800,4,a,1,1Gi,50,1,,,new"]
    trace = write_csv(tmp_path / "t.csv", GENERIC_HEADER, rows)
    out = tmp_path / "out"
    args = ["sim", "--trace", str(trace), "--cluster", "1x8", "--policy", "default", "--out", str(out)]
    assert main([*args, "--autoscale", SHAPE, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["autoscale"] == SHAPE
    assert summary["policies"]["default"]["autoscale"]["nodes_added"] == 1
    assert "node-hours added" in (out / "report.html").read_text()
