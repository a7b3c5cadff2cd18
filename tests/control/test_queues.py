"""Changing a running scheduler's queues: apply adds or updates (kubectl style), removing
is explicit and refused while a queue or a child holds workloads. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kai_ray.control.queues import QueueChangeError, plan_apply, plan_delete
from kai_ray.core import QueueInfo

from .harness import make

DEPT = QueueInfo("dept")
TEAM_A = QueueInfo("team-a", parent="dept", quota=(4, 0, 0))
TEAM_B = QueueInfo("team-b", parent="dept", quota=(4, 0, 0))
OTHER = QueueInfo("other", quota=(2, 0, 0))
CURRENT = [DEPT, TEAM_A, TEAM_B, OTHER]


@dataclass
class Apply:
    name: str
    incoming: list[QueueInfo]
    prune: bool = False
    holders: dict[str, list[str]] = field(default_factory=dict)
    names: list[str] | None = None  # the tree after, in order
    summary: str = ""
    error: str = ""


APPLY = [
    Apply(
        "adds-new-keeps-the-rest",
        [QueueInfo("ml", quota=(8, 0, 0))],
        names=["dept", "team-a", "team-b", "other", "ml"],
        summary="added ml; kept dept, team-a, team-b, other",
    ),
    Apply(
        "updates-in-place",
        [QueueInfo("team-a", parent="dept", quota=(6, 0, 0)), TEAM_B],
        names=["dept", "team-a", "team-b", "other"],
        summary="updated team-a; unchanged team-b; kept dept, other",
    ),
    Apply(
        "prune-removes-what-the-file-does-not-name",
        [DEPT, TEAM_A],
        prune=True,
        names=["dept", "team-a"],
        summary="unchanged dept, team-a; removed team-b, other",
    ),
    Apply(
        "prune-refused-while-a-queue-holds-workloads",
        [DEPT, TEAM_A],
        prune=True,
        holders={"other": ["train-1", "train-2"]},
        error="queue 'other' still holds workloads (other: train-1, train-2); name it in the file",
    ),
    Apply(
        "prune-refused-while-a-child-holds-workloads",
        [OTHER],
        prune=True,
        holders={"team-b": ["w1"]},
        error="queue 'dept' still holds workloads (child team-b: w1)",
    ),
    Apply("empty-refused", [], error="no queues given; a queues file lists at least one queue"),
    Apply(
        "a-leaf-with-workloads-cannot-become-a-parent",
        [QueueInfo("sub", parent="other")],
        holders={"other": ["w1"]},
        error="queue 'sub': parent 'other' holds workloads (w1) and workloads run in leaf queues",
    ),
    Apply(
        "unknown-parent-refused",
        [QueueInfo("x", parent="nowhere")],
        error="queue 'x': parent 'nowhere' does not exist",
    ),
    Apply("twice-refused", [OTHER, OTHER], error="queue 'other': the name is used twice"),
]


@pytest.mark.parametrize("case", APPLY, ids=lambda c: c.name)
def test_apply(case: Apply) -> None:
    if case.error:
        with pytest.raises(QueueChangeError, match=case.error.replace("(", r"\(").replace(")", r"\)")):
            plan_apply(CURRENT, case.incoming, case.holders, prune=case.prune)
        return
    change = plan_apply(CURRENT, case.incoming, case.holders, prune=case.prune)
    assert [q.name for q in change.queues] == case.names
    assert change.summary() == case.summary


@dataclass
class Delete:
    name: str
    names: list[str]
    holders: dict[str, list[str]] = field(default_factory=dict)
    left: list[str] | None = None
    error: str = ""


DELETE = [
    Delete("an-empty-leaf", ["other"], left=["dept", "team-a", "team-b"]),
    Delete("a-parent-with-its-children", ["dept", "team-a", "team-b"], left=["other"]),
    Delete("a-parent-alone", ["dept"], error=r"queue 'dept' has child queues \(team-a, team-b\); delete"),
    Delete("unknown", ["nope"], error="queue 'nope' does not exist"),
    Delete(
        "holding-workloads",
        ["other"],
        holders={"other": ["a", "b", "c", "d"]},
        error="queue 'other' still holds workloads \\(other: a, b, c and 1 more\\); cancel them",
    ),
]


@pytest.mark.parametrize("case", DELETE, ids=lambda c: c.name)
def test_delete(case: Delete) -> None:
    if case.error:
        with pytest.raises(QueueChangeError, match=case.error):
            plan_delete(CURRENT, case.names, case.holders)
        return
    change = plan_delete(CURRENT, case.names, case.holders)
    assert [q.name for q in change.queues] == case.left and list(change.removed) == case.names


def test_the_controller_counts_queued_and_running_workloads_as_holders_not_finished_ones() -> None:
    h = make()
    h.submit("running", queue="child", resources_per_worker={"GPU": 1})
    h.submit("done", queue="a", resources_per_worker={"GPU": 1})
    h.at(1).step()
    h.at(2).step()
    h.controller.finish("done", 1, True)
    with pytest.raises(
        QueueChangeError, match="queue 'parent' still holds workloads \\(child child: running"
    ):
        h.controller.delete_queues(["parent", "child"])
    assert [q.name for q in h.controller.queues] == ["a", "parent", "child"]  # nothing changed
    change = h.controller.delete_queues(["a"])  # its only workload finished
    stored = h.store.data["queues"].value
    assert change.removed == ("a",) and [q["name"] for q in stored] == ["parent", "child"]  # type: ignore[index]
