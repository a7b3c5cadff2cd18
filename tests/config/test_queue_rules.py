"""The queue rules are stated once (core.queues.resource_problem): a queue built in code
and the same queue written in a file are refused with the same words."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.config import ConfigError, parse_queues
from kai_ray.core import QueueInfo
from kai_ray.core.state.queues import QueueTreeError, build_queue_tree

CASES = [
    ({"quota": -2}, "resources.gpu.quota is -2; use a value >= 0, or -1 for the whole cluster"),
    ({"quota": 0, "limit": -3}, "resources.gpu.limit is -3; use a value >= 0, or -1 for no limit"),
    (
        {"quota": 4, "limit": 2},
        "resources.gpu.limit 2 is below its quota 4; "
        "raise the limit to at least the quota or lower the quota",
    ),
    (
        {"quota": 1, "overQuotaWeight": -1},
        "resources.gpu.overQuotaWeight is -1; use a value >= 0 (0: no share of what is left over)",
    ),
]


def _core_queue(gpu: dict[str, Any]) -> QueueInfo:
    return QueueInfo(
        "team",
        quota=(gpu.get("quota", 0), -1, -1),
        limit=(gpu.get("limit", -1), -1, -1),
        over_quota_weight=(gpu.get("overQuotaWeight", 1), 1, 1),
    )


@pytest.mark.parametrize(("gpu", "words"), CASES, ids=["quota", "limit", "limit-below-quota", "weight"])
def test_the_core_and_a_queue_file_refuse_a_bad_resource_in_the_same_words(
    gpu: dict[str, Any], words: str
) -> None:
    with pytest.raises(QueueTreeError) as in_core:
        build_queue_tree([_core_queue(gpu)])
    assert str(in_core.value) == f"queue 'team': {words}"
    with pytest.raises(ConfigError) as in_file:
        parse_queues([[{"name": "team", "resources": {"gpu": gpu}}]])
    assert words in str(in_file.value) and "queue 'team'" in str(in_file.value)
