"""Failed searches: one rule for "an equivalent search already failed in this cycle: skip it".

A search that fails (a gang that does not fit the free room; a victim search that finds no
victims) fails again for another job with the same inputs while the state is unchanged.
Every action skips such repeats, which is what keeps a cycle with tens of thousands of
waiting jobs fast. The key must hold *every* input of the search, or a job that differs
in one of them is skipped wrongly: one key for all actions, built here.

A cache per action and cycle: allocate only ever takes room, so its failures stand for
the whole action; the actions that evict clear theirs on every success (room moved).

A failure may also say what it rests on (`Grounds`), so that a cycle cache can carry it
into the next cycle while those grounds hold (incremental/outcomes.py); a failure with
no grounds is forgotten with its cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kai_ray.core.model.snapshot import Reason
from kai_ray.core.state.jobs import Job, Task

__all__ = ["FailedSearches", "FailureKey", "Grounds", "search_key", "victim_inputs"]

FailureKey = tuple[object, ...]


class Grounds:
    """What a failed victim search read, besides its key: what must not change for it to
    fail again in a later cycle. Time is never among them: a failure in which min runtime
    protected a candidate has no grounds (it may succeed once the runtime passed)."""

    NODES = "nodes"  # the key alone decides it (no node the job may use; never moved for)
    SHARE = "share"  # the queue's standing alone turned the job away (its fair share)
    ROOM = "room"  # the free room alone (no candidate was looked at)
    NO_VICTIMS = "no-victims"  # no candidate passed the job's filter, and the free room
    NONE_ALLOWED = "none-allowed"  # the standings allowed no candidate, and the free room
    VICTIMS = "victims"  # the free room, the candidates and every queue's standing
    # No room even with every candidate it could take gone, or no room found by a search
    # that reads no standings as it evicts: the free room, the candidates, and the
    # verdicts on them that read the standings (grounds: (VERDICTS, the verdicts)).
    VERDICTS = "verdicts"


def _free_room(job: Job) -> tuple[object, ...]:
    # Allocate checks the queue's limit and quota before looking the key up, and places
    # on free room, less the GPU types whose per-type limit (or, for non-preemptible
    # work, quota) the gang would pass: that check (TypedQueues.blocked) reads the queue
    # and the job's preemptibility, wherever some queue names a type.
    return (job.queue, job.info.preemptible) if job.limits_by_type else ()


def _moves(job: Job) -> tuple[object, ...]:
    # Consolidation moves any preemptible job, whatever the queue, for a preemptible job
    # whose queue may grow by the gang (the queue's checks come after the key).
    return (job.queue, job.info.preemptible)


def _own_queue_below(job: Job) -> tuple[object, ...]:
    # Preempt: victims of the job's queue below its priority; checks on that queue.
    return (job.queue, job.info.priority, job.info.preemptible)


def _other_queues(job: Job) -> tuple[object, ...]:
    # Reclaim: victims of other queues, allowed by the sides' shares (queue), the
    # reclaimer's fair share and quota (preemptibility).
    return (job.queue, job.info.preemptible)


# What, besides placement, decides each action's search: whose work it may take, and the
# checks on the job's queue that the search itself makes. A policy whose eligibility
# hooks read more of the pending job than this must add it here (the contract: Policy).
_VICTIM_INPUTS: dict[str, Callable[[Job], tuple[object, ...]]] = {
    "allocate": _free_room,
    "consolidation": _moves,
    "preempt": _own_queue_below,
    "reclaim": _other_queues,
}


def victim_inputs(job: Job, action: str) -> tuple[object, ...]:
    """What of the pending job decides the action's eligibility hooks (whose work it
    may take): the part of its search key after placement."""
    return _VICTIM_INPUTS[action](job)


def search_key(
    job: Job, tasks: Sequence[Task] | Callable[[], Sequence[Task]], action: str, n: int = -1
) -> FailureKey:
    """Every input of placing `tasks` (what the job still misses of its gang) for `job`
    in `action`, besides the cycle's state: the requests and their number, the gang (its
    minMember; a job whose gang is all its tasks places exactly that many; with
    subgroups, their minimums and each task's subgroup), the node selector, the required
    node affinity (the job's, or each task's where its tasks differ), the topology
    constraint, the spreading, the GPU types it accepts, and the action's own inputs.
    A job with active tasks is keyed by itself: where they run shapes the search (its
    topology domain, its spread, its own tasks never being its victims).
    `tasks` may be a callable returning them, with `n` their number: then a key kept
    on the job is found without listing its tasks."""
    fixed = job.uniform and not job.active_count
    if not fixed:
        return _search_key(job, tasks() if callable(tasks) else tasks, action)
    memo = (action, n if callable(tasks) else len(tasks))
    keys = job.keys
    if keys is None:
        keys = job.keys = {}
    else:
        known = keys.get(memo)
        if known is not None:
            return known
    key = keys[memo] = _search_key(job, tasks() if callable(tasks) else tasks, action)
    return key


def _search_key(job: Job, tasks: Sequence[Task], action: str) -> FailureKey:
    first = tasks[0].demand if tasks else None
    if job.uniform or all(t.demand is first for t in tasks):
        shapes: object = ("alike", id(first), len(tasks))  # demands are shared per request
    else:
        shapes = ("mixed", *(id(t.demand) for t in tasks))
    info = job.info
    own = id(job) if job.active_count else 0
    affinity = tuple(t.info.node_affinity for t in tasks) if job.per_task else job.affinity
    placement: FailureKey = (
        shapes,
        info.min_member,
        job.active_count,
        own,
        job.selector,
        affinity,
        info.topology,
        info.spread,
        info.gpu_types,
        info.mixed_gpu_types,
        job.first_type_only,
    )
    if info.subgroups:  # a failure's reason names the subgroup that did not fit: which is which
        placement += (tuple(info.subgroups.items()), tuple(t.info.subgroup for t in tasks))
    return (*placement, *victim_inputs(job, action))


class FailedSearches:
    """The failed searches of one action in this cycle, with the reason each ended on (so a
    skipped job reads the same). Disabled, it remembers nothing: every search runs."""

    __slots__ = ("_failed", "_said_on", "added", "clears", "enabled", "first", "grounds", "keeps_grounds")

    def __init__(self, enabled: bool = True, keeps_grounds: bool = False) -> None:
        self.enabled = enabled
        # Whether a cycle cache will keep these failures (and read their grounds): made
        # by the session (CycleContext.failed_searches), which alone knows.
        self.keeps_grounds = keeps_grounds
        self._failed: dict[FailureKey, Reason | None] = {}
        # The state each failure's words were said on (Statement.state_mark), where they
        # read it (free room in figures): a look-alike met on another state fails alike,
        # but its words are said anew (said_on, restate).
        self._said_on: dict[FailureKey, int] = {}
        self.added: list[FailureKey] = []  # keys in the order they failed, since the last clear
        self.clears = 0
        # Why each failure holds, for those a later cycle may keep (Grounds).
        self.grounds: dict[FailureKey, object] = {}
        # The failures as the action began, before room first moved (None: not moved yet).
        self.first: dict[FailureKey, tuple[Reason | None, object]] | None = None

    def known(self, key: FailureKey) -> bool:
        return key in self._failed

    def any_failed(self) -> bool:
        """Whether any search is known to fail (none: no key need be looked up)."""
        return bool(self._failed)

    def reason(self, key: FailureKey) -> Reason | None:
        return self._failed.get(key)

    def add(
        self, key: FailureKey, reason: Reason | None, grounds: object = None, said_on: int | None = None
    ) -> None:
        if self.enabled:
            if said_on is not None:
                self._said_on[key] = said_on
            if key not in self._failed:
                self.added.append(key)
            self._failed[key] = reason
            if grounds is not None:
                self.grounds[key] = grounds
            else:
                self.grounds.pop(key, None)

    def said_on(self, key: FailureKey) -> int | None:
        """The state the failure's words were said on; None: words that read no state."""
        return self._said_on.get(key)

    def restate(self, key: FailureKey, reason: Reason, mark: int) -> None:
        """The same failure, its words said on the state `mark` names."""
        if key in self._failed:
            self._failed[key] = reason
            self._said_on[key] = mark

    def add_grounded(self, key: FailureKey, reason: Reason | None, grounds: Callable[[], object]) -> None:
        """add, with grounds worked out only where a cycle cache keeps them (a victim
        search's verdicts cost more than the failure itself)."""
        self.add(key, reason, grounds() if self.keeps_grounds else None)

    def clear(self) -> None:
        """Room moved (a search succeeded): an earlier failure may succeed now."""
        if self.first is None:
            self.first = self.at_start()
        self._failed.clear()
        self._said_on.clear()
        self.added.clear()
        self.grounds.clear()
        self.clears += 1

    def at_start(self) -> dict[FailureKey, tuple[Reason | None, object]]:
        """The failures with grounds found while the state was the action's first."""
        if self.first is not None:
            return self.first
        return {key: (self._failed[key], g) for key, g in self.grounds.items()}

    def restore(
        self,
        saved: dict[FailureKey, tuple[Reason | None, object]],
        first: dict[FailureKey, tuple[Reason | None, object]] | None,
    ) -> None:
        """Room moved back (a trial rolled back): know exactly these failures again, and
        `first` as it was before the trial. Counts as a clear: what was derived since is
        forgotten."""
        self._failed.clear()
        self._said_on.clear()
        self.added.clear()
        self.grounds.clear()
        self.clears += 1
        self.first = first
        for key, (reason, grounds) in saved.items():
            self.add(key, reason, grounds)

    def saved(self) -> dict[FailureKey, tuple[Reason | None, object]]:
        return {key: (reason, self.grounds.get(key)) for key, reason in self._failed.items()}
