"""Queue objects from the API server -> the queue tree, one bad Queue at a time."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.k8s.queues import read_queues


def queue(
    name: str,
    *,
    parent: str | None = None,
    gpu: float = 1,
    limit: float = -1,
    created: str = "",
    api: str = "kai-ray.io/v2",
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {"gpu": {"quota": gpu, "limit": limit}, "cpu": {"quota": 2000}},
        **extra,
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": api,
        "kind": "Queue",
        "metadata": {
            "name": name,
            "creationTimestamp": created or "2026-01-01T00:00:00Z",
            "resourceVersion": "7",
            "uid": f"uid-{name}",
        },
        "spec": spec,
        "status": {"allocated": {"gpu": 1}},
    }


def test_kai_units_are_read_and_server_fields_are_ignored() -> None:
    result = read_queues([queue("a", api="scheduling.run.ai/v2"), queue("b", parent="a")])
    assert result.problems == {}
    by_name = {q.name: q for q in result.queues}
    assert by_name["a"].quota[1] == pytest.approx(2.0)  # 2000 millicores
    assert by_name["b"].parent == "a"


@pytest.mark.parametrize(
    ("objects", "bad", "words"),
    [
        pytest.param(
            [queue("a"), queue("b", parent="nowhere")],
            "b",
            "parent 'nowhere' does not exist",
            id="unknown-parent",
        ),
        pytest.param([queue("a", parent="b"), queue("b", parent="a"), queue("c")], "a", "cycle", id="cycle"),
        pytest.param(
            [queue("a", gpu=3, limit=1), queue("c")], "a", "below its quota", id="limit-below-quota"
        ),
        pytest.param([queue("a", priority="high"), queue("c")], "a", "priority", id="bad-field"),
    ],
)
def test_a_bad_queue_is_left_out_with_its_reason_and_the_others_kept(
    objects: list[dict[str, Any]], bad: str, words: str
) -> None:
    result = read_queues(objects)
    assert bad in result.problems
    assert words in result.problems[bad]
    assert f"queue {bad!r}" in result.problems[bad]
    assert "c" in {q.name for q in result.queues} or "a" in {q.name for q in result.queues}
    assert bad not in {q.name for q in result.queues}


def test_children_of_a_bad_queue_are_left_out_too() -> None:
    result = read_queues([queue("top", gpu=3, limit=1), queue("leaf", parent="top"), queue("other")])
    assert [q.name for q in result.queues] == ["other"]
    assert "top" in result.problems and "leaf" in result.problems
