"""Queues per GPU type in queue files (docs/gpu-types.md, "Queues per type" and
"Fungibility"): kai-ray's extensions `resources.gpuTypes` and `gpuTypeFungibility`, read
in kai-ray's shapes and refused in KAI's own."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from kai_ray.config import ConfigError, parse_queues
from kai_ray.control.queues import queue_from_json
from kai_ray.core import (
    BORROW,
    PREEMPT,
    TRY_NEXT_TYPE,
    UNLIMITED,
    GpuTypeFungibility,
    GpuTypeShare,
    QueueInfo,
)
from kai_ray.core.state.queues import QueueTreeError, build_queue_tree

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


# ---------------------------------------------------------------- fungibility

FUNGIBLE = {"whenCanBorrow": "TryNextType", "whenCanPreempt": "Preempt"}


def test_fungibility_is_read_in_kai_rays_shapes_and_refused_in_kais() -> None:
    want = GpuTypeFungibility(when_can_borrow="TryNextType", when_can_preempt="Preempt")
    assert one([[{"name": "a", "gpuTypeFungibility": FUNGIBLE}]]).gpu_type_fungibility == want
    assert one([own("a", gpuTypeFungibility=FUNGIBLE)]).gpu_type_fungibility == want
    kube = {**kai("a", gpuTypeFungibility=FUNGIBLE), "apiVersion": "kai-ray.io/v2"}
    assert one([kube]).gpu_type_fungibility == want
    with pytest.raises(ConfigError, match="gpuTypeFungibility"):
        one([kai("a", gpuTypeFungibility=FUNGIBLE)])


def test_fungibility_unset_is_the_parents_and_at_the_top_the_defaults() -> None:
    queues = parse_queues(
        [
            [
                {"name": "org", "gpuTypeFungibility": {"whenCanPreempt": "Preempt"}},
                {"name": "team", "parentQueue": "org"},
                {"name": "other"},
            ]
        ]
    )
    tree = build_queue_tree(queues)
    modes = {name: tree.type_fungibility[i] for name, i in tree.index.items()}
    assert modes["team"] == GpuTypeFungibility(BORROW, PREEMPT)  # from org; its borrow the default
    assert modes["other"] == GpuTypeFungibility(BORROW, TRY_NEXT_TYPE)
    stored = queue_from_json(json.loads(json.dumps(dataclasses.asdict(queues[0]))))
    assert stored == queues[0]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"whenCanBorrow": "borrow"}, ["queue 'a'", "whenCanBorrow", "'Borrow'", "'TryNextType'"]),
        ({"whenCanPreempt": "TryNextFlavor"}, ["queue 'a'", "whenCanPreempt", "'Preempt'"]),
        ({"whenCanPrempt": "Preempt"}, ["queue 'a'", "whenCanPrempt"]),
    ],
)
def test_bad_fungibility_names_the_queue_the_field_and_the_choices(
    value: dict[str, str], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_queues([[{"name": "a", "gpuTypeFungibility": value}]])
    for w in words:
        assert w in str(caught.value), str(caught.value)


def test_the_core_refuses_a_fungibility_it_does_not_know() -> None:
    with pytest.raises(QueueTreeError, match=r"queue 'a': gpuTypeFungibility.whenCanPreempt = 'Always'; use"):
        build_queue_tree([QueueInfo("a", gpu_type_fungibility=GpuTypeFungibility(when_can_preempt="Always"))])
