"""Ray's placement strategies under kai-ray: PACK stacks workers (binpack), SPREAD and
STRICT_SPREAD put each worker on a node of its own, checked against Ray's own record."""

from __future__ import annotations

from typing import Any

import pytest

import kai_ray
from kai_ray.api.workloads import make_spec

from .conftest import GPU_NODES, groups_of, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

ONE_QUEUE = [{"name": "a", "resources": {"gpu": {"quota": -1}, "cpu": {"quota": -1}}}]


def _admit(sched: Any, strategy: str, workers: int) -> str:
    return str(
        sched.submit(
            make_spec(
                "a",
                kind="block",
                workers=workers,
                strategy=strategy,
                grace_period=0,
                resources_per_worker={"GPU": 1, "CPU": 0.1},
            )
        )
    )


def _ray_nodes(wid: str) -> set[str]:
    """The nodes Ray reserved the workload's bundles on."""
    return {n for g in groups_of(wid) for n in g["bundles_to_node_id"].values()}


@pytest.mark.parametrize(("strategy", "distinct"), [("PACK", 1), ("SPREAD", 3), ("STRICT_SPREAD", 3)])
def test_strategy_decides_how_many_nodes_the_workers_use(
    start_scheduler: Any, strategy: str, distinct: int
) -> None:
    sched = start_scheduler(ONE_QUEUE)
    wid = _admit(sched, strategy, workers=3)
    wait_until(lambda: sched.info(wid)["state"] == "Running", what=lambda: sched.info(wid))
    nodes = sched.info(wid)["nodes"]
    assert len(nodes) == 3 and len(set(nodes)) == distinct
    wait_until(lambda: _ray_nodes(wid) == set(nodes), what=lambda: (_ray_nodes(wid), nodes))


def test_strict_spread_waits_for_a_node_per_worker_and_says_so(start_scheduler: Any) -> None:
    sched = start_scheduler(ONE_QUEUE)
    # More workers than GPU nodes can never spread one per node: refused at submit.
    with pytest.raises(kai_ray.SubmitError, match=r"cannot fit in this cluster as it is.*one per node"):
        _admit(sched, "STRICT_SPREAD", workers=GPU_NODES + 1)
    full = _admit(sched, "PACK", workers=4)  # one node's 4 GPUs
    wait_until(lambda: sched.info(full)["state"] == "Running", what=lambda: sched.info(full))
    wid = _admit(sched, "STRICT_SPREAD", workers=GPU_NODES)
    wait_until(
        lambda: "must spread one task per node" in sched.info(wid)["reason"], what=lambda: sched.info(wid)
    )
    assert sched.info(wid)["state"] == "Queued" and not groups_of(wid)
    sched.cancel(wid)
    # SPREAD is a preference, as even as the room allows: 4 workers on the 2 free nodes, 2 + 2.
    loose = _admit(sched, "SPREAD", workers=4)
    wait_until(lambda: sched.info(loose)["state"] == "Running", what=lambda: sched.info(loose))
    nodes = sched.info(loose)["nodes"]
    assert sorted(nodes.count(n) for n in set(nodes)) == [2, 2]
    wait_until(lambda: _ray_nodes(loose) == set(nodes), what=lambda: (_ray_nodes(loose), nodes))
