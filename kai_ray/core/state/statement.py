"""A transactional statement over the cycle's state: place, evict, checkpoint, rollback.

Every action changes the state only through a Statement. A victim search or a gang
placement that fails rolls back to its checkpoint and leaves no trace; the decisions of
the cycle are read off the tasks at the end (see cycle.py), so only what survived is
ever emitted. Why a job still waits is state of the cycle too, kept here: a search that
is rolled back takes back what it said about the job (see set_reason).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from kai_ray.core.model.snapshot import Reason, TaskStatus
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import EPS, Device, FloatArray

__all__ = ["Ops", "Statement"]

Undo = Callable[[], None]
# Operations as made: (method name, arguments), to make again on the same state (redo).
Ops = list[tuple[str, tuple[Any, ...]]]
_Logged = list[tuple[int, str, tuple[Any, ...]]]  # each with the undo steps before it


class Statement:
    def __init__(self, state: ClusterState, *, undoable_cycle: bool = False) -> None:
        """`undoable_cycle`: keep what commit() lets go of, so that undo_cycle() can take
        the whole cycle back (a state kept between cycles, see incremental/)."""
        self.state = state
        self._undo: list[Undo] = []
        self._committed: list[Undo] | None = [] if undoable_cycle else None
        self.pipelined = 0  # placements onto releasing capacity that stand (undo takes back)
        # Per node, the idle room that pipelined placements took (where too little was
        # releasing). KAI takes a pipelined task from the releasing room alone, which may
        # go below zero, so its idle room stays what it was: the simulation's choice of
        # node reads idle room as KAI has it (solver.py).
        self.idle_pipelined: dict[int, FloatArray] = {}
        # Tasks placed again after an eviction this cycle (moved), in order: victims
        # again where they now are (Task.takeable), which victimpool's bound counts.
        self.moved: list[Task] = []
        # Every task whose status or node changed, in order, undos included (appended
        # again): a reader keeps its place in it to refresh only those (victimpool.py).
        self.changed_tasks: list[Task] = []
        self.evictions = 0  # evictions that stand (undo takes back): did a search take any?
        # Placements of waiting tasks that stand (undo takes back): each makes its job a
        # candidate victim within the cycle (incremental/outcomes.py reads it).
        self.placements = 0
        # One number per standing eviction, in order; undo takes the last off, so the
        # top names the set that stands: equal tops, the same tasks running.
        self._evicted_marks: list[int] = []
        # The same for every change of a task or a node (placements too): equal tops, the
        # same state (reasons aside).
        self._state_marks: list[int] = []
        self._marks = 0
        self._log: _Logged | None = None  # while recording: the operations that stand
        self.reasons: dict[str, Reason] = {}  # job -> why it still waits
        # What the cycle changed: nodes placed on or evicted from, and their jobs.
        self.touched_nodes: set[int] = set()
        self.touched_jobs: set[Job] = set()

    @property
    def running_mark(self) -> int:
        """Names the evictions that stand: equal marks, the same tasks running (eviction
        is the only way a task stops running inside a cycle; victimpool.py)."""
        return self._evicted_marks[-1] if self._evicted_marks else 0

    @property
    def state_mark(self) -> int:
        """Names the changes that stand: equal marks, the same state, reasons aside (every
        change of a task, a node or a queue's usage inside a cycle is made here)."""
        return self._state_marks[-1] if self._state_marks else 0

    def _changed(self) -> None:
        self._marks += 1
        self._state_marks.append(self._marks)

    def _unchanged(self) -> None:
        self._state_marks.pop()

    # ------------------------------------------------------------ recording

    def recorded(self, do: Callable[[], object]) -> Ops:
        """Run `do` and return the operations it made, in order: made again (redo) on the
        state it started from, with the same reasons for the jobs they name, they leave
        exactly what `do` left. Not nested."""
        assert self._log is None, "one recording at a time"
        log: _Logged = []
        self._log = log
        try:
            do()
        finally:
            self._log = None
        return [(name, args) for _, name, args in log]

    def redo(self, ops: Ops) -> None:
        """Make recorded operations again (see recorded)."""
        for name, args in ops:
            getattr(self, name)(*args)

    # ------------------------------------------------------------ transactions

    def checkpoint(self) -> int:
        return len(self._undo)

    def rollback(self, checkpoint: int) -> None:
        while len(self._undo) > checkpoint:
            self._undo.pop()()
        log = self._log
        while log and log[-1][0] >= checkpoint:  # taken back: not made again by a redo
            log.pop()

    def commit(self) -> None:
        """Keep everything done so far: no rollback can reach behind this point."""
        assert self._log is None, "a recording ends before a commit"
        if self._committed is not None:
            self._committed.extend(self._undo)
        self._undo.clear()

    def undo_cycle(self) -> None:
        """Take back everything, committed or not (only with undoable_cycle). Tasks and
        jobs are as they were; node and device figures are rebuilt by the caller from
        `touched_nodes` (adding back what was taken need not give the same bits)."""
        assert self._committed is not None, "undo_cycle needs Statement(undoable_cycle=True)"
        self.rollback(0)
        while self._committed:
            self._committed.pop()()

    # ------------------------------------------------------------ reasons

    def set_reason(self, job: str, reason: Reason) -> None:
        """Say why the job waits. Undoable like a placement, so a search that fails and
        rolls back leaves the reason as it was before the search."""
        if self._log is not None:
            self._log.append((len(self._undo), "set_reason", (job, reason)))
        previous = self.reasons.get(job)
        if previous is reason:
            return
        self.reasons[job] = reason
        self._undo.append(functools.partial(self._restore_reason, job, previous))

    def set_reasons(self, said: list[tuple[str, Reason]]) -> None:
        """set_reason for many jobs, with one undo step for them all: the reasons as they
        were before (undo steps run last-in first-out, so everything said after this is
        taken back by then, and the whole dict can go back as it was)."""
        if self._log is not None:
            self._log.append((len(self._undo), "set_reasons", (said,)))
        if not said:
            return
        reasons = self.reasons
        before = reasons.copy()
        reasons.update(said)
        self._undo.append(functools.partial(self._restore_all_reasons, before))

    def _restore_all_reasons(self, before: dict[str, Reason]) -> None:
        self.reasons.clear()
        self.reasons.update(before)

    def default_reason(self, job: str, reason: Callable[[], Reason]) -> None:
        """Set a reason only where no earlier one says more (an earlier action's). Made
        only when it is set: most waiting jobs have their reason from allocate already."""
        if job not in self.reasons:
            self.set_reason(job, reason())

    def clear_reason(self, job: str) -> None:
        """The job no longer waits (its last pending task was placed)."""
        if self._log is not None:
            self._log.append((len(self._undo), "clear_reason", (job,)))
        previous = self.reasons.pop(job, None)
        if previous is not None:
            self._undo.append(functools.partial(self._restore_reason, job, previous))

    def _restore_reason(self, job: str, previous: Reason | None) -> None:
        if previous is None:
            self.reasons.pop(job, None)
        else:
            self.reasons[job] = previous

    # ------------------------------------------------------------ operations

    def place(self, task: Task, node: int, device: int, pipelined: bool, action: str) -> None:
        """Put a pending (or just-evicted) task on `node`; `device` only for fractions."""
        if self._log is not None:
            self._log.append((len(self._undo), "place", (task, node, device, pipelined, action)))
        nodes, d = self.state.nodes, task.demand
        self.touched_nodes.add(node)
        self.touched_jobs.add(task.job)
        idle_before, releasing_before = nodes.idle[node].copy(), nodes.releasing[node].copy()
        from_idle = None
        if pipelined:
            from_releasing = np.minimum(np.maximum(nodes.releasing[node], 0.0), d)
            nodes.releasing[node] -= from_releasing
            from_idle = d - from_releasing
            nodes.idle[node] -= from_idle
            if from_idle.any():
                self._took_idle(node, from_idle)
        else:
            nodes.idle[node] -= d
        undo_device = self._take_device(task, node, device, pipelined) if task.fraction_request else None
        nodes.changed(node)
        job = task.job
        amount = self.state.queue_amount(task, node)
        undo_usage = self.state.usage.add_undoable(job.queue, amount, not job.info.preemptible, node=node)
        previous = (task.status, task.node, task.device, task.placed_by)
        task.status = TaskStatus.PIPELINED if pipelined else TaskStatus.BINDING
        task.node, task.device, task.placed_by = node, device, action
        job.active_count += 1  # from Pending or Releasing: neither counted
        was_pending = previous[0] is TaskStatus.PENDING
        job.pending_count -= was_pending
        self.placements += was_pending
        self.pipelined += pipelined
        moved = previous[0] is TaskStatus.RELEASING
        if moved:
            self.moved.append(task)
        self._changed()
        self.changed_tasks.append(task)

        def undo() -> None:
            self._state_marks.pop()
            self.changed_tasks.append(task)
            if moved:
                self.moved.pop()
            job.active_count -= 1
            job.pending_count += was_pending
            self.placements -= was_pending
            self.pipelined -= pipelined
            task.status, task.node, task.device, task.placed_by = previous
            undo_usage()
            if undo_device is not None:
                undo_device()
            nodes.idle[node] = idle_before
            nodes.releasing[node] = releasing_before
            if from_idle is not None and from_idle.any():
                self._took_idle(node, -from_idle)
            nodes.changed(node)

        self._undo.append(undo)

    def _took_idle(self, node: int, amount: FloatArray) -> None:
        took = self.idle_pipelined.get(node)
        self.idle_pipelined[node] = amount.copy() if took is None else took + amount

    def idle_as_kai(self) -> FloatArray:
        """Each node's idle room as KAI's session has it: with what pipelined placements
        took of it given back (see idle_pipelined)."""
        idle = self.state.nodes.idle.copy()
        for node, took in self.idle_pipelined.items():
            idle[node] += took
        return idle

    def place_block(self, tasks: list[Task], node: int, action: str) -> None:
        """Bind identical whole-device tasks on one node with free room for all of them:
        one update of the node and the queue instead of one per task."""
        if self._log is not None:
            self._log.append((len(self._undo), "place_block", (tasks, node, action)))
        nodes, job, n = self.state.nodes, tasks[0].job, len(tasks)
        self.touched_nodes.add(node)
        self.touched_jobs.add(job)
        total = tasks[0].demand * n if n > 1 else tasks[0].demand
        idle_before = nodes.idle[node].copy()
        nodes.idle[node] -= total
        nodes.changed(node)
        amount = self.state.queue_amount(tasks[0], node)
        amount = amount * n if n > 1 else amount
        undo_usage = self.state.usage.add_undoable(job.queue, amount, not job.info.preemptible, node=node)
        binding, pending = TaskStatus.BINDING, TaskStatus.PENDING
        for t in tasks:
            assert t.status is pending, "blocks are placed from pending tasks only"
            t.status, t.node, t.placed_by = binding, node, action
        job.active_count += len(tasks)
        job.pending_count -= len(tasks)
        self.placements += len(tasks)
        self._changed()
        self.changed_tasks.extend(tasks)

        def undo() -> None:
            self._state_marks.pop()
            self.changed_tasks.extend(tasks)
            job.active_count -= len(tasks)
            job.pending_count += len(tasks)
            self.placements -= len(tasks)
            for t in tasks:
                t.status, t.node, t.device, t.placed_by = pending, -1, -1, ""
            undo_usage()
            nodes.idle[node] = idle_before
            nodes.changed(node)

        self._undo.append(undo)

    def hold(self, node: int, from_idle: FloatArray, from_releasing: FloatArray) -> None:
        """Take room on a node from every task's reach (a reservation's, reservations.py);
        negative amounts give it back. No task changes."""
        if self._log is not None:
            self._log.append((len(self._undo), "hold", (node, from_idle, from_releasing)))
        nodes = self.state.nodes
        self.touched_nodes.add(node)
        idle_before, releasing_before = nodes.idle[node].copy(), nodes.releasing[node].copy()
        nodes.idle[node] -= from_idle
        nodes.releasing[node] -= from_releasing
        nodes.changed(node)
        self._changed()

        def undo() -> None:
            self._state_marks.pop()
            nodes.idle[node] = idle_before
            nodes.releasing[node] = releasing_before
            nodes.changed(node)

        self._undo.append(undo)

    def keep_on_reservation(self, tasks: list[Task]) -> None:
        """Mark tasks just placed on a reservation's held room: no victims this cycle
        (Task.on_reservation). A change of which tasks are candidates: a state change."""
        if self._log is not None:
            self._log.append((len(self._undo), "keep_on_reservation", (tasks,)))
        if not tasks:
            return
        for t in tasks:
            t.on_reservation = True
        self._changed()
        self.changed_tasks.extend(tasks)

        def undo() -> None:
            self._state_marks.pop()
            self.changed_tasks.extend(tasks)
            for t in tasks:
                t.on_reservation = False

        self._undo.append(undo)

    def evict(self, task: Task, action: str, reason: str) -> None:
        """Start releasing a running task: its capacity stays held until it is gone. A
        task placed earlier in the cycle is taken the same way (Task.takeable): it holds
        its room as releasing, as KAI's session has it. One placed from pending is marked
        `taken_back` (it never started: nothing is evicted in the world); one moved
        keeps its first eviction, from where it ran (its move is only undone)."""
        if self._log is not None:
            self._log.append((len(self._undo), "evict", (task, action, reason)))
        if not task.takeable:
            raise ValueError(f"task {task.info.name}: neither running nor placed this cycle")
        previous = task.status
        nodes, node, device = self.state.nodes, task.node, task.device
        self.touched_nodes.add(node)
        self.touched_jobs.add(task.job)
        releasing_before = nodes.releasing[node].copy()
        nodes.releasing[node] += task.demand
        fraction = task.fraction_on(nodes, node) if task.fraction_request else 0.0
        if fraction:
            shared = nodes.devices[node][device]
            shared_before = (shared.idle, shared.releasing, shared.released)
            shared.releasing += fraction
            if shared.idle + shared.releasing >= 1 - EPS:
                # Every share on it is being released: a releasing whole GPU of the node,
                # no longer a device a share may join (KAI's node: ReleasingVector gains
                # the GPU, IsTaskFitOnGpuGroup refuses a group all released).
                shared.idle, shared.releasing, shared.released = 0.0, 0.0, True
                nodes.releasing[node, 0] += 1
            nodes.refresh_fractions(node)
        # The node's watchers keep figures of its releasing room too (the free GPUs per
        # type, now and once released): told of every change, undo included, or what they
        # keep drifts from the node (a rolled-back search left a type's room counted twice).
        nodes.changed(node)
        job = task.job
        amount = self.state.queue_amount(task, node)
        undo_usage = self.state.usage.add_undoable(
            job.queue, amount, not job.info.preemptible, sign=-1.0, node=node
        )
        task.status = TaskStatus.RELEASING
        before = (task.evicted_from, task.evict_reason, task.taken_back)
        if task.evicted_from is None:  # else moved: the eviction that stands is its first
            task.evicted_from, task.evict_reason = (node, device), (action, reason)
            task.taken_back = previous is not TaskStatus.RUNNING
        job.active_count -= 1
        self.evictions += 1
        self._changed()
        self._evicted_marks.append(self._marks)
        self.changed_tasks.append(task)

        def undo() -> None:
            self.changed_tasks.append(task)
            job.active_count += 1
            self.evictions -= 1
            self._evicted_marks.pop()
            self._state_marks.pop()
            task.status = previous
            task.evicted_from, task.evict_reason, task.taken_back = before
            undo_usage()
            nodes.releasing[node] = releasing_before
            if fraction:
                shared.idle, shared.releasing, shared.released = shared_before
                nodes.refresh_fractions(node)
            nodes.changed(node)

        self._undo.append(undo)

    def pipeline_job(self, job: Job) -> None:
        """A job with a task waiting on released capacity waits as a whole: its tasks
        bound this cycle are pipelined too."""
        if self._log is not None:
            self._log.append((len(self._undo), "pipeline_job", (job,)))
        binding = [t for t in job.tasks if t.status is TaskStatus.BINDING and t.placed_by]
        if not binding:
            return
        self._changed()
        self._undo.append(self._unchanged)
        for task in binding:
            task.status = TaskStatus.PIPELINED
            self._undo.append(functools.partial(setattr, task, "status", TaskStatus.BINDING))

    # ------------------------------------------------------------ devices

    def _take_device(self, task: Task, node: int, index: int, pipelined: bool) -> Undo:
        nodes = self.state.nodes
        devices = nodes.devices[node]
        fraction = task.fraction_on(nodes, node)
        device = devices.get(index)
        opened_from = ""
        reopened = device is not None and device.released
        if reopened:  # a released device's name taken again: the GPU being released
            assert device is not None
            nodes.releasing[node, 0] -= 1
            device.idle, device.releasing, device.released = 0.0, 1.0, False
        elif device is None:
            # Opening a whole device for sharing: a free one, or one being released.
            if nodes.idle[node, 0] >= 1 - EPS:
                nodes.idle[node, 0] -= 1
                device, opened_from = Device(), "idle"
            else:
                nodes.releasing[node, 0] -= 1
                device, opened_from = Device(idle=0.0, releasing=1.0), "releasing"
            devices[index] = device
        from_releasing = min(max(device.releasing, 0.0), fraction) if pipelined else 0.0
        before = (device.idle, device.releasing)
        device.releasing -= from_releasing
        device.idle -= fraction - from_releasing
        nodes.refresh_fractions(node)

        def undo() -> None:  # the node's rows are put back by the caller's undo
            device.idle, device.releasing = before
            if reopened:
                device.idle, device.releasing, device.released = 0.0, 0.0, True
            if opened_from:
                del devices[index]
            nodes.refresh_fractions(node)

        return undo
