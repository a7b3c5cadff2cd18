"""The queue order's last criteria (policy.TieBreak): smaller allocatable share first
where one is smaller in some resource and larger in none, else the older queue; each
pair's answer kept with the fair shares it was read from (ShareRows.tie_order)."""

from __future__ import annotations

import pytest

from kai_ray.core.rules.hooks import ShareRows
from kai_ray.core.rules.policy import TieBreak


def _rows(*allocatable: list[float]) -> ShareRows:
    rows = [list(a) for a in allocatable]
    return ShareRows(rows, rows, rows, [100.0, 100.0, 100.0], rows)


@pytest.mark.parametrize(
    ("name", "first", "second", "first_wins"),
    [
        ("smaller in one resource, larger in none", [1.0, 2.0, 2.0], [2.0, 2.0, 2.0], True),
        ("larger in one resource, smaller in none", [3.0, 2.0, 2.0], [2.0, 2.0, 2.0], False),
        ("neither smaller: the older queue", [3.0, 1.0, 2.0], [2.0, 2.0, 2.0], True),
        ("the same shares: the older queue", [2.0, 2.0, 2.0], [2.0, 2.0, 2.0], True),
    ],
)
def test_a_full_tie_goes_to_the_smaller_share_then_the_older_queue(
    name: str, first: list[float], second: list[float], first_wins: bool
) -> None:
    rows = _rows(first, second)
    older, younger = TieBreak(rows, 0), TieBreak(rows, 1)
    for _ in range(2):  # asked again: the kept answer is the same
        assert (older < younger) is first_wins, name
        assert (younger < older) is (not first_wins and first != second), name
    assert rows.tie_order == {(0, 1): first_wins, (1, 0): not first_wins and first != second}


def test_shares_of_two_cycles_are_compared_by_their_figures() -> None:
    # A heap never mixes cycles, but a comparison across them still reads the figures.
    now, then = _rows([1.0, 1.0, 1.0]), _rows([5.0, 5.0, 5.0], [2.0, 2.0, 2.0])
    assert TieBreak(now, 0) < TieBreak(then, 1)
    assert not TieBreak(then, 1) < TieBreak(now, 0)
    assert not now.tie_order and not then.tie_order
