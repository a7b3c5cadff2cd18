"""Reclaim, preempt and consolidation with a cycle cache: their lines kept between
cycles, their failures kept while what they read holds, and settled key by key.

The reference (settling.each_waiting_gang without a cache) walks every waiting gang in
queue order, re-ranking queues after each, until all left are sure to fail. With a deep
backlog that walk is the cycle: most gangs wait for a reason that did not change. Here
the same decisions come from three caches:

- **The line, kept.** The cycle cache's waiting line keeps the incomplete gangs in job
  order and grouped by each action's search key (waitingline.py), patched as jobs come
  and go. An action takes it as it is, with the jobs this cycle touched taken out and,
  where they still wait as incomplete gangs, put back as they are now, and with the
  gangs that came with this cycle's patch (they join the kept line a cycle later).
- **Failures, kept** (outcomes.py): a failure found as the action began, with what it
  rests on; the same action of the next cycle starts knowing it if that is unchanged.
- **Settling by key.** Before walking, the action searches once for each key not known
  to fail, on its state as it began, one job standing for its key (a search leaves no
  trace, whatever it finds). If every key fails, nothing the action could do changes
  the state: each job would only be given its reason, in any order, so the action
  settles at once (settling.settle) without ranking a queue. If one would succeed, its
  trial is rolled back and the line is walked in order, knowing the failures found:
  they hold until room first moves. After each job that moved room, the keys of the
  rest are searched again the same way when there are many more jobs than keys.
- **A success found once.** Where the action allows it (`redoable`), a trial that moved
  room is kept as the operations it made (Statement.recorded) with the state it began
  on. When the walk steps that job on that same state, the operations are made again
  (Statement.redo) instead of searching again: the search would find exactly them.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from kai_ray.core.incremental.candidates import KeptCandidates
from kai_ray.core.incremental.outcomes import SearchOutcomes
from kai_ray.core.session.failedsearches import FailedSearches, FailureKey
from kai_ray.core.session.gangwalk import GangWalk
from kai_ray.core.session.jobqueues import JobQueues
from kai_ray.core.session.settling import every_key_fails, settle, walk
from kai_ray.core.session.suretofail import SureToFail
from kai_ray.core.session.waitingline import WaitingLine
from kai_ray.core.state.jobs import Job
from kai_ray.core.state.statement import Ops

if TYPE_CHECKING:
    from kai_ray.core.session.context import CycleContext

__all__ = ["KeptGangs"]

Step = Callable[[Job], object]
Quiet = Callable[[FailureKey], bool] | None

_LOOK = 32  # how far into each queue's line the probe looks for the jobs met first
_PROBE_WHEN = 4  # search key by key again after room moved when the line has this many jobs per key


class KeptGangs:
    def __init__(self, line: WaitingLine, outcomes: SearchOutcomes, victims: KeptCandidates) -> None:
        self.line, self.outcomes, self.victims = line, outcomes, victims

    def each_waiting_gang(self, ctx: CycleContext, walk_: GangWalk) -> None:
        action, failed, step, quiet = walk_.action, walk_.failed, walk_.step, walk_.quiet
        takes_from, verdicts, redoable = walk_.takes_from, walk_.verdicts, walk_.redoable
        view = _GangView(ctx, self.line, action)
        if view.empty():
            self.outcomes.nothing_waits(action)  # nothing to step, nothing found to keep
            return
        world = self.outcomes.world(ctx)
        keyed = {key: job for key, job in view.representatives().items() if key is not None}
        self.outcomes.seed(action, world, failed, keyed, takes_from, verdicts)
        if redoable:
            found = _FoundSuccesses(ctx, failed, step)
            moves, step = found.trial, found.step
        else:
            moves = functools.partial(_moves_room, failed, step)
        reps = view.probe_order(failed) if redoable else view.representatives().items()
        if every_key_fails(ctx, reps, failed, moves, keep_found=True):
            settle(ctx, view.incomplete(), view.groups(), failed, step, quiet)
        else:
            order, sure = view.walk(failed)

            def moved() -> bool:  # room moved: are all the rest sure to fail now?
                if len(sure.keys) < _PROBE_WHEN * len(sure.groups):
                    return False
                if not every_key_fails(ctx, sure.representatives(), failed, moves, keep_found=True):
                    return False
                settle(ctx, sure.incomplete.values(), sure.groups.items(), failed, step, quiet)
                return True

            walk(ctx, order, sure, step, quiet, moved, ctx.same_rank)
        self.outcomes.keep(action, world, failed)


def _moves_room(failed: FailedSearches, step: Step, job: Job) -> bool:
    """The step moved room: an evicting action forgets its failures when it does."""
    clears = failed.clears
    step(job)
    return failed.clears != clears


class _FoundSuccesses:
    """Trials that moved room, taken back, kept to be made again (see the module's doc):
    per job, the state they began on (Statement.state_mark) and the operations made."""

    def __init__(self, ctx: CycleContext, failed: FailedSearches, step: Step) -> None:
        self.stmt, self.failed, self.inner = ctx.stmt, failed, step
        self.found: dict[int, tuple[int, Ops]] = {}

    def trial(self, job: Job) -> bool:
        """The job's step, recorded: True when it moved room."""
        stmt, clears, mark = self.stmt, self.failed.clears, self.stmt.state_mark
        ops = stmt.recorded(functools.partial(self.inner, job))
        if self.failed.clears == clears:
            return False
        self.found[id(job)] = (mark, ops)
        return True

    def step(self, job: Job) -> None:
        found = self.found.pop(id(job), None)
        if found is not None and found[0] == self.stmt.state_mark:
            self.stmt.redo(found[1])
            self.failed.clear()  # room moved, as the step itself says it
        else:
            self.inner(job)


class _GangView:
    """The incomplete gangs waiting as an action begins: the kept line's, less the jobs
    this cycle touched (`gone`), plus those of them that wait as incomplete gangs now and
    those that came with this cycle's patch (`back`)."""

    def __init__(self, ctx: CycleContext, line: WaitingLine, action: str) -> None:
        self.ctx, self.line, self.action = ctx, line, action
        self.base = line.gang_keys(action)
        touched = ctx.stmt.touched_jobs
        self.gone = {
            id(job) for job in touched if id(job) in self.base.keys or id(job) in self.base.incomplete
        }
        # Back in line as they are now: the gangs it touched that still wait incomplete,
        # and those new this cycle (not in the kept line yet) that it has not touched.
        self.back = [job for job in touched if job.pending_count]
        self.back += [job for job in line.new() if job not in touched]
        self.extra = SureToFail(self.back, FailedSearches(), action)
        self._reps: dict[FailureKey | None, Job] | None = None
        self._groups: list[tuple[FailureKey | None, dict[str, Job]]] | None = None

    def empty(self) -> bool:
        base = self.base
        return len(base.keys) + len(base.incomplete) == len(self.gone) and not self.back

    def representatives(self) -> dict[FailureKey | None, Job]:
        """One job per search key in line (incomplete gangs aside)."""
        if self._reps is None:
            self._reps = {}
            for key, group in self.groups():
                if group and key not in self._reps:
                    self._reps[key] = next(iter(group.values()))
        return self._reps

    def probe_order(self, failed: FailedSearches) -> list[tuple[FailureKey | None, Job]]:
        """One job per key, in the order the walk would likely step them: the first of
        its key in its queue's line (as far as the first _LOOK tell), queue by queue as
        they would rank with their first job next; then the other keys'
        representatives. A success then found is most often the walk's first, made
        again rather than searched. Keys known to fail are not probed: with one other
        key at most, no order is needed. The order decides nothing: every key is tried
        on the same state."""
        reps = self.representatives()
        if sum(key is None or not failed.known(key) for key in reps) <= 1:
            return list(reps.items())
        ctx, keys, gone, extra = self.ctx, self.base.keys, self.gone, self.extra.keys
        ancestors, rank = ctx.state.tree.ancestors, ctx.rank
        back: dict[int, list[tuple[object, ...]]] = {}
        for job in self.back:
            back.setdefault(job.queue, []).append((*ctx.policy.job_order(job), job.order, job))
        first: dict[FailureKey | None, tuple[tuple[object, ...], Job]] = {}
        lines = self.line.gang_lines()
        for q in {*lines, *back}:
            entries = [entry for entry in lines.get(q, ())[:_LOOK] if id(entry[-1]) not in gone]
            if q in back:
                entries = sorted([*entries, *back[q]], key=lambda entry: entry[:-1])
            if not entries:
                continue
            # The queue's turn, by how it ranks with its first job next; then its line.
            turn = tuple(rank(a, entries[0][-1]) for a in reversed(ancestors[q]))
            for at, entry in enumerate(entries):
                job = entry[-1]
                # A job back in line is keyed as it is now (its old key may be in base).
                key = extra[id(job)] if id(job) in extra else keys.get(id(job))
                if key is not None and key not in first:  # None: not keyed, never probed
                    first[key] = ((*turn, at), job)
        ranked = sorted(first.items(), key=lambda item: item[1][0])
        rest = [(key, job) for key, job in reps.items() if key not in first]
        return [(key, job) for key, (_, job) in ranked] + rest

    def incomplete(self) -> list[Job]:
        base = [job for i, job in self.base.incomplete.items() if i not in self.gone]
        return [*base, *self.extra.incomplete.values()]

    def groups(self) -> list[tuple[FailureKey | None, dict[str, Job]]]:
        """The jobs in line by key: the kept line's (less those gone), then those back.
        Made once per view: a key of a thousand jobs is copied once, not per use."""
        if self._groups is None:
            keys = self.base.keys
            touched = {keys[i] for i in self.gone if i in keys}
            groups = [
                (key, {n: j for n, j in group.items() if id(j) not in self.gone} if key in touched else group)
                for key, group in self.base.groups.items()
            ]
            self._groups = [*groups, *self.extra.groups.items()]
        return self._groups

    def walk(self, failed: FailedSearches) -> tuple[JobQueues, SureToFail]:
        """The line in queue order, and its SureToFail counting `failed`."""
        ctx, entry_of = self.ctx, self.line.entry_of
        lines = {q: line.copy() for q, line in self.line.gang_lines().items()}
        sure = self.base.fork(failed)
        for job in self.ctx.stmt.touched_jobs:
            if id(job) in self.gone:
                entry = entry_of(job)
                assert entry is not None, "a gang in the kept line has its entry"
                line = lines[job.queue]
                at = bisect.bisect_left(line, entry)
                assert line[at] is entry, "a job's entry is where its key puts it"
                del line[at]
                sure.tried(job)
        key = ctx.policy.job_order
        for job in self.back:
            lines.setdefault(job.queue, []).append((*key(job), job.order, job))
            sure.add(job)
        for q in {job.queue for job in self.back}:
            lines[q].sort()
        return JobQueues(ctx.state, ctx.rank, lines, key, ctx.forget), sure
