"""The cycle's nodes: capacity as numpy arrays (rows nodes, columns resources), the GPU
devices that fractional work shares, and what one request takes of a node.

Node capacity columns: 0 = whole GPU devices, 1 = cpu cores, 2 = memory bytes, then the
extended resources. Fractional GPU work lives on `Device`s (a device hosting fractions
counts as one used whole device at node level). Changed only through a `Statement`
(statement.py), so that every change can be rolled back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kai_ray.core.model.gpushare import fixed_share, shares_device, whole_devices
from kai_ray.core.model.snapshot import NodeInfo, Request

__all__ = [
    "EPS",
    "BoolArray",
    "Device",
    "FloatArray",
    "Nodes",
    "PerRequest",
    "RequestCache",
    "charge_device",
    "cluster_total",
    "node_demand",
    "per_request",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
EPS = 1e-9


@dataclass(slots=True)
class Device:
    """One GPU shared by fractional tasks: the part of it free now and being released.
    `released`: every share on it is being released, so it counts as a releasing whole
    GPU of its node and holds no room of its own (Statement.evict)."""

    idle: float = 1.0
    releasing: float = 0.0
    released: bool = False


class Nodes:
    """Per-node capacity, vectorised: rows are nodes, columns resources."""

    def __init__(self, infos: Sequence[NodeInfo], extended: Sequence[str]) -> None:
        self.infos = list(infos)
        self.names = [n.name for n in infos]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.columns = ("gpu", "cpu", "memory", *extended)
        n, r = len(infos), len(self.columns)
        self.capacity = np.zeros((n, r), dtype=np.float64)
        for i, node in enumerate(infos):
            ext = dict(node.extended)
            self.capacity[i] = [node.gpus, node.cpu, node.memory, *(ext.get(e, 0.0) for e in extended)]
        self.idle = self.capacity.copy()
        column = {name: c for c, name in enumerate(self.columns)}
        for i, node in enumerate(infos):
            for name, amount in node.used_outside:
                c = column.get(name)
                if c is not None:
                    self.idle[i, c] = max(0.0, self.idle[i, c] - amount)
        # What work outside the scheduler holds, per node (for reasons only).
        self.outside = self.capacity - self.idle
        # Idle before any task of ours: what a node's row is rebuilt from (incremental/).
        self.base_idle = self.idle.copy()
        self.releasing = np.zeros((n, r))
        self.schedulable: BoolArray = np.array([not x.unschedulable for x in infos], dtype=bool)
        self.device_memory = np.array([x.gpu_memory for x in infos], dtype=np.float64)
        self.gpus = np.array([x.gpus for x in infos], dtype=np.int64)
        self.devices: list[dict[int, Device]] = [{} for _ in infos]
        # Best fractional room per node (shared devices only, released parts included),
        # kept in step with `devices`.
        self.frac_future = np.zeros(n)
        # Indexes over idle capacity (see nodeindex.py) to keep in step on every change.
        self.watchers: list[Callable[[int], None]] = []

    def changed(self, node: int) -> None:
        for watch in self.watchers:
            watch(node)

    def __len__(self) -> int:
        return len(self.names)

    def refresh_fractions(self, node: int) -> None:
        devs = self.devices[node].values()
        self.frac_future[node] = max((d.idle + d.releasing for d in devs), default=0.0)

    def new_device_index(self, node: int) -> int:
        used = self.devices[node]
        return next(i for i in range(len(used) + 1) if i not in used)


# A request's node demand, its queue amount (None: sized per node) and whether it shares
# a device: computed once per distinct request (per_request).
PerRequest = tuple[FloatArray, FloatArray | None, bool]
RequestCache = dict[Request, PerRequest]


def cluster_total(nodes: Nodes) -> FloatArray:
    """The capacity fair share splits: every node's gpu, cpu and memory, column by column."""
    cap = nodes.capacity
    return np.array([cap[:, 0].sum(), cap[:, 1].sum(), cap[:, 2].sum()]) if len(cap) else np.zeros(3)


def node_demand(req: Request, columns: Sequence[str]) -> FloatArray:
    """What one task takes of a node, in the nodes' columns: whole GPUs only (a fraction
    lives on a shared device), cpu, memory, then the extended resources."""
    ext = dict(req.extended)
    return np.array(
        [whole_devices(req), req.cpu, req.memory, *(ext.get(c, 0.0) for c in columns[3:])], dtype=np.float64
    )


def per_request(req: Request, columns: Sequence[str]) -> PerRequest:
    """A request's node demand; its queue amount unless that depends on the node (a
    gpu-memory slice: ClusterState.queue_amount sizes it there); whether it shares a
    device."""
    share = fixed_share(req)
    amount = None if share is None else np.array([share, req.cpu, req.memory], dtype=np.float64)
    return node_demand(req, columns), amount, shares_device(req)


def charge_device(nodes: Nodes, node: int, group: int | None, fraction: float, releasing: bool) -> int:
    """Take a task's share of a device on the node (its own `group`, else the first that
    fits, else a fresh one, which takes one whole device of the node); the device index."""
    devices = nodes.devices[node]
    if group is None:
        fitting = [i for i, d in sorted(devices.items()) if d.idle + EPS >= fraction]
        group = fitting[0] if fitting else nodes.new_device_index(node)
    device = devices.get(group)
    if device is None:
        device = devices[group] = Device()
        nodes.idle[node, 0] -= 1
    device.idle -= fraction
    if releasing:
        device.releasing += fraction
    nodes.refresh_fractions(node)
    return group
