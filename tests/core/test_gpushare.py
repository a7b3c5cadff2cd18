"""A task's charge on GPUs: one rule, the vectorised share the same as the scalar one."""

from __future__ import annotations

import numpy as np
import pytest

from kai_ray.core.model.gpushare import (
    device_share,
    device_shares,
    fixed_share,
    shares_device,
    usable_memory,
    whole_devices,
)
from kai_ray.core.model.snapshot import Request

GIB = 1024.0**3
MIB = 1024.0**2
MEMORY = np.array([0.0, 0.5, 1.0, 10 * GIB, 20 * GIB, 80 * GIB])


REQUESTS = {
    "whole": Request(gpu=2),
    "fraction": Request(gpu=0.25),
    "memory slice": Request(gpu_memory=20 * GIB),
    "slice above a device": Request(gpu_memory=100 * GIB),
    "no gpu": Request(cpu=1),
}


@pytest.mark.parametrize("request_", REQUESTS.values(), ids=REQUESTS.keys())
def test_the_vectorised_share_is_the_scalar_rule_device_by_device(request_: Request) -> None:
    shares = np.broadcast_to(device_shares(request_, MEMORY), MEMORY.shape)
    assert shares.tolist() == [device_share(request_, float(m)) for m in MEMORY]


def test_a_memory_slice_takes_its_part_of_a_device() -> None:
    piece = Request(gpu_memory=20 * GIB)
    assert device_share(piece, 80 * GIB) == 20 * 1024 / 81900  # of the usable memory (below)
    assert device_share(piece, 81900 * MIB) == device_share(piece, 80 * GIB)
    assert device_share(piece, 10 * GIB) > 1  # a device too small: fits none (KAI: an invalid portion)
    assert device_share(piece, 0.0) == 1.0  # a device of unknown memory: all of it
    assert fixed_share(piece) is None  # the device decides
    assert shares_device(piece) and whole_devices(piece) == 0.0
    assert piece.gpu_fraction(80 * GIB) == device_share(piece, 80 * GIB)


def test_a_device_s_usable_memory_is_floored_to_hundreds_of_mib_as_kai_reads_it() -> None:
    """KAI floors a node's GPU memory label to whole hundreds of MiB: on an 80 GiB device
    four 20 GiB slices overflow (81,920 > 81,900 MiB), three fit."""
    assert usable_memory(80 * GIB) == 81900 * MIB
    assert usable_memory(40 * GIB) == 40900 * MIB
    assert usable_memory(81900 * MIB) == 81900 * MIB  # already whole hundreds
    assert 4 * device_share(Request(gpu_memory=20 * GIB), 80 * GIB) > 1
    assert 3 * device_share(Request(gpu_memory=20 * GIB), 80 * GIB) <= 1


def test_fractions_and_whole_devices_take_the_same_on_every_device() -> None:
    half, two = Request(gpu=0.5), Request(gpu=2)
    assert (shares_device(half), whole_devices(half), fixed_share(half)) == (True, 0.0, 0.5)
    assert (shares_device(two), whole_devices(two), fixed_share(two)) == (False, 2, 2)
    assert device_share(half, 0.0) == device_share(half, 80 * GIB) == 0.5
