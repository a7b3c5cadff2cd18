"""The scheduler's state machine without Ray: in-memory ports, the real core."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kai_ray.ray.engine import SchedulerEngine, SubmitError
from kai_ray.ray.workload import State, TransitionError, Workload

from .fakes import QUEUES, make, ray_node, spec


def test_transition_table_refuses_impossible_moves() -> None:
    w = Workload("w", spec(), created_at=0)
    w.move(State.ADMITTING, 1, "x")
    w.move(State.RUNNING, 2, "y")
    w.move(State.SUCCEEDED, 3, "z")
    with pytest.raises(TransitionError, match="Succeeded -> Admitting is not allowed"):
        w.move(State.ADMITTING, 4, "again")
    assert [h[2] for h in w.history] == ["Admitting", "Running", "Succeeded"]
    assert Workload.from_json(json.loads(json.dumps(w.to_json()))) == w


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"queue": "nope"}, "queue 'nope' does not exist; use one of: a, child"),
        ({"queue": "parent"}, "has child queues; submit to a leaf queue"),
        ({"resources_per_worker": {"GPU": 8}}, "largest node has GPU 4"),
        ({"resources_per_worker": {"GPU": 1.5}}, "above 1 a GPU count must be whole"),
        ({"strategy": "WHEREVER"}, "strategy='WHEREVER'"),
        ({"workers": 2, "min_workers": 3}, "min_workers <= workers"),
        ({"kind": "job"}, "a job needs an entrypoint"),
        # Two nodes of 4 GPUs: 3 workers of 4 GPUs can never start together.
        ({"workers": 3}, "gang of 3 tasks (4 GPUs, 1 CPU each) cannot fit in this cluster as it is"),
        ({"workers": 3, "strategy": "STRICT_SPREAD", "resources_per_worker": {"GPU": 1}}, "cannot fit"),
        ({"workers": 2, "strategy": "STRICT_PACK"}, "even empty one node holds at most 1 such task"),
    ],
)
def test_bad_workloads_are_refused_with_the_fix(kw: dict[str, Any], message: str) -> None:
    engine, _, _ = make()
    with pytest.raises(SubmitError, match=re.escape(message)):
        engine.submit("w", spec(**kw), 0)
    assert engine.workloads == {}


def test_work_outside_kai_ray_makes_a_worker_wait_not_fail() -> None:
    engine, backend, _ = make()
    # Every GPU is held by something kai-ray did not place (another user's actors).
    backend.available = lambda: {n["NodeID"]: {"CPU": 8.0, "GPU": 0.0} for n in backend.node_list}  # type: ignore[method-assign]
    engine.refresh_nodes()
    engine.submit("w", spec(), 0)  # fits an empty node: accepted
    engine.step(1)
    w = engine.workloads["w"]
    assert w.state is State.QUEUED and not backend.groups
    assert "no node has room now" in w.reason and "work outside the scheduler holds 8 GPUs" in w.reason
    with pytest.raises(SubmitError, match="largest node has GPU 4"):  # never fits: refused
        engine.submit("big", spec(resources_per_worker={"GPU": 8}), 0)
    backend.available = lambda: {}  # type: ignore[method-assign]
    engine.step(2)
    assert w.state is State.ADMITTING


def test_gang_bound_to_pinned_bundles_written_ahead_then_running() -> None:
    engine, backend, _ = make()
    engine.submit("w", spec(workers=2), 0)
    engine.step(1)
    w = engine.workloads["w"]
    assert w.state is State.ADMITTING
    (group,) = backend.groups.values()
    assert sorted(group["nodes"]) == ["n0", "n1"]  # one 4-GPU bundle per node
    assert group["bundles"] == [{"CPU": 1.0, "GPU": 4.0}] * 2
    assert backend.created_while_stored == [True]
    engine.step(2)
    assert w.state is State.RUNNING and engine.info("w")["group_id"] == "id-kai-ray/w/1"


def test_group_not_ready_in_time_is_released_and_requeued_with_the_reason() -> None:
    engine, backend, _ = make()
    backend.ready = False
    engine.submit("w", spec(admission_timeout=5), 0)
    engine.step(1)
    engine.step(10)
    w = engine.workloads["w"]
    assert backend.removed == ["kai-ray/w/1"]
    # Re-queued with the reason, and not tried again before its back-off (2 s) is over.
    assert [h[2] for h in w.history] == ["Queued", "Admitting", "Queued"]
    assert "not ready after 5s" in w.reason and "next try in 2s" in w.reason
    assert engine.next_deadline() == 12
    view = engine.info("w")
    assert view["position"] == 1 and view["retry_at"] == 12 and view["failed_admissions"] == 1
    engine.step(11)
    assert w.state is State.QUEUED and w.attempt == 1
    engine.step(12)  # a fresh group
    assert w.state is State.ADMITTING and w.attempt == 2 and list(backend.groups) == ["kai-ray/w/2"]
    # Failing again doubles the wait; success resets the count.
    engine.step(18)
    assert w.state is State.QUEUED and "next try in 4s" in w.reason and engine.next_deadline() == 22
    backend.ready = True
    engine.step(22)
    engine.step(23)
    assert w.state is State.RUNNING and w.failed_admissions == 0 and w.retry_at is None
    restored = Workload.from_json(json.loads(json.dumps(w.to_json())))
    assert restored.failed_admissions == 0 and restored.retry_at is None


def test_preemption_gives_notice_then_kills_and_requeues_or_fails() -> None:
    engine, backend, store = make(nodes=1)
    engine.submit("low", spec(grace_period=10), 0)
    engine.submit("low2", spec(grace_period=0, on_preempt="fail"), 0)
    engine.step(1)
    engine.step(2)
    assert engine.workloads["low"].state is State.RUNNING
    assert engine.register_runner("low", 1, "n0", 4242)
    engine.submit("high", spec(priority=125, preemptible=False), 3)
    engine.step(3)
    low = engine.workloads["low"]
    assert low.state is State.PREEMPTING and store.notices["low"]["deadline"] == 13
    assert backend.killed == [] and "kai-ray/low/1" in backend.groups  # grace period
    engine.step(12)
    assert low.state is State.PREEMPTING
    engine.step(13)
    assert low.state is State.QUEUED and "preempt" in low.history[-1][3]
    assert backend.killed == [("n0", 4242)] and "kai-ray/low/1" not in backend.groups
    assert "low" not in store.notices
    engine.step(14)
    engine.step(15)
    assert engine.workloads["high"].state is State.RUNNING
    # A late report from the preempted attempt changes nothing.
    engine.finish("low", 1, True, "", 16)
    assert low.state is State.QUEUED


def test_restart_reconciles_with_live_groups() -> None:
    engine, backend, store = make()
    engine.submit("kept", spec(), 0)
    engine.submit("lost", spec(), 0)
    engine.step(1)
    engine.step(2)
    assert {w.state for w in engine.workloads.values()} == {State.RUNNING}
    backend.groups.pop("kai-ray/lost/1")  # gone while the scheduler was down
    backend.groups["kai-ray/ghost/1"] = {"bundles": [], "nodes": []}  # never recorded
    fresh = SchedulerEngine(backend, store, QUEUES)
    fresh.load(3)
    assert fresh.workloads["kept"].state is State.RUNNING
    assert fresh.workloads["lost"].state is State.QUEUED
    assert "lost while the scheduler restarted" in fresh.workloads["lost"].reason
    assert "kai-ray/ghost/1" in backend.removed and "kai-ray/kept/1" in backend.groups


def test_cancel_releases_and_position_reports_the_line() -> None:
    engine, backend, _ = make(nodes=1)
    for name in ("first", "second", "third"):
        engine.submit(name, spec(), 0)
    engine.step(1)
    assert engine.info("second")["position"] == 1 and engine.info("third")["position"] == 2
    assert engine.info("third")["reason"]  # the core's reason it waits
    engine.cancel("first", 2)
    assert engine.workloads["first"].state is State.CANCELLED and backend.groups == {}
    engine.step(3)
    assert engine.workloads["second"].state is State.ADMITTING


def test_translation_of_ray_nodes_and_requests() -> None:
    from kai_ray.ray.gpus import summarize
    from kai_ray.ray.translate import bundle_for, node_info, request_for

    raw = ray_node("n9", gpus=8, rack="r1")
    raw["Resources"].update({"CPU_group_abc": 1, "bundle_group_abc": 1000, "fpga": 2})
    devices = [{"model": "H100", "memory": 80 * 2**30}, {"model": "H100", "memory": 40 * 2**30}]
    node = node_info(raw, summarize(devices))
    assert (node.gpus, node.cpu, node.gpu_model, node.gpu_memory) == (8, 8, "H100", 40 * 2**30)
    assert node.extended == (("fpga", 2.0),)  # Ray's bookkeeping resources dropped
    assert node.labels["rack"] == "r1" and node.labels["ray.io/node-id"] == "n9"
    req = request_for({"GPU": 0.5, "CPU": 2, "fpga": 1})
    assert (req.gpu, req.cpu, req.extended) == (0.5, 2, (("fpga", 1.0),))
    assert bundle_for(req, node) == {"fpga": 1, "CPU": 2, "GPU": 0.5}
    by_memory = request_for({"gpu_memory": 10 * 2**30})
    assert bundle_for(by_memory, node) == {"GPU": 0.25}  # 10 of the node's 40 GiB devices
    assert summarize([]) is None
