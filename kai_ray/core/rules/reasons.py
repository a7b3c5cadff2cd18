"""Why a job could not be placed, in words a person understands, naming the constraint,
with the reason's code (model.REASON_CODES) beside the words."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kai_ray.core.model.affinity import NodeAffinity, describe_affinity, describe_selector
from kai_ray.core.model.snapshot import Reason, Request
from kai_ray.core.model.words import agree, count, describe_request, gang_words, level_noun, number
from kai_ray.core.rules.emptyfit import gang_problem, room_when_empty
from kai_ray.core.rules.nodesets import selector_mask
from kai_ray.core.rules.placement import Placer
from kai_ray.core.rules.typedqueues import blocked
from kai_ray.core.state.gputypes import gpus_of
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import EPS

__all__ = ["explain_unplaced", "never_fits", "unmet_affinity"]


def never_fits(placer: Placer, task: Task, mask: np.ndarray) -> bool:
    """True when no matching node could hold the task even if it were empty."""
    return room_when_empty(placer.state.nodes, task.request, mask, "", None).tasks == 0


def _never_fits_here(placer: Placer, job: Job, task: Task, mask: np.ndarray) -> bool:
    """never_fits for the job's base mask, which its node selector decides: kept."""
    key = ("task never fits", task.request, job.selector, job.affinity, job.info.gpu_types)
    return placer.node_fact(key, lambda: never_fits(placer, task, mask))


def explain_unplaced(placer: Placer, tasks: Sequence[Task]) -> Reason:
    """The constraint that blocked placing `tasks` (a gang, or one elastic task); where
    GPU types narrow it, the words say which it accepts and what other types have free."""
    job = tasks[0].job
    types = placer.gpu_types
    if types.several and not job.info.mixed_gpu_types and types.asks_gpu(job):
        mask = placer.base_mask(job)
        too_big = _too_big_for_each_type(placer, job, tasks, mask) if mask.any() else None
        if too_big is not None:
            return too_big
    said = type_words(placer, job)
    refusals, every_type = _type_limits(placer, job, tasks)
    limits = [r.text for r in refusals]
    if limits and every_type:
        # A quota refuses only non-preemptible work: its code where no limit refuses too.
        code = "queue-quota" if all(r.code == "queue-quota" for r in refusals) else "queue-limit"
        return Reason(code, "; ".join([*limits, said] if said else limits))
    reason = _explain(placer, tasks)
    if reason.code == "gpu-type":
        return reason
    said = "; ".join([*limits, said] if said else limits)
    return Reason(reason.code, f"{reason.text}; {said}") if said else reason


def _type_limits(placer: Placer, job: Job, tasks: Sequence[Task]) -> tuple[list[Reason], bool]:
    """What the queue's per-type limits (or quotas) say of the types the gang might take,
    and whether they refuse every one of them (typedqueues.py)."""
    typed, types = placer.state.usage.typed, placer.gpu_types
    if typed is None or job.info.mixed_gpu_types or not types.asks_gpu(job):
        return [], False
    order = placer.type_candidates(job)
    gpus = gpus_of(tasks)
    said = [blocked(typed, job, t, gpus) for t in order]
    return [r for r in said if r is not None], bool(order) and all(said)


def _explain(placer: Placer, tasks: Sequence[Task]) -> Reason:
    job = tasks[0].job
    refused = placer.refused_topology(job.info.topology) if job.info.topology is not None else None
    if refused is not None:
        return Reason("topology", refused)
    mask = placer.base_mask(job)
    if not mask.any():
        return _no_node(placer, job)
    constraint = job.info.topology
    inside = placer.in_topology(constraint) if constraint is not None else None
    if constraint is not None and inside is not None:  # a node outside its topology is in no domain
        mask = mask & inside
        if not mask.any():
            text = f"no node it may use is in topology {constraint.topology}: each lacks the label of a level"
            return Reason("topology", text)
    unmet = unmet_affinity(placer, tasks)
    if unmet is not None:
        return unmet
    task = tasks[0]
    if not job.is_whole():  # `tasks` are what the gang misses: could it ever start?
        problem = _gang_never_fits(placer, job, tasks, mask)
        if problem:
            return Reason("gang-too-big", problem)
    if _never_fits_here(placer, job, task, mask):  # an elastic task (a gang's was caught above)
        text = f"each task asks for {describe_request(task.request)}: no node is that large, even when empty"
        return Reason("gang-too-big", text)
    gang = gang_words(len(tasks), task.request)
    by_type = placer.type_mask(job)  # a gang that holds a type: the room of that type alone
    if by_type is not None and (mask & by_type).any():
        mask = mask & by_type
    constraint = job.info.topology
    if constraint is not None and constraint.required:
        return Reason("topology", _topology_reason(placer, tasks, mask, constraint.required, gang))
    if job.info.spread == "required":
        return Reason("spread", _spread_reason(placer, job, task, mask, gang))
    return Reason("no-room", _room_reason(placer, task, mask, gang))


def _too_big_for_each_type(
    placer: Placer, job: Job, tasks: Sequence[Task], mask: np.ndarray
) -> Reason | None:
    """gang-too-big when the gang, which runs on one GPU type, would not fit the nodes of
    any one type it may use even empty (the gang's nodes of every type together might)."""
    if job.is_whole():
        return None
    types, problems = placer.gpu_types, []
    for t in types.order_for(job, mask):
        problem = _gang_never_fits(placer, job, tasks, mask, on_type=t)
        if not problem:
            return None
        problems.append(problem)
    if not problems:
        return None
    return Reason(
        "gang-too-big", f"{problems[0]} (its gang runs on one GPU type: on each type alone it does not fit)"
    )


def type_words(placer: Placer, job: Job) -> str:
    """What GPU types change for a waiting job, said where the cluster has several:
    `this job accepts H100 only; 8 A100 GPUs are free`, `its gang holds H100 (it grows on
    that type); ...`, or for a gang of any type `its gang runs on one GPU type; free:
    4 H100, 4 A100 GPUs`."""
    types = placer.gpu_types
    if not types.several or not types.asks_gpu(job):
        return ""
    free = {t: n for t, n in types.free_by_type().items() if n > EPS}
    held = None if job.info.mixed_gpu_types else types.held_by(job)
    if held is not None:
        accepted, text = [types.names[held]], f"its gang holds {types.names[held]} (it grows on that type)"
    elif job.info.gpu_types:
        accepted = list(job.info.gpu_types)
        text = f"this job accepts {types.describe(accepted)} only"
    else:
        if job.info.mixed_gpu_types or not free:
            return ""
        listed = ", ".join(f"{number(n)} {t}" for t, n in free.items())
        return f"its gang runs on one GPU type; free: {listed} GPUs"
    others = {t: n for t, n in free.items() if t not in accepted}
    if others:
        listed = ", ".join(f"{number(n)} {t}" for t, n in others.items())
        text += f"; {listed} {agree(int(sum(others.values())), 'GPU is', 'GPUs are')} free"
    return text


def _no_node(placer: Placer, job: Job) -> Reason:
    """Why no node is left for the job: its selector, the affinity its tasks share, or
    the GPU types it accepts."""
    selector, affinity = job.selector, job.affinity
    if job.info.gpu_types:
        wider = placer.node_fact(
            ("a node of its types", selector, affinity, job.info.gpu_types),
            lambda: _without_types(placer, job),
        )
        if wider:
            types = placer.gpu_types
            has = ", ".join(sorted({types.name_of(n) for n in wider}))
            accepted = types.describe(job.info.gpu_types)
            return Reason(
                "gpu-type",
                f"no schedulable node has a GPU type it accepts ({accepted}); "
                f"the nodes it may use have {has}",
            )
    if affinity is not None:
        key = ("selector admits some node", selector)
        if placer.node_fact(key, lambda: bool(selector_mask(placer.state.nodes, selector).any())):
            return _affinity_reason(affinity, "its tasks", selector)
    if selector:
        wanted = describe_selector(selector)
        return Reason("node-selector", f"no schedulable node matches nodeSelector {wanted}")
    return Reason("node-selector", "no schedulable node in the cluster")


def _without_types(placer: Placer, job: Job) -> list[int]:
    """The GPU nodes the job's selector and shared affinity admit, whatever their type."""
    nodes = placer.state.nodes
    mask = selector_mask(nodes, job.selector)
    if job.affinity is not None:
        mask = mask & placer.affinity_mask(job.affinity)
    found: list[int] = np.flatnonzero(mask & (nodes.gpus > 0)).tolist()
    return found


def unmet_affinity(placer: Placer, tasks: Sequence[Task]) -> Reason | None:
    """The reason naming the first of `tasks` whose own affinity no node the job may use
    meets (a job whose tasks differ), or None. Such a task waits whatever the room: no
    search is needed to say so, and the reason names this job's own task."""
    job = tasks[0].job
    if not job.per_task:
        return None
    mask, last = placer.base_mask(job), None
    for task in tasks:
        own = task.info.node_affinity
        if own is None or own is last:
            continue
        last = own
        if not _met(placer, job, mask, own):
            return _affinity_reason(own, f"task {task.info.name}", job.selector)
    return None


def _met(placer: Placer, job: Job, mask: np.ndarray, affinity: NodeAffinity) -> bool:
    """Some node of the job's base mask (its selector's, here) meets the affinity: kept."""
    key = ("affinity met", job.selector, affinity, job.info.gpu_types)
    return placer.node_fact(key, lambda: bool((mask & placer.affinity_mask(affinity)).any()))


def _affinity_reason(affinity: NodeAffinity, whose: str, selector: tuple[tuple[str, str], ...]) -> Reason:
    """`no schedulable node meets the required node affinity of task w-1: gpu In [h100]`."""
    also = f"; nodes must also match nodeSelector {describe_selector(selector)}" if selector else ""
    if not affinity.terms:  # the task's own nodeSelector pairs alone
        wanted = describe_selector(affinity.selector)
        text = f"no schedulable node matches the nodeSelector of {whose}: {wanted}"
        return Reason("node-selector", text + also)
    text = f"no schedulable node meets the required node affinity of {whose}: {describe_affinity(affinity)}"
    return Reason("node-affinity", text + also)


def _gang_never_fits(
    placer: Placer, job: Job, missing: Sequence[Task], mask: np.ndarray, on_type: int = -1
) -> str:
    """gang_problem on the empty nodes: its inputs are the gang's requests, the job's
    node selector, affinity and GPU types (its mask; `on_type`: narrowed to that type's
    nodes, only when worked out), spreading and topology level: kept per those."""
    active = [t.request for t in job.tasks if t.status.is_active] if job.active_count else []
    gang = active + [t.request for t in missing]
    constraint = job.info.topology
    level = constraint.required if constraint is not None else None
    key = (
        "gang never fits",
        _runs(gang),
        job.selector,
        job.affinity,
        job.info.gpu_types,
        on_type,
        job.info.spread,
        level,
        constraint.topology if constraint is not None else None,
    )

    def work_out() -> str:
        domains = placer.level_domains(constraint, level) if constraint is not None and level else None
        on = mask & placer.gpu_types.of(on_type) if on_type >= 0 else mask
        return gang_problem(placer.state.nodes, gang, on, job.info, domains)

    return placer.node_fact(key, work_out)


def _runs(requests: list[Request]) -> tuple[tuple[Request, int], ...]:
    """The gang's requests as runs of the same object, for a key: a uniform gang's is one
    pair, not a request hashed per task (an equal request that is another object starts
    another run: another key for the same gang, worked out once more)."""
    runs: list[tuple[Request, int]] = []
    for r in requests:
        if runs and runs[-1][0] is r:
            runs[-1] = (r, runs[-1][1] + 1)
        else:
            runs.append((r, 1))
    return tuple(runs)


def _spread_reason(placer: Placer, job: Job, task: Task, mask: np.ndarray, gang: str) -> str:
    room = placer.fits(task, mask, future=True)
    taken = sum(1 for n in placer.own_counts(job) if room[n])
    free = int(room.sum()) - taken
    text = (
        f"{gang} must spread one task per node: only {count(free, 'node')} "
        f"{agree(free, 'has', 'have')} room for a task (now or once released)"
    )
    if taken:
        holds = agree(taken, "holds", "hold")
        text += f" and none of its tasks; {count(taken, 'node')} with room already {holds} one"
    return text


def _room_reason(placer: Placer, task: Task, mask: np.ndarray, gang: str) -> str:
    """Why the gang finds no room on the mask's nodes, in figures of their free room. Kept
    while none of them changed (roomfacts.py): a look-alike is explained again each time
    the state moved, mostly on other nodes. A fraction reads the shared devices too:
    worked out each time."""
    mask_key = mask.tobytes()
    if task.fraction_request:
        return _room_words(placer, task, mask, gang, mask_key)
    key = ("room reason", gang, task.demand.tobytes())
    return placer.room_facts.get(key, mask, mask_key, lambda: _room_words(placer, task, mask, gang, mask_key))


def _room_words(placer: Placer, task: Task, mask: np.ndarray, gang: str, mask_key: bytes) -> str:
    nodes = placer.state.nodes
    gpu = task.fraction_request or task.demand[0] > 0
    col, unit = (0, "GPU") if gpu else (1, "CPU")
    rows = _rows(placer, mask, mask_key)
    idle = nodes.idle[rows, col]  # column by column: taking whole rows by number is slow
    free = float((idle + nodes.releasing[rows, col]).sum())
    largest = float(idle.max()) if len(idle) else 0.0
    totals = f"free: {count(free, 'whole ' + unit if gpu else unit)}, largest free node has {number(largest)}"
    fitting = _fitting(placer, task, mask, rows)
    if fitting == 0:
        outside = float(nodes.outside[rows, col].sum())
        held = f"; work outside the scheduler holds {count(outside, unit)}" if outside > EPS else ""
        return f"{gang}: no node has room now for even one task ({totals}{held})"
    return (
        f"{gang}: only part of the gang fits at once ({count(fitting, 'node')} "
        f"{agree(fitting, 'has', 'have')} room for a task; {totals}); the gang starts whole or not at all"
    )


def _rows(placer: Placer, mask: np.ndarray, mask_key: bytes) -> np.ndarray | slice:
    """The mask's nodes as row numbers (every row: a slice), kept per mask: taking rows
    by number costs a quarter of taking them by a mask of ten thousand nodes."""
    key = ("rows of", mask_key)
    return placer.node_fact(key, lambda: slice(None) if mask.all() else np.flatnonzero(mask))


def _fitting(placer: Placer, task: Task, mask: np.ndarray, rows: np.ndarray | slice) -> int:
    """How many of the mask's nodes (`rows`) have room for one task, now or once released:
    column by column, each narrowing the rows the next one reads (GPUs first: few pass)."""
    if task.fraction_request:
        return int(np.count_nonzero(placer.fits(task, mask, future=True)))
    nodes = placer.state.nodes
    left = np.arange(len(nodes))[rows]
    for c in np.flatnonzero(task.demand):
        left = left[nodes.idle[left, c] + nodes.releasing[left, c] >= task.demand[c] - EPS]
    return len(left)


def _topology_reason(placer: Placer, tasks: Sequence[Task], mask: np.ndarray, level: str, gang: str) -> str:
    noun = level_noun(level)
    constraint = tasks[0].job.info.topology
    ids, names = placer.level_domains(constraint, level) if constraint is not None else placer.domains(level)
    usable = mask & (ids >= 0)
    if not usable.any():
        return f"{gang} must share one {noun}, but no matching node has the label {level}"
    nodes = placer.state.nodes
    gpu = tasks[0].fraction_request or tasks[0].demand[0] > 0
    col, unit = (0, "GPU") if gpu else (1, "CPU")
    free = np.bincount(ids[usable], weights=nodes.idle[usable, col], minlength=len(names))
    need = sum(t.demand[col] for t in tasks)
    best = int(np.argmax(free))
    return (
        f"{gang} must share one {noun}: it needs {count(need, unit)}, the largest free {noun} "
        f"({names[best]}) has {number(free[best])}"
    )
