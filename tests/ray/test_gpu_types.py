"""GPU types on a real multi-node Ray cluster: two nodes of other types join the shared
cluster (whose own nodes have none: the default type), and each workload's reservation
lands on a node of a type it accepts, in its order of preference."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.api.workloads import make_spec

from .conftest import groups_of, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


def _nodes_of(wid: str) -> set[str]:
    (group,) = groups_of(wid)
    return set(group["bundles_to_node_id"].values())


def _running(sched: Any, wid: str) -> bool:
    return bool(sched.info(wid)["state"] == "Running")


def test_workloads_land_on_nodes_of_the_types_they_accept(ray_cluster: Any, start_scheduler: Any) -> None:
    h100 = ray_cluster.add_node(num_cpus=2, num_gpus=2, resources={"accelerator_type:H100": 1})
    a100 = ray_cluster.add_node(num_cpus=2, num_gpus=2, resources={"accelerator_type:A100": 1})
    try:
        ray_cluster.wait_for_nodes()
        sched = start_scheduler([{"name": "a", "resources": {"gpu": {"quota": -1}}}])
        # Work of any type fills the untyped nodes but one GPU each: binpacking alone would
        # put the next workloads there, the types they accept keep them off.
        filler = sched.submit(
            make_spec(
                "a",
                kind="block",
                workers=3,
                strategy="STRICT_SPREAD",
                resources_per_worker={"GPU": 3, "CPU": 0.1},
            )
        )
        wait_until(lambda: _running(sched, filler), what=lambda: sched.info(filler)["reason"])
        assert not _nodes_of(filler) & {h100.node_id, a100.node_id}
        worker = {"GPU": 1, "CPU": 0.1}
        gang = sched.submit(
            make_spec("a", kind="block", workers=2, resources_per_worker=worker, accelerator_type="H100")
        )
        wait_until(lambda: _running(sched, gang), what=lambda: sched.info(gang)["reason"])
        assert _nodes_of(gang) == {h100.node_id}
        # H100 first, but the H100 node is full: its second choice.
        second = sched.submit(
            make_spec("a", kind="block", resources_per_worker=worker, accelerator_type=["H100", "A100"])
        )
        wait_until(lambda: _running(sched, second), what=lambda: sched.info(second)["reason"])
        assert _nodes_of(second) == {a100.node_id}
        # Ray's way, by hand: the resource names the type and is not put in the bundle.
        by_hand = sched.submit(
            make_spec("a", kind="block", resources_per_worker={**worker, "accelerator_type:A100": 0.001})
        )
        wait_until(lambda: _running(sched, by_hand), what=lambda: sched.info(by_hand)["reason"])
        assert _nodes_of(by_hand) == {a100.node_id}
        (group,) = groups_of(by_hand)
        assert all("accelerator_type:A100" not in b for b in group["bundles"].values())
        for wid in (filler, gang, second, by_hand):
            sched.finish(wid, sched.info(wid)["attempt"], True)
    finally:
        ray_cluster.remove_node(h100)
        ray_cluster.remove_node(a100)
