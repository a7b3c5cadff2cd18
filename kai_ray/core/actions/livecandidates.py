"""Which of a shared list of candidates may still be taken, kept from one search to the
next (a cache behind the solver's rules: it changes what is looked at, never what is
decided).

A reclaim after a large allocate runs a search per reclaimer over the same candidates
(victimpool.SharedUnits), and each success takes the next candidates in victim order:
after a thousand reclaims, each queue's line of candidates begins with a thousand that
are gone, and each node-local bound (solver._solve_partial) first meets the nodes whose
candidates are all gone. Walking past them in every search made the action quadratic.
Here, per shared list, each queue line's first candidate that may be live, and per group
of candidates how many of its tasks may be taken, as the statement stands: brought up to
date from the tasks the statement changed since (its changed_tasks, undone changes
included), so that a candidate given back by a rollback counts again.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from kai_ray.core.actions.victims import Unit
from kai_ray.core.session.candidates import SharedUnits
from kai_ray.core.state.statement import Statement

__all__ = ["first_maybe_live", "groups_with_takeable"]


def first_maybe_live(stmt: Statement, units: Sequence[Unit], line: list[int]) -> int:
    """The first position in `line` (ascending places in `units`) whose unit may be
    taken (Unit.live): every one before it is not. 0 where `units` is not shared."""
    tracker = _tracker(units)
    if tracker is None:
        return 0
    tracker.sync(stmt)
    return tracker.line_start(line)


def groups_with_takeable(
    stmt: Statement, units: Sequence[Unit], groups: list[list[Unit]]
) -> Iterator[list[Unit]]:
    """Of `groups` (lists of units of `units`, kept with it), in order, those with a
    task that may be taken (Task.takeable); the others free nothing. All of them where
    `units` is not shared. Lazily: a caller that stops at the first that does reads
    no further."""
    tracker = _tracker(units)
    if tracker is None:
        return iter(groups)
    tracker.sync(stmt)
    return tracker.live_groups(groups)


def _tracker(units: Sequence[Unit]) -> _Tracker | None:
    if not isinstance(units, SharedUnits):
        return None
    got = units.derived.get("live_tracker")
    if got is None:
        got = units.derived["live_tracker"] = _Tracker(units)
    assert isinstance(got, _Tracker)
    return got


class _Tracker:
    def __init__(self, units: Sequence[Unit]) -> None:
        self.units = units
        self.place_of = {id(t): k for k, u in enumerate(units) for t in u.tasks}
        self.stmt: Statement | None = None
        self.seen = 0
        # Per line (by id): the line, and how many of its first units are not live.
        self.lines: dict[int, tuple[list[int], list[int]]] = {}
        # Per group list (by id): the list, each task's groups, each group's takeable
        # tasks, and whether each task was counted takeable.
        self.groups: dict[int, _Groups] = {}

    def sync(self, stmt: Statement) -> None:
        changed = stmt.changed_tasks
        if stmt is not self.stmt:
            self.stmt, self.seen = stmt, len(changed)
            self.lines.clear()
            self.groups.clear()
            return
        if self.seen == len(changed):
            return
        places = {k for t in changed[self.seen :] if (k := self.place_of.get(id(t))) is not None}
        self.seen = len(changed)
        if not places:
            return
        for line, start in self.lines.values():
            for k in places:  # a changed unit may be live again: walk from it
                at = bisect.bisect_left(line, k)
                if at < start[0] and line[at] == k:
                    start[0] = at
        for groups in self.groups.values():
            groups.recount(places)

    def line_start(self, line: list[int]) -> int:
        got = self.lines.get(id(line))
        if got is None or got[0] is not line:
            got = self.lines[id(line)] = (line, [0])
        start, units = got[1], self.units
        while start[0] < len(line) and not units[line[start[0]]].live():
            start[0] += 1
        return start[0]

    def live_groups(self, groups: list[list[Unit]]) -> Iterator[list[Unit]]:
        got = self.groups.get(id(groups))
        if got is None or got.groups is not groups:
            got = self.groups[id(groups)] = _Groups(self.units, groups, self.place_of)
        return got.live()


class _Groups:
    def __init__(self, units: Sequence[Unit], groups: list[list[Unit]], place_of: dict[int, int]) -> None:
        """`place_of`: each task's unit's place in `units` (by the task's id)."""
        self.units, self.groups = units, groups
        self.of_place: dict[int, list[int]] = {}
        self.counts = [0] * len(groups)
        self.counted: dict[int, bool] = {}
        self.first = 0  # every group before it has no takeable task
        for i, group in enumerate(groups):
            for u in group:
                self.of_place.setdefault(place_of[id(u.tasks[0])], []).append(i)
                for t in u.tasks:
                    if t.takeable:
                        self.counts[i] += 1
        for u in units:
            for t in u.tasks:
                self.counted[id(t)] = t.takeable

    def live(self) -> Iterator[list[Unit]]:
        counts, groups = self.counts, self.groups
        while self.first < len(groups) and not counts[self.first]:
            self.first += 1
        for i in range(self.first, len(groups)):
            if counts[i]:
                yield groups[i]

    def recount(self, places: set[int]) -> None:
        for k in places:
            mine = self.of_place.get(k)
            if not mine:
                continue
            for t in self.units[k].tasks:
                now = t.takeable
                if now != self.counted[id(t)]:
                    self.counted[id(t)] = now
                    for i in mine:
                        self.counts[i] += 1 if now else -1
                        if now and i < self.first:
                            self.first = i
