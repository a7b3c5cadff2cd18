"""What the dashboard says of queues, workloads and devices, from a real controller on
in-memory ports (the real core decides): tables of named cases."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.control.views import share_standing
from kai_ray.core import QueueInfo, QueueStatus
from kai_ray.dashboard import DeviceShare, board_from_controller, device_layout, queue_rows

from ..control.harness import make

# ---------------------------------------------------------------- a queue's standing


def status(allocated: float, fair: float, requested: float) -> QueueStatus:
    return QueueStatus(
        deserved=(0.0, 0.0, 0.0),
        fair_share=(fair, 100.0, 1e12),
        allocated=(allocated, 1.0, 0.0),
        requested=(requested, 1.0, 0.0),
    )


@pytest.mark.parametrize(
    ("name", "st", "standing", "over"),
    [
        ("no cycle yet", None, "at", []),
        ("holds more than its fair share", status(6, 4, 6), "over", ["gpu"]),
        ("holds its share exactly", status(4, 4, 8), "at", []),
        ("wants more and holds less than its share", status(2, 4, 8), "under", []),
        ("holds less than its share, wants no more", status(2, 4, 2), "at", []),
    ],
)
def test_share_standing(name: str, st: QueueStatus | None, standing: str, over: list[str]) -> None:
    assert share_standing(st) == (standing, over), name


def test_queue_rows_are_a_tree_with_subtree_counts() -> None:
    queues = [
        QueueInfo("research"),
        QueueInfo("ops"),
        QueueInfo("team-a", parent="research"),
        QueueInfo("team-b", parent="research"),
    ]
    rows = queue_rows(queues, {}, {"team-a": (2, 1), "team-b": (1, 0), "ops": (0, 3)})
    assert [(r["name"], r["depth"]) for r in rows] == [
        ("research", 0),
        ("team-a", 1),
        ("team-b", 1),
        ("ops", 0),
    ]
    research = rows[0]
    assert research["children"] == ["team-a", "team-b"]
    assert (research["pending"], research["running"]) == (3, 1)
    assert rows[0]["resources"]["gpu"]["fair_share"] is None  # no cycle yet: nothing made up


# ---------------------------------------------------------------- devices


def used(devices: list[dict[str, Any]]) -> list[float]:
    return [d["used"] for d in devices]


@pytest.mark.parametrize(
    ("name", "gpus", "holdings", "outside", "expect_used", "expect_outside"),
    [
        (
            "whole GPUs take empty devices",
            4,
            [DeviceShare("a", "q", 2), DeviceShare("b", "q", 1)],
            0,
            [1, 1, 1, 0],
            [0] * 4,
        ),
        (
            "fractions share a device first",
            2,
            [DeviceShare("a", "q", 0.5), DeviceShare("b", "q", 0.25)],
            0,
            [0.75, 0],
            [0, 0],
        ),
        (
            "a fraction that does not fit opens the next",
            2,
            [DeviceShare("a", "q", 0.75), DeviceShare("b", "q", 0.5)],
            0,
            [0.75, 0.5],
            [0, 0],
        ),
        ("named devices are kept", 3, [DeviceShare("a", "q", 0.5, device=2)], 0, [0, 0, 0.5], [0, 0, 0]),
        ("outside use fills from the back", 4, [DeviceShare("a", "q", 1)], 2, [1, 0, 0, 0], [0, 0, 1, 1]),
    ],
)
def test_device_layout(
    name: str,
    gpus: int,
    holdings: list[DeviceShare],
    outside: float,
    expect_used: list[float],
    expect_outside: list[float],
) -> None:
    devices = device_layout(gpus, holdings, outside)
    assert used(devices) == pytest.approx(expect_used), name
    assert [d["outside"] for d in devices] == pytest.approx(expect_outside), name
    assert all(d["used"] + d["outside"] <= 1 + 1e-9 for d in devices), name


# ---------------------------------------------------------------- from a controller


def test_board_from_a_controller_shows_positions_reasons_and_preemptions() -> None:
    h = make(nodes=1, queues=[QueueInfo("a", quota=(-1, -1, -1))])  # one node of 4 GPUs
    h.submit("low", priority=50)
    h.at(1).step()
    h.submit("high", priority=125, preemptible=False)
    h.submit("later", priority=50)
    for t in range(2, 10):
        h.at(t).step()
    board = board_from_controller(h.controller, now=20.0)
    rows = {w["id"]: w for w in board.workloads}
    assert rows["high"]["state"] == "Running" and rows["high"]["gpus"] == 4
    low = rows["low"]
    assert low["state"] == "Queued" and low["preemptions"] == 1
    assert low["last_preemption"]["why"].startswith("preempt")
    assert any(step["to"] == "Preempting" for step in low["history"])
    assert (low["position"], low["queue_length"]) == (1, 2) and rows["later"]["position"] == 2
    assert low["waiting_s"] == pytest.approx(20.0 - h.w("low").queued_at)
    assert low["reason"] == h.w("low").reason
    node = board.nodes[0]
    assert node["gpu_used"] == 4 and [d["shares"][0]["workload"] for d in node["devices"]] == ["high"] * 4
    summary = board.summary()
    assert summary["workloads"] == {"Queued": 2, "Running": 1} and summary["gpus_used"] == 4
