"""What the dashboard shows: one `Board` (queues, workloads, nodes) built from any
backend's state, as the plain dicts the JSON API serves (docs/dashboard.md documents
their fields; scripts depend on them, so fields are added, never renamed).

Every backend's Board is built here, by one function (`board_of`), from what the one
scheduling loop keeps: its Lifecycle's workload views (the Ray scheduler's own table,
or the lifecycle read back from Kubernetes' API server), the last cycle's queue figures
and places in line, and the nodes. The rules of what a row says (a queue's standing
against its fair share, how shares of a device are laid out) live here once.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kai_ray.control.accessview import access_views
from kai_ray.control.loop import SchedulingLoop
from kai_ray.control.snapshot import NODE_TOPOLOGY
from kai_ray.control.views import WorkloadView, share_standing
from kai_ray.control.workload import State
from kai_ray.core import RESOURCES, NodeInfo, QueueInfo, QueueStatus

__all__ = [
    "Board",
    "DeviceShare",
    "board_from_controller",
    "board_of",
    "device_layout",
    "grouping_levels",
    "node_row",
    "queue_rows",
    "row",
    "workload_row",
]

_EPS = 1e-6


@dataclass(slots=True)
class Board:
    """Everything the pages show, at one moment (`at`, seconds since the epoch)."""

    backend: str  # "ray" or "kubernetes"
    at: float
    queues: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    levels: list[str] = field(default_factory=list)  # topology levels, outermost first
    # What the scheduler is doing when it may not be scheduling (the Kubernetes operator
    # listing, or waiting for its lease: kai_ray.k8s.progress); None where always scheduling.
    status: dict[str, Any] | None = None

    def summary(self) -> dict[str, Any]:
        states: dict[str, int] = defaultdict(int)
        for w in self.workloads:
            states[w["state"]] += 1
        gpus = sum(n["gpus"] for n in self.nodes)
        used = sum(n["gpu_used"] for n in self.nodes)
        outside = sum(n["gpu_outside"] for n in self.nodes)
        return {
            "backend": self.backend,
            "at": self.at,
            "queues": len(self.queues),
            "workloads": dict(sorted(states.items())),
            "nodes": len(self.nodes),
            "gpus": gpus,
            "gpus_used": round(used, 4),
            "gpus_outside": round(outside, 4),
            "over_share": sorted(q["name"] for q in self.queues if q["standing"] == "over"),
            "status": self.status,
        }


# ---------------------------------------------------------------- queues


def queue_rows(
    queues: Sequence[QueueInfo],
    status: Mapping[str, QueueStatus],
    counts: Mapping[str, tuple[int, int]],
    *,
    closed: bool = False,
    refused: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """The queue tree, parents before their children (siblings in creation order), each
    with its spec, its access rule (own and in effect; `closed`: SchedulerConfig's
    closed_queues) and last cycle's figures per resource. `counts`: leaf queue ->
    (pending, running) workloads; `refused`: leaf queue -> workloads its access rule
    refuses; a parent shows the sums over its subtree."""
    children: dict[str | None, list[QueueInfo]] = defaultdict(list)
    names = {q.name for q in queues}
    for q in queues:
        children[q.parent if q.parent in names else None].append(q)
    access = access_views(queues, closed)
    refused = refused or {}
    rows: list[dict[str, Any]] = []

    def visit(q: QueueInfo, depth: int) -> tuple[int, int, int]:
        row = _queue_row(q, status.get(q.name), depth, [c.name for c in children[q.name]])
        row["access"] = access[q.name]
        rows.append(row)
        pending, running = counts.get(q.name, (0, 0))
        turned = refused.get(q.name, 0)
        for child in children[q.name]:
            p, r, t = visit(child, depth + 1)
            pending, running, turned = pending + p, running + r, turned + t
        row["pending"], row["running"], row["refused"] = pending, running, turned
        return pending, running, turned

    for root in children[None]:
        visit(root, 0)
    return rows


def _queue_row(q: QueueInfo, st: QueueStatus | None, depth: int, kids: list[str]) -> dict[str, Any]:
    resources = {}
    for i, res in enumerate(RESOURCES):
        resources[res] = {
            "quota": q.quota[i],
            "limit": q.limit[i],
            "over_quota_weight": q.over_quota_weight[i],
            "deserved": st.deserved[i] if st else None,
            "fair_share": st.fair_share[i] if st else None,
            "allocated": st.allocated[i] if st else 0.0,
            "requested": st.requested[i] if st else 0.0,
        }
    standing, over = share_standing(st)
    return {
        "name": q.name,
        "parent": q.parent,
        "depth": depth,
        "children": kids,
        "priority": q.priority,
        "resources": resources,
        # Per GPU type a queue names (docs/gpu-types.md): quota, limit, fair_share, allocated.
        "gpu_types": {t: dict(f) for t, f in st.gpu_types.items()} if st else {},
        "standing": standing,
        "over": over,
    }


# ---------------------------------------------------------------- workloads


def workload_row(v: WorkloadView, pos: tuple[int, int] | None, now: float) -> dict[str, Any]:
    """One workload as the Workloads page and `GET /api/v1/workloads` show it (`pos`: its
    place in its queue and the queue's length, while it waits): the view's fields, but
    how long it has waited in place of when it queued."""
    queued = v.state == State.QUEUED.value
    fields = {f: getattr(v, f) for f in _ROW_FIELDS}
    fields.update(
        reason_code=v.reason_code if queued else "",
        waiting_s=max(0.0, now - v.queued_at) if queued else None,
        nodes=list(v.nodes),
        eta=v.eta.as_dict(now) if queued and v.eta is not None else None,
    )
    return row(position=pos, history=v.history, gpus=v.gpus, **fields)


_ROW_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(WorkloadView)
    if f.name not in ("queued_at", "history", "holdings", "gpus", "eta")
)


def row(
    *,
    position: tuple[int, int] | None,
    history: Sequence[tuple[float, str, str, str]],
    gpus: float,
    **fields: Any,
) -> dict[str, Any]:
    """A workload row (one layout for the API): `position` is (place, length of the
    line) while it waits; `history` (at, from, to, why) transitions."""
    preempted = [h for h in history if h[2] == State.PREEMPTING.value]
    return {
        **fields,
        "position": position[0] if position else None,
        "queue_length": position[1] if position else None,
        "gpus": round(gpus, 4),
        "last_preemption": {"at": preempted[-1][0], "why": preempted[-1][3]} if preempted else None,
        "history": [{"at": at, "from": old, "to": new, "why": why} for at, old, new, why in history],
    }


# ---------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class DeviceShare:
    """One worker's share of a node's GPUs: `gpu` devices (a fraction below 1), on device
    `device` when the backend knows it (Kubernetes' GPU sharing), else laid out."""

    workload: str
    queue: str
    gpu: float
    device: int | None = None


def device_layout(gpus: int, holdings: Iterable[DeviceShare], outside: float = 0.0) -> list[dict[str, Any]]:
    """Each device of a node and who holds what of it. Devices a backend named are filled
    first; whole-GPU holders then take the emptiest devices; fractions pack first-fit on
    devices already shared (as Ray packs fractional GPUs before opening another device);
    GPUs held outside the scheduler fill what is left, from the last device back."""
    devices: list[dict[str, Any]] = [
        {"index": i, "used": 0.0, "outside": 0.0, "shares": []} for i in range(gpus)
    ]

    def put(d: dict[str, Any], h: DeviceShare, amount: float) -> None:
        d["used"] = round(d["used"] + amount, 6)
        d["shares"].append({"workload": h.workload, "queue": h.queue, "fraction": round(amount, 6)})

    whole, fractions = [], []
    for h in holdings:
        if h.device is not None and 0 <= h.device < gpus:
            put(devices[h.device], h, min(1.0, h.gpu))
        elif h.gpu >= 1.0 - _EPS:
            whole.append(h)
        elif h.gpu > _EPS:
            fractions.append(h)
    for h in whole:
        for _ in range(round(h.gpu)):
            free = [d for d in devices if d["used"] <= _EPS]
            if free:
                put(free[0], h, 1.0)
    for h in sorted(fractions, key=lambda h: -h.gpu):
        fits = [d for d in devices if d["used"] + h.gpu <= 1.0 + _EPS]
        shared = [d for d in fits if d["used"] > _EPS]
        if fits:
            put((shared or fits)[0], h, h.gpu)
    left = outside
    for d in reversed(devices):
        take = min(left, max(0.0, 1.0 - d["used"]))
        if take > _EPS:
            d["outside"] = round(take, 6)
            left -= take
    return devices


def node_row(
    node: NodeInfo,
    holdings: Sequence[DeviceShare],
    levels: Sequence[str],
    held: Mapping[str, float],
    display: Callable[[str], str] = lambda name: name,
    hidden_labels: Iterable[str] = (),
) -> dict[str, Any]:
    """A node: size, what the scheduler's workloads (`held`, core resource names) and
    other work hold, its place in the topology (`domain`, one value per level) and its
    devices (device_layout)."""
    outside = dict(node.used_outside)
    hidden = set(hidden_labels)
    row: dict[str, Any] = {
        "id": node.name,
        "name": display(node.name),
        "labels": {k: v for k, v in node.labels.items() if k not in hidden},
        "domain": [node.labels.get(level, "") for level in levels],
        "gpu_model": node.gpu_model,
        "gpu_type": node.gpu_type,
        "unschedulable": node.unschedulable,
        "gpus": node.gpus,
        "cpu": node.cpu,
        "memory": node.memory,
    }
    for res, total in (("gpu", float(node.gpus)), ("cpu", node.cpu), ("memory", node.memory)):
        used, other = held.get(res, 0.0), outside.get(res, 0.0)
        row[f"{res}_used"] = round(used, 4)
        row[f"{res}_outside"] = round(other, 4)
        row[f"{res}_free"] = round(max(0.0, total - used - other), 4)
    row["devices"] = device_layout(node.gpus, holdings, outside.get("gpu", 0.0))
    return row


# ---------------------------------------------------------------- one board


def board_of(
    loop: SchedulingLoop,
    now: float,
    *,
    backend: str,
    nodes: Iterable[NodeInfo] | None = None,
    queues: Sequence[QueueInfo] | None = None,
    display: Callable[[str], str] = lambda name: name,
    hidden_labels: Iterable[str] = (),
    text: Callable[[str], str] = lambda s: s,
    status: dict[str, Any] | None = None,
) -> Board:
    """The Board of any backend's scheduling loop: its Lifecycle's workloads, the last
    cycle's figures and places in line. `nodes` and `queues`: the backend's current ones
    when it keeps fresher ones than the last cycle's snapshot. `text` rewrites reasons
    for people (Ray's long node ids shortened). `status`: Board.status."""
    last = loop.last.snapshot if loop.last is not None else None
    nodes = list(nodes if nodes is not None else (last.nodes if last else []))
    queues = list(queues if queues is not None else (last.queues if last else []))
    views = loop.lifecycle.views(now)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    shares: dict[str, list[DeviceShare]] = defaultdict(list)
    held: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for v in views:
        if v.state == State.QUEUED.value:
            counts[v.queue][0] += 1
        elif v.state in _HOLDING:
            counts[v.queue][1] += 1
        for h in v.holdings:
            shares[h.node].append(DeviceShare(v.id, v.queue, h.gpu, h.device))
            into = held[h.node]
            into["gpu"] += h.gpu
            into["cpu"] += h.cpu
            into["memory"] += h.memory
    rows = [_said(workload_row(v, loop.positions.get(v.id), now), text) for v in views]
    levels = grouping_levels(loop.config.topologies)
    node_rows = [
        node_row(n, shares.get(n.name, ()), levels, held.get(n.name, {}), display, hidden_labels)
        for n in nodes
    ]
    tree = queue_rows(
        queues,
        loop.queue_status,
        {q: (c[0], c[1]) for q, c in counts.items()},
        closed=loop.config.closed_queues,
        refused=_refused_per_queue(loop),
    )
    return Board(
        backend=backend, at=now, queues=tree, workloads=rows, nodes=node_rows, levels=levels, status=status
    )


def _refused_per_queue(loop: SchedulingLoop) -> dict[str, int]:
    """Workloads of each queue that its access rule refuses, as the last cycle found
    (waiting, or running since before the rule: those keep running)."""
    last = loop.last
    if last is None or not last.result.refused:
        return {}
    queue_of = {j.name: j.queue for j in last.snapshot.jobs}
    out: dict[str, int] = defaultdict(int)
    for job in last.result.refused:
        if job in queue_of:
            out[queue_of[job]] += 1
    return out


def board_from_controller(ctl: Any, now: float, *, backend: str = "ray", **options: Any) -> Board:
    """The Board of a kai_ray.control.Controller (typed Any: the dashboard reads only its
    public tables): board_of with its current nodes and queues."""
    return board_of(ctl.loop, now, backend=backend, nodes=ctl.nodes.values(), queues=ctl.queues, **options)


_HOLDING = frozenset({State.ADMITTING.value, State.RUNNING.value, State.PREEMPTING.value})


def _said(row: dict[str, Any], text: Callable[[str], str]) -> dict[str, Any]:
    row["reason"] = text(row["reason"])
    for h in row["history"]:
        h["why"] = text(h["why"])
    if row["last_preemption"]:
        row["last_preemption"]["why"] = text(row["last_preemption"]["why"])
    return row


def grouping_levels(topologies: Mapping[str, Any]) -> list[str]:
    """The levels the Nodes page groups by: those of the first topology a person named
    (the controller's own one-node topology is not one to group by)."""
    for name, topo in topologies.items():
        if name != NODE_TOPOLOGY and topo.levels:
            return list(topo.levels)
    return []
