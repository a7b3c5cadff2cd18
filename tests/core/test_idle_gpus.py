"""KAI's first check of an accumulated scenario (scenarios.fits_greedily, its
AccumulatedIdleGpus filter): the asks, largest first, each to the first of the nodes with
the most free GPUs that has room left; checked against the check as KAI words it, each
ask scanning the nodes from the top, on random nodes and gangs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_ray.core.actions.scenarios import fits_greedily

EPS = 1e-9


def _as_kai_words_it(free: np.ndarray, asks: list[float]) -> bool:
    top = np.sort(free)[::-1][: len(asks)]
    taken = np.zeros(len(top))
    for ask in asks:
        if ask <= EPS:
            return True
        for i, cap in enumerate(top):
            if cap < ask - EPS:
                return False
            if cap - taken[i] >= ask - EPS:
                taken[i] += ask
                break
        else:
            return False
    return True


GPUS = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 7.5, 8.0, 16.0])


@settings(max_examples=400, deadline=None)
@given(st.lists(GPUS, min_size=1, max_size=40), st.lists(GPUS, min_size=1, max_size=30))
def test_the_one_pass_fit_decides_as_the_scan_from_the_top(free: list[float], asks: list[float]) -> None:
    ordered = sorted(asks, reverse=True)
    assert fits_greedily(np.array(free), ordered) == _as_kai_words_it(np.array(free), ordered)


def test_a_gang_of_alike_tasks_fills_the_roomiest_nodes_first() -> None:
    free = np.array([8.0, 8.0, 16.0, 3.0])
    assert fits_greedily(free, [8.0] * 4)  # two on the 16, one on each 8
    assert not fits_greedily(free, [8.0] * 5)  # the node of 3 is too small for the fifth
    assert fits_greedily(free, [16.0, 8.0, 2.0])
    assert not fits_greedily(free, [16.0, 16.0])
