"""A worker node of a real multi-node Ray cluster is removed while workloads run on it:
they are re-queued with a reason that names the node, their reservations are gone, and
nothing is admitted twice; a node that joins with the same resources admits them again."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.api.workloads import make_spec

from .conftest import groups_of, wait_until
from .test_recovery import live_groups

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

SPOT = "spot"  # a custom resource only the removable node has: the workloads land there


def _states(sched: Any, ids: list[str]) -> list[str]:
    return [sched.info(w)["state"] for w in ids]


def test_removed_worker_node_requeues_its_workloads_and_admits_nothing_twice(
    ray_cluster: Any, start_scheduler: Any
) -> None:
    node = ray_cluster.add_node(num_cpus=2, num_gpus=2, resources={SPOT: 2})
    ray_cluster.wait_for_nodes()
    sched = start_scheduler([{"name": "a", "resources": {"gpu": {"quota": -1}}}])
    spec = make_spec("a", kind="block", resources_per_worker={"GPU": 1, "CPU": 0.1, SPOT: 1})
    ids = [sched.submit(spec) for _ in range(2)]
    wait_until(lambda: _states(sched, ids) == ["Running", "Running"], what="both running on the spot node")
    spot_id = node.node_id
    for wid in ids:
        (group,) = groups_of(wid)
        assert {b for b in group["bundles_to_node_id"].values()} == {spot_id}

    ray_cluster.remove_node(node)
    wait_until(
        lambda: _states(sched, ids) == ["Queued", "Queued"], timeout=60, what=lambda: _states(sched, ids)
    )
    for wid in ids:
        info = sched.info(wid)
        _, was, now, why = info["history"][-1]
        assert (was, now) == ("Running", "Queued")
        assert why == f"node {spot_id[:12]} left the cluster; re-queued", why
        # Waiting now for a node with the spot resource, and saying so.
        assert "1 spot" in info["reason"] and "cannot fit" in info["reason"], info["reason"]
        assert not groups_of(wid)  # the lost reservation is removed, not left to Ray to re-place
    assert not set(ids) & live_groups().keys()

    again = ray_cluster.add_node(num_cpus=2, num_gpus=2, resources={SPOT: 2})
    try:
        wait_until(lambda: _states(sched, ids) == ["Running", "Running"], timeout=60, what="admitted again")
        groups = live_groups()
        for wid in ids:
            info = sched.info(wid)
            assert groups[wid] == f"kai-ray/{wid}/{info['attempt']}"  # one live group, the new attempt
            (group,) = groups_of(wid)
            assert set(group["bundles_to_node_id"].values()) == {again.node_id}
            states = [h[2] for h in info["history"]]
            assert states.count("Running") == 2, states  # once before the loss, once after
        for wid in ids:
            sched.finish(wid, sched.info(wid)["attempt"], True)
    finally:
        ray_cluster.remove_node(again)
