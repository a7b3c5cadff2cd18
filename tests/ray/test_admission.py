"""Gang admission, fair share and reclaim between queues, on a real multi-node Ray cluster."""

from __future__ import annotations

import time
from typing import Any

import pytest

import kai_ray
from kai_ray.api.workloads import make_spec

from .conftest import Gate, gpu_node_ids, groups_of, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

TWO_QUEUES = [
    {"name": "a", "resources": {"gpu": {"quota": 6}, "cpu": {"quota": 6}}},
    {"name": "b", "resources": {"gpu": {"quota": 6}, "cpu": {"quota": 6}}},
]


def hold(gate: Any, key: str, children: int = 0) -> list[str]:
    """A workload body: start `children` GPU tasks (they land in the reservation), record
    their nodes, then wait until the test opens the gate."""

    @ray.remote(num_gpus=4, num_cpus=1)
    def child() -> str:
        # Hold the bundle until every child runs: one that finished early would free its
        # bundle for the next, and two children could share one node one after the other.
        ray.get(gate.record.remote(f"{key}/child"))
        deadline = time.time() + 30
        while time.time() < deadline:
            if sum(k == f"{key}/child" for k, _ in ray.get(gate.entries.remote())) >= children:
                break
            time.sleep(0.05)
        return str(ray.get_runtime_context().get_node_id())

    nodes = ray.get([child.remote() for _ in range(children)])
    gate.record.remote(key, nodes)
    while not ray.get(gate.is_open.remote(key)):
        time.sleep(0.05)
    return nodes


def states(sched: Any, ids: list[str]) -> list[str]:
    by_id = {w["id"]: w["state"] for w in sched.list()}
    return [by_id[i] for i in ids]


def submit_blocks(sched: Any, queue: str, n: int, gpus: float = 1, **kw: Any) -> list[str]:
    """Reservations with no code of ours running: queue-level behaviour without processes."""
    spec_args = {"resources_per_worker": {"GPU": gpus, "CPU": 0.1}, "grace_period": 0, **kw}
    return [sched.submit(make_spec(queue, kind="block", **spec_args)) for _ in range(n)]


def test_gang_is_admitted_whole_or_not_at_all(start_scheduler: Any) -> None:
    start_scheduler([{"name": "a", "resources": {"gpu": {"quota": -1}}}])
    gate = Gate.remote()
    big = kai_ray.workload(queue="a", workers=2, resources_per_worker={"GPU": 4, "CPU": 1})(hold)

    first = big.submit(gate, "first", 2)
    info = first.wait_admitted(timeout=30)
    assert info["state"] == "Running"
    # Pinned: each bundle on the node the core chose, and on two different nodes.
    (group,) = groups_of(first.id)
    assert sorted(group["bundles_to_node_id"].values()) == sorted(info["nodes"])
    assert len(set(info["nodes"])) == 2 and set(info["nodes"]) <= set(gpu_node_ids())
    # The body's child tasks ran inside the reservation, on its nodes.
    entries = wait_until(
        lambda: [v for k, v in ray.get(gate.entries.remote()) if k == "first"], what="children ran"
    )
    assert sorted(entries[0]) == sorted(info["nodes"])

    second = big.submit(gate, "second")  # 8 GPUs wanted, 4 free: must not start half
    wait_until(lambda: second.info()["reason"] != "waiting for the first scheduling cycle")
    time.sleep(1.0)  # a few cycles
    assert second.status() == "Queued"
    assert groups_of(second.id) == []  # nothing reserved for a gang that does not fit
    assert second.position() == 1

    ray.get(gate.release.remote("first"))
    assert sorted(first.result(timeout=30)) == sorted(info["nodes"])
    assert first.status() == "Succeeded"
    assert groups_of(first.id) == []  # released on success
    assert second.wait_admitted(timeout=30)["state"] == "Running"
    ray.get(gate.release.remote("second"))
    second.result(timeout=30)


def test_fair_share_splits_a_contended_cluster_between_two_queues(start_scheduler: Any) -> None:
    sched = start_scheduler(TWO_QUEUES)
    # Both queues line up in one call, so the first cycle sees all the demand at once.
    spec = {"resources_per_worker": {"GPU": 1, "CPU": 0.1}, "grace_period": 0, "kind": "block"}
    ids = sched.submit_many([make_spec(q, **spec) for q in ["a", "b"] * 12])
    a_ids, b_ids = ids[0::2], ids[1::2]

    def running(ids: list[str]) -> int:
        return sum(s == "Running" for s in states(sched, ids))

    wait_until(lambda: running(a_ids) + running(b_ids) == 12, what="cluster full again")
    time.sleep(1.5)  # stable: no queue takes from the other once both are at fair share
    assert (running(a_ids), running(b_ids)) == (6, 6)
    rows = {q["name"]: q for q in sched.queues()}
    assert rows["a"]["allocated"][0] == pytest.approx(6)
    assert rows["b"]["fair_share"][0] == pytest.approx(6)
    assert (rows["a"]["pending"], rows["b"]["pending"]) == (6, 6)


def test_queue_under_its_share_reclaims_from_one_over_it(start_scheduler: Any) -> None:
    sched = start_scheduler(TWO_QUEUES)
    a_ids = submit_blocks(sched, "a", 12)  # idle cluster: a may go beyond its quota of 6
    wait_until(lambda: states(sched, a_ids).count("Running") == 12, what="a uses all 12")

    b_ids = submit_blocks(sched, "b", 6)
    wait_until(lambda: states(sched, b_ids).count("Running") == 6, timeout=30, what="reclaim")
    a_states = states(sched, a_ids)
    assert a_states.count("Running") == 6
    assert a_states.count("Queued") == 6  # re-queued, not failed
    reclaimed = [sched.info(i) for i in a_ids if sched.info(i)["state"] == "Queued"]
    for w in reclaimed:  # the history says what happened; the reason says why it waits now
        assert w["preemptions"] == 1
        assert [h[2] for h in w["history"][-2:]] == ["Preempting", "Queued"]
        assert "reclaim" in w["history"][-1][3] and "re-queued" in w["history"][-1][3]
    # A victim's group is really gone from Ray, and its capacity serves b.
    assert all(groups_of(w["id"]) == [] for w in reclaimed)


def test_capacity_used_outside_kai_ray_is_not_offered(start_scheduler: Any) -> None:
    from ray.util.placement_group import placement_group, remove_placement_group

    sched = start_scheduler([{"name": "a", "resources": {"gpu": {"quota": -1}}}])
    busy = gpu_node_ids()[0]
    foreign = placement_group([{"GPU": 4}], bundle_label_selector=[{"ray.io/node-id": busy}])
    ray.get(foreign.ready(), timeout=30)
    time.sleep(1.5)  # the scheduler refreshes its view of the nodes every second

    pair = submit_blocks(sched, "a", 1, gpus=4, workers=2)[0]
    wait_until(lambda: states(sched, [pair]) == ["Running"], what=lambda: sched.info(pair))
    assert busy not in sched.info(pair)["nodes"]  # placed around the foreign group
    whole = submit_blocks(sched, "a", 1, gpus=4, workers=1)[0]
    time.sleep(1.0)
    info = sched.info(whole)
    assert info["state"] == "Queued" and info["attempt"] == 0  # no group left pending in Ray
    assert "GPU" in info["reason"]

    remove_placement_group(foreign)
    wait_until(lambda: states(sched, [whole]) == ["Running"], timeout=30, what=lambda: sched.info(whole))
    assert sched.info(whole)["nodes"] == [busy]
