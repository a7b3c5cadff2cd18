"""The grammar of reasons: counts agree with their nouns, levels read as people say them."""

from __future__ import annotations

import pytest

from kai_ray.core.model.snapshot import Request
from kai_ray.core.model.words import agree, count, describe_request, gang_words, level_noun, number

GI = 1024.0**3


@pytest.mark.parametrize(
    ("value", "noun", "expect"),
    [
        (1, "node", "1 node"),
        (2, "node", "2 nodes"),
        (0, "node", "0 nodes"),
        (1.0, "GPU", "1 GPU"),
        (0.5, "GPU", "0.5 GPU"),
        (1.5, "CPU", "1.5 CPUs"),
        (5000.0, "task", "5000 tasks"),
        (2_000_000.0, "CPU", "2000000 CPUs"),
        (3, "whole GPU", "3 whole GPUs"),
    ],
)
def test_count(value: float, noun: str, expect: str) -> None:
    assert count(value, noun) == expect


def test_agree_and_number() -> None:
    assert [agree(n, "has", "have") for n in (0, 1, 2)] == ["have", "has", "have"]
    assert [number(v) for v in (4.0, 0.25, 1 / 3)] == ["4", "0.25", "0.333333"]


@pytest.mark.parametrize(
    ("request_", "expect"),
    [
        (Request(gpu=1, cpu=1, memory=GI), "1 GPU, 1 CPU, 1Gi memory"),
        (Request(gpu=4, cpu=8), "4 GPUs, 8 CPUs"),
        (Request(gpu_memory=20 * GI), "20Gi of GPU memory"),
        (Request(extended=(("nvidia.com/mig", 2.0),)), "2 nvidia.com/mig"),
        (Request(), "no resources"),
    ],
)
def test_describe_request(request_: Request, expect: str) -> None:
    assert describe_request(request_) == expect


def test_gang_words() -> None:
    assert gang_words(3, Request(gpu=4)) == "gang of 3 tasks (4 GPUs each)"
    assert gang_words(1, Request(gpu=4)) == "task (4 GPUs)"
    assert gang_words(3, Request(gpu=4), alike=2) == "gang of 3 tasks (2 of them 4 GPUs each)"


@pytest.mark.parametrize(
    ("level", "expect"),
    [("ray.io/node-id", "node"), ("kubernetes.io/hostname", "node"), ("rack", "rack")],
)
def test_level_noun(level: str, expect: str) -> None:
    assert level_noun(level) == expect
