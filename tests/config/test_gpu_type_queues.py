"""Queues per GPU type in queue files (docs/gpu-types.md, "Queues per type"): kai-ray's
extension `resources.gpuTypes`, read in kai-ray's shapes and refused in KAI's own."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.config import ConfigError, parse_queues
from kai_ray.control.queues import queue_from_json
from kai_ray.core import UNLIMITED, GpuTypeShare

from .test_queues import kai, one, own

TYPED = {
    "gpu": {"quota": 16, "limit": 24},
    "gpuTypes": {"H100": {"quota": 8, "limit": 12, "overQuotaWeight": 2}, "A100": {"quota": 4}},
}


def test_a_plain_list_reads_quota_limit_and_weight_per_type() -> None:
    queue = one([[{"name": "a", "resources": TYPED}]])
    assert queue.gpu_types == (
        GpuTypeShare("H100", 8.0, 12.0, 2.0),
        GpuTypeShare("A100", 4.0, UNLIMITED, None),
    )
    assert queue.quota[0] == 16  # the plain gpu figures stay the total


def test_kai_rays_documents_read_it_and_kais_own_shape_refuses_it() -> None:
    assert one([own("a", resources=TYPED)]).gpu_types[0].gpu_type == "H100"
    kube = {**kai("a", resources=TYPED), "apiVersion": "kai-ray.io/v2"}
    assert one([kube]).gpu_types[1] == GpuTypeShare("A100", 4.0, UNLIMITED, None)
    with pytest.raises(ConfigError, match="gpuTypes"):
        one([kai("a", resources=TYPED)])


def test_a_queue_without_types_has_none() -> None:
    assert one([[{"name": "a", "resources": {"gpu": {"quota": 4}}}]]).gpu_types == ()


def test_the_stored_form_round_trips() -> None:
    import dataclasses
    import json

    queue = one([[{"name": "a", "resources": TYPED}]])
    assert queue_from_json(json.loads(json.dumps(dataclasses.asdict(queue)))) == queue


@pytest.mark.parametrize(
    ("resources", "words"),
    [
        (
            {"gpu": {"quota": 8}, "gpuTypes": {"H100": {"quota": 8}, "A100": {"quota": 4}}},
            ["queue 'a'", "gpuTypes quotas add up to 12", "raise resources.gpu.quota to at least 12"],
        ),
        (
            {"gpu": {"quota": 8, "limit": 8}, "gpuTypes": {"H100": {"quota": 4, "limit": 10}}},
            ["queue 'a'", "gpuTypes.H100.limit = 10", "lower it to at most 8"],
        ),
        ({"gpuTypes": {"H100": {"quota": 8, "limit": 4}}}, ["queue 'a'", "gpuTypes.H100"]),
        ({"gpuTypes": {"H 100": {"quota": 1}}}, ["gpuTypes"]),
        ({"gpuTypes": {"H100": {"quota": 1, "limits": 2}}}, ["limits"]),
    ],
)
def test_bad_type_figures_name_the_queue_the_field_and_the_fix(
    resources: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_queues([[{"name": "a", "resources": resources}]])
    for w in words:
        assert w in str(caught.value), str(caught.value)
