"""What a cluster could hold if it were empty: the test of a gang that can never start.

A gang waits until all of it fits at once. When even the empty cluster cannot hold it
(more tasks than the nodes could take, a required spread over too few nodes, a required
topology domain too small) it would wait forever. The pending reason says so, and a
backend can refuse such a job when it is submitted (`gang_never_fits`).

"Empty" means every node's whole capacity, work outside the scheduler included: that
work may leave, so only what can never change refuses a job.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kai_ray.core.model.gpushare import device_shares, usable_memories
from kai_ray.core.model.snapshot import JobInfo, NodeInfo, Request
from kai_ray.core.model.subgroups import gang_tasks
from kai_ray.core.model.words import count, gang_words, level_noun
from kai_ray.core.rules.nodesets import Domains, affinity_mask, domain_ids, selector_mask
from kai_ray.core.state.nodes import EPS, BoolArray, FloatArray, Nodes, node_demand

__all__ = ["NEVER_FITS", "EmptyRoom", "empty_room", "gang_never_fits", "gang_problem", "room_when_empty"]

# Every such reason reads "<gang of N tasks (...) | task (...)> cannot fit in this cluster
# as it is: ...": a stable start that backends and users may look for.
NEVER_FITS = "cannot fit in this cluster as it is"


@dataclass(frozen=True, slots=True)
class EmptyRoom:
    """How many tasks of one request the empty cluster holds at once, and on what."""

    tasks: int | None  # None: the request asks for nothing a node runs out of
    nodes: int  # nodes holding at least one (in the best domain, when one is required)
    gpus: float  # those nodes' GPUs
    cpus: float  # and cores
    domain: str = ""  # the best domain of a required topology level ("" when none)


def empty_room(
    nodes: Sequence[NodeInfo],
    request: Request,
    *,
    node_selector: Mapping[str, str] | None = None,
    spread: str = "",
    required_level: str | None = None,
) -> EmptyRoom:
    """How many tasks asking for `request` these nodes could hold if they were empty:
    only schedulable nodes matching `node_selector`; one per node when `spread` is
    "required"; all in one domain of `required_level` (a node label) when given, the
    domain holding the most; fractional GPUs as many per device as fit."""
    arrays = _arrays(nodes, [request])
    mask = selector_mask(arrays, node_selector or {})
    domains = domain_ids(arrays, required_level) if required_level else None
    return room_when_empty(arrays, request, mask, spread, domains)


def gang_never_fits(nodes: Sequence[NodeInfo], job: JobInfo) -> str | None:
    """None when the job's gang could start on these nodes if they were empty; else why
    it never can, in words for the user (starting `gang of N tasks (...) cannot fit in
    this cluster as it is`), naming the fix.

    Honours the job's node selector (and a required node affinity all its tasks
    share), unschedulable nodes, required spreading, a
    required topology level and fractional GPUs. The gang is the job's active tasks plus
    its first pending ones up to `gang_size` (for a new job: its first gang_size tasks;
    with subgroups, each subgroup's first ones up to its minimum: subgroups.gang_tasks).
    For a backend to refuse a job at submit; the scheduler's pending reason says the same.
    """
    gang = _gang_requests(job)
    arrays = _arrays(nodes, gang)
    mask = selector_mask(arrays, job.node_selector)
    shared = {t.node_affinity for t in job.tasks}
    if len(shared) == 1 and None not in shared:
        mask &= affinity_mask(arrays, shared.pop())
    level = job.topology.required if job.topology is not None else None
    domains = domain_ids(arrays, level) if level else None
    return gang_problem(arrays, gang, mask, job, domains) or None


def gang_problem(
    nodes: Nodes, gang: Sequence[Request], mask: BoolArray, job: JobInfo, domains: Domains | None
) -> str:
    """Why a gang (one request per task) can never start on `nodes` among `mask`, or "".

    A gang mixing requests is checked request by request: a necessary condition, so it
    may miss a mixed gang that cannot fit, but never refuses one that can."""
    for request, alike in Counter(gang).items():
        room = room_when_empty(nodes, request, mask, job.spread, domains)
        if room.tasks is not None and room.tasks < alike:
            return _never_fits_words(len(gang), alike, request, room, job)
    return ""


def room_when_empty(
    nodes: Nodes, request: Request, mask: BoolArray, spread: str, domains: Domains | None
) -> EmptyRoom:
    """`empty_room` over the cycle's node arrays, among the nodes in `mask`."""
    per = np.where(mask, _tasks_per_node(nodes, request), 0.0)
    if spread == "required":
        per = np.minimum(per, 1.0)
    where, domain = mask, ""
    if domains is not None:
        ids, names = domains
        where = mask & (ids >= 0)
        if names and where.any():
            totals = np.bincount(ids[where], weights=per[where], minlength=len(names))
            best = int(np.argmax(totals))  # a tie: the domain seen first
            where, domain = where & (ids == best), names[best]
    holding = where & (per >= 1)
    total = float(per[holding].sum())
    return EmptyRoom(
        tasks=None if math.isinf(total) else int(total),
        nodes=int(holding.sum()),
        gpus=float(nodes.capacity[holding, 0].sum()),
        cpus=float(nodes.capacity[holding, 1].sum()),
        domain=domain,
    )


def _tasks_per_node(nodes: Nodes, request: Request) -> FloatArray:
    """Tasks of the request each empty node holds (inf where nothing bounds it)."""
    demand = node_demand(request, nodes.columns)
    per = np.full(len(nodes), np.inf)
    for c in np.flatnonzero(demand):
        per = np.minimum(per, np.floor((nodes.capacity[:, c] + EPS) / demand[c]))
    if request.is_fractional:
        per = np.minimum(per, nodes.gpus * _per_device(nodes, request))
    return per


def _per_device(nodes: Nodes, request: Request) -> FloatArray:
    """Tasks of a fractional request one device holds (0 where a device is too small for
    a memory slice)."""
    share = np.broadcast_to(device_shares(request, nodes.device_memory), (len(nodes),))
    per: FloatArray = np.floor((1 + EPS) / np.maximum(share, EPS))
    if request.gpu_memory > 0:
        per = np.where(usable_memories(nodes.device_memory) >= request.gpu_memory - EPS, per, 0.0)
    return per


def _arrays(nodes: Sequence[NodeInfo], requests: Sequence[Request]) -> Nodes:
    extended = sorted(
        {k for n in nodes for k, _ in n.extended} | {k for r in requests for k, _ in r.extended}
    )
    return Nodes(nodes, extended)


def _gang_requests(job: JobInfo) -> list[Request]:
    return [t.request for t in gang_tasks(job)]


def _never_fits_words(size: int, alike: int, request: Request, room: EmptyRoom, job: JobInfo) -> str:
    gang = f"{gang_words(size, request, alike)} {NEVER_FITS}"
    level = job.topology.required if job.topology is not None else None
    noun = level_noun(level) if level else ""
    if level and not room.domain:
        return f"{gang}: it must share one {noun}, but no matching node has the label {level}"
    if room.tasks == 0:
        too_large = "no node it may run on is that large, even when empty"
        return f"{gang}: {too_large}; ask for less per task or add larger nodes"
    if noun == "node":
        where, fix = "one node", "lower the gang size or ask for less per task"
    elif noun:
        where, fix = f"its largest {noun} ({room.domain})", f"lower the gang size or add nodes to a {noun}"
    else:
        where, fix = "it", "lower the gang size or add nodes"
    one_each = ", one per node" if job.spread == "required" else ""
    gpus = request.gpu > 0 or request.gpu_memory > 0
    held = count(room.gpus, "GPU") if gpus else count(room.cpus, "CPU")
    return (
        f"{gang}: even empty {where} holds at most {count(room.tasks or 0, 'such task')}{one_each} "
        f"({held} on {count(room.nodes, 'node')}); {fix}"
    )
