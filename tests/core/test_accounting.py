"""Which tasks count toward their queue: one rule for the full build and the cache."""

from __future__ import annotations

import pytest

from kai_ray.core.model.snapshot import TaskStatus
from kai_ray.core.state.accounting import QueueCount, queue_count


@pytest.mark.parametrize(
    ("status", "on_node", "counted"),
    [
        (TaskStatus.PENDING, False, QueueCount.REQUESTED),
        (TaskStatus.RUNNING, True, QueueCount.ALLOCATED),
        (TaskStatus.PIPELINED, True, QueueCount.ALLOCATED),
        (TaskStatus.RELEASING, True, QueueCount.NOTHING),  # releasing tasks do not count
        (TaskStatus.RUNNING, False, QueueCount.NOTHING),  # on a node the cluster no longer has
        (TaskStatus.SUCCEEDED, False, QueueCount.NOTHING),
        (TaskStatus.FAILED, False, QueueCount.NOTHING),
    ],
)
def test_what_a_task_counts_toward_its_queue(status: TaskStatus, on_node: bool, counted: QueueCount) -> None:
    assert queue_count(status, on_node) is counted
