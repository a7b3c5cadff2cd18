"""What an empty cluster could hold, and the gangs that can never start there."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from kai_ray.core import (
    NEVER_FITS,
    UNLIMITED,
    ClusterSnapshot,
    EmptyRoom,
    JobInfo,
    NodeInfo,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    TopologyConstraint,
    empty_room,
    gang_never_fits,
    run_cycle,
)

GI = 1024.0**3
FOUR = Request(gpu=4)


def _node(name: str, gpus: int = 4, **more: object) -> NodeInfo:
    return NodeInfo(name, gpus, **more)  # type: ignore[arg-type]


@dataclass
class RoomCase:
    name: str
    nodes: list[NodeInfo]
    request: Request
    expect: EmptyRoom
    selector: dict[str, str] = field(default_factory=dict)
    spread: str = ""
    level: str | None = None


ROOM_CASES = [
    RoomCase("whole GPUs", [_node("a"), _node("b")], FOUR, EmptyRoom(2, 2, 8.0, 2000.0)),
    RoomCase(
        "nodes too small hold none", [_node("a"), _node("b", gpus=2)], FOUR, EmptyRoom(1, 1, 4.0, 1000.0)
    ),
    RoomCase(
        "the node selector and unschedulable nodes",
        [_node("a", labels={"z": "1"}), _node("b", labels={"z": "1"}, unschedulable=True), _node("c")],
        FOUR,
        EmptyRoom(1, 1, 4.0, 1000.0),
        selector={"z": "1"},
    ),
    RoomCase(
        "required spreading: one per node",
        [_node("a", gpus=8), _node("b", gpus=8)],
        FOUR,
        EmptyRoom(2, 2, 16.0, 2000.0),
        spread="required",
    ),
    RoomCase(
        "preferred spreading holds as many as without",
        [_node("a", gpus=8)],
        FOUR,
        EmptyRoom(2, 1, 8.0, 1000.0),
        spread="preferred",
    ),
    RoomCase(
        "a required level: the domain holding the most",
        [
            _node("a", labels={"rack": "r1"}),
            _node("b", labels={"rack": "r2"}),
            _node("c", labels={"rack": "r2"}),
        ],
        FOUR,
        EmptyRoom(2, 2, 8.0, 2000.0, "r2"),
        level="rack",
    ),
    RoomCase("a level no node has", [_node("a")], FOUR, EmptyRoom(0, 0, 0.0, 0.0), level="rack"),
    RoomCase(
        "the hostname level: each node its own domain, label or not",
        [_node("a", gpus=8), _node("b")],
        FOUR,
        EmptyRoom(2, 1, 8.0, 1000.0, "a"),
        level="kubernetes.io/hostname",
    ),
    RoomCase(
        "fractions: as many per device as fit",
        [_node("a", gpus=2)],
        Request(gpu=0.3),
        EmptyRoom(6, 1, 2.0, 1000.0),
    ),
    RoomCase(
        # KAI's floor: 81,900 of the 81,920 MiB are usable, so 3 slices of 20 GiB, not 4.
        "GPU memory: slices per device, none on devices too small",
        [_node("a", gpus=1, gpu_memory=80 * GI), _node("b", gpus=4, gpu_memory=16 * GI)],
        Request(gpu_memory=20 * GI),
        EmptyRoom(3, 1, 1.0, 1000.0),
    ),
    RoomCase(
        "cpu and memory bound too", [_node("a", cpu=6.0)], Request(gpu=1, cpu=4), EmptyRoom(1, 1, 4.0, 6.0)
    ),
    RoomCase(
        "an extended resource a node lacks",
        [_node("a", extended=(("x", 2.0),)), _node("b")],
        Request(extended=(("x", 1.0),)),
        EmptyRoom(2, 1, 4.0, 1000.0),
    ),
    RoomCase(
        "work outside the scheduler does not count: it may leave",
        [_node("a", used_outside=(("gpu", 4.0),))],
        FOUR,
        EmptyRoom(1, 1, 4.0, 1000.0),
    ),
    RoomCase("a request of nothing is unbounded", [_node("a")], Request(), EmptyRoom(None, 1, 4.0, 1000.0)),
]


@pytest.mark.parametrize("case", ROOM_CASES, ids=[c.name for c in ROOM_CASES])
def test_empty_room(case: RoomCase) -> None:
    got = empty_room(
        case.nodes, case.request, node_selector=case.selector, spread=case.spread, required_level=case.level
    )
    assert got == case.expect


def _job(count: int, request: Request = FOUR, **more: object) -> JobInfo:
    tasks = [TaskInfo(f"t{i}", TaskStatus.PENDING, request) for i in range(count)]
    return JobInfo("j", "q", tasks, **more)  # type: ignore[arg-type]


@dataclass
class GangCase:
    name: str
    nodes: list[NodeInfo]
    job: JobInfo
    expect: str | None  # None: it could fit


GANG_CASES = [
    GangCase("fits on the empty cluster", [_node("a"), _node("b")], _job(2), None),
    GangCase(
        "more tasks than the cluster holds",
        [_node("a"), _node("b")],
        _job(3),
        "gang of 3 tasks (4 GPUs each) cannot fit in this cluster as it is: even empty it holds at most "
        "2 such tasks (8 GPUs on 2 nodes); lower the gang size or add nodes",
    ),
    GangCase("only the gang counts, not the elastic surplus", [_node("a")], _job(3, min_member=1), None),
    GangCase(
        "required spreading over too few nodes",
        [_node("a", gpus=8)],
        _job(2, spread="required"),
        "gang of 2 tasks (4 GPUs each) cannot fit in this cluster as it is: even empty it holds at most "
        "1 such task, one per node (8 GPUs on 1 node); lower the gang size or add nodes",
    ),
    GangCase(
        "a required rack too small",
        [_node("a", labels={"rack": "r1"}), _node("b", labels={"rack": "r2"})],
        _job(2, topology=TopologyConstraint("dc", required="rack")),
        "gang of 2 tasks (4 GPUs each) cannot fit in this cluster as it is: even empty its largest rack "
        "(r1) holds at most 1 such task (4 GPUs on 1 node); lower the gang size or add nodes to a rack",
    ),
    GangCase(
        "a required level no node has",
        [_node("a")],
        _job(2, topology=TopologyConstraint("dc", required="rack")),
        "gang of 2 tasks (4 GPUs each) cannot fit in this cluster as it is: it must share one rack, but "
        "no matching node has the label rack",
    ),
    GangCase(
        "no node large enough for one task",
        [_node("a", gpus=2)],
        _job(1),
        "task (4 GPUs) cannot fit in this cluster as it is: no node it may run on is that large, even "
        "when empty; ask for less per task or add larger nodes",
    ),
    GangCase(
        "a mixed gang is checked request by request",
        [_node("a"), _node("b")],
        JobInfo(
            "j",
            "q",
            [TaskInfo("h", TaskStatus.PENDING, Request(cpu=1))]
            + [TaskInfo(f"w{i}", TaskStatus.PENDING, FOUR) for i in range(3)],
        ),
        "gang of 4 tasks (3 of them 4 GPUs each) cannot fit in this cluster as it is: even empty it holds "
        "at most 2 such tasks (8 GPUs on 2 nodes); lower the gang size or add nodes",
    ),
]


@pytest.mark.parametrize("case", GANG_CASES, ids=[c.name for c in GANG_CASES])
def test_gang_never_fits(case: GangCase) -> None:
    assert gang_never_fits(case.nodes, case.job) == case.expect


# The stable start of every such reason: what a gang is, then NEVER_FITS.
STABLE_START = re.compile(r"^(gang of \d+ tasks \(.+\)|task \(.+\)) " + re.escape(NEVER_FITS) + ": ")


@pytest.mark.parametrize("case", [c for c in GANG_CASES if c.expect], ids=lambda c: c.name)
def test_every_refusal_has_the_stable_start(case: GangCase) -> None:
    assert NEVER_FITS == "cannot fit in this cluster as it is"
    assert STABLE_START.match(gang_never_fits(case.nodes, case.job) or "")


@pytest.mark.parametrize("case", [c for c in GANG_CASES if c.expect], ids=lambda c: c.name)
def test_the_pending_reason_says_what_the_submit_check_says(case: GangCase) -> None:
    snap = ClusterSnapshot(case.nodes, [QueueInfo("q", quota=(UNLIMITED,) * 3)], [case.job])
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    assert result.pending_reasons["j"] == case.expect
