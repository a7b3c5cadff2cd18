"""What a waiting job's reason says about GPU types (docs/gpu-types.md, rule 7): the
types it accepts or holds and what other types have free; nothing where the cluster
has one type."""

from __future__ import annotations

import pytest

from .builders import ClusterBuilder, cycle


def _two_types() -> ClusterBuilder:
    return ClusterBuilder().node("h0", gpus=8, gpu_type="H100").node("a0", gpus=8, gpu_type="A100")


CASES = {
    "accepts one type, another is free": (
        _two_types()
        .job("busy", "default", gpu=8, gpu_types=("H100",))  # H100 alone: nothing moves it
        .running("h0")
        .job("j", "default", gpu=4, gpu_types=("H100",))
        .pending(),
        "no-room",
        "no node has room now for even one task (free: 0 whole GPUs, largest free node has 0); "
        "this job accepts H100 only; 8 A100 GPUs are free",
    ),
    "accepts two types, a third is free": (
        _two_types()
        .node("l0", gpus=4, gpu_type="L4")
        .job("busy", "default", gpu=8)
        .running("h0")
        .running("a0")
        .job("j", "default", gpu=4, gpu_types=("H100", "A100"))
        .pending(),
        "no-room",
        "this job accepts H100 or A100 only; 4 L4 GPUs are free",
    ),
    "a gang of any type, room only across types": (
        _two_types()
        .job("busy", "default", gpu=4, priority="build")
        .running("h0")
        .running("a0")
        .job("j", "default", gpu=4)
        .pending(2),
        "no-room",
        "its gang runs on one GPU type; free: 4 H100, 4 A100 GPUs",
    ),
    "an elastic job grows on its type": (
        _two_types().job("e", "default", gpu=8, min_member=1).running("h0").pending(),
        "no-room",
        "no node has room now for even one task (free: 0 whole GPUs, largest free node has 0); "
        "its gang holds H100 (it grows on that type); 8 A100 GPUs are free",
    ),
    "a gang that fits only across types": (
        _two_types().job("j", "default", gpu=8).pending(2),
        "gang-too-big",
        "its gang runs on one GPU type",
    ),
    "a type the cluster lacks": (
        _two_types().job("j", "default", gpu=1, gpu_types=("L4",)).pending(),
        "gpu-type",
        "no schedulable node has a GPU type it accepts (L4); the nodes it may use have A100, H100",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_reason_names_the_types(name: str) -> None:
    cluster, code, words = CASES[name]
    waiting = cycle(cluster.build()).waiting
    reason = waiting["e" if "elastic" in name else "j"]
    assert reason.code == code, reason
    assert words in reason.text, reason.text


def test_one_type_says_nothing_of_types() -> None:
    cluster = ClusterBuilder().node("h0", gpus=8, gpu_type="H100").node("h1", gpus=8, gpu_type="H100")
    snap = (
        cluster.job("busy", "default", gpu=8).running("h0").running("h1").job("j", "default", gpu=4).pending()
    )
    reason = cycle(snap.build()).waiting["j"]
    assert "type" not in reason.text, reason.text
