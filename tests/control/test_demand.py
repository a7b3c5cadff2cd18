"""What an autoscaler is asked for: room for gangs that wait for room, never for work
held back by its queue."""

from __future__ import annotations

import dataclasses

import pytest

from kai_ray.control.demand import CAPACITY_CODES, HELD_CODES, autoscaler_bundles, wants_capacity
from kai_ray.core import REASON_CODES, QueueInfo, Reason
from tests.control.harness import make

UNLIMITED = -1.0


def test_every_reason_code_is_either_capacity_or_held() -> None:
    assert set(REASON_CODES) == CAPACITY_CODES | HELD_CODES
    assert not CAPACITY_CODES & HELD_CODES


@pytest.mark.parametrize(
    ("code", "wants"),
    [
        ("no-room", True),
        ("gang-too-big", True),
        ("node-selector", True),
        ("node-affinity", True),  # a node with the label the pod requires would let it start
        ("queue-limit", False),
        ("queue-quota", False),
        ("fair-share", False),
        ("invalid", False),
        ("gang-incomplete", False),
    ],
)
def test_wants_capacity(code: str, wants: bool) -> None:
    assert wants_capacity(Reason(code, "")) is wants


def test_a_gang_waiting_for_room_asks_for_itself_and_what_runs() -> None:
    h = make(nodes=1)  # one node of 4 GPUs
    h.submit("running", workers=1, resources_per_worker={"GPU": 4})
    h.at(1).step().at(2).step()
    h.submit("waiting", workers=2, resources_per_worker={"GPU": 2})
    h.at(3).step()
    assert h.w("waiting").reason_code in CAPACITY_CODES
    bundles = autoscaler_bundles(h.controller.workloads.values())
    assert sorted(b["GPU"] for b in bundles) == [2.0, 2.0, 4.0]  # the request is the whole cluster's


def test_work_held_by_its_queue_asks_for_nothing() -> None:
    queues = [QueueInfo("capped", quota=(0, UNLIMITED, UNLIMITED), limit=(1, UNLIMITED, UNLIMITED))]
    h = make(nodes=1, queues=queues)
    h.submit("held", queue="capped", workers=2, resources_per_worker={"GPU": 1})
    h.at(1).step()
    assert h.w("held").reason_code == "queue-limit"
    assert autoscaler_bundles(h.controller.workloads.values()) == []


def test_the_request_is_withdrawn_once_nothing_waits_for_room() -> None:
    h = make(nodes=1)
    h.submit("running", workers=1, resources_per_worker={"GPU": 4})
    h.at(1).step().at(2).step()
    h.submit("big", workers=1, resources_per_worker={"GPU": 4})
    h.at(3).step()
    assert autoscaler_bundles(h.controller.workloads.values())
    h.controller.cancel("big")
    assert autoscaler_bundles(h.controller.workloads.values()) == []


def test_gpu_types_ask_for_the_preferred_type_and_count_held_work_on_its_own() -> None:
    """docs/gpu-types.md: a gang waiting for room asks for its most preferred type; what
    runs is counted on the type of the node it holds."""
    h = make(nodes=1)
    h.cluster.node_list[0] = dataclasses.replace(h.cluster.node_list[0], gpu_type="H100")
    h.submit("running", workers=1, resources_per_worker={"GPU": 4})
    h.at(1).step().at(2).step()
    h.submit("waiting", workers=2, resources_per_worker={"GPU": 2}, accelerator_type=["A100", "H100"])
    h.submit("lacking", workers=1, resources_per_worker={"GPU": 1}, accelerator_type="L4")
    h.at(3).step()
    assert h.w("waiting").reason_code == "no-room"
    assert h.w("lacking").reason_code == "gpu-type"  # a node of its type would let it start
    bundles = autoscaler_bundles(h.controller.workloads.values(), h.controller.nodes)
    assert sorted(bundles, key=str) == sorted(
        [
            {"GPU": 4.0, "accelerator_type:H100": 0.001},
            {"GPU": 2.0, "accelerator_type:A100": 0.001},
            {"GPU": 2.0, "accelerator_type:A100": 0.001},
            {"GPU": 1.0, "accelerator_type:L4": 0.001},
        ],
        key=str,
    )
