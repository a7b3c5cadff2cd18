"""A small autoscaler for the simulator (`kai-ray sim --autoscale`), as a user of Ray's
autoscaler or Kubernetes' cluster-autoscaler expects one to behave: gangs that wait for
room ask for nodes; nodes of one shape are added, up to a maximum, a fixed provisioning
latency after they were asked for; a node it added that has held nothing for a while is
removed. The cluster it starts from is never shrunk.

Which waiting work asks for nodes is the rule every backend follows
(kai_ray.control.demand: the core's reason code says whether room would help; work held
back by its queue never asks). A gang waiting out its preemption delay asks too: that is
what the delay waits for.

How many nodes: the waiting gangs' workers are packed, largest first, into the free room
of the nodes it added (launching ones count whole), then into new nodes of the shape; it
launches as many as that took. The cluster it started from is not counted: the scheduler
has said these gangs do not fit there. A worker that an empty node of the shape could not
hold (too big, or a GPU type its gang does not accept) asks for nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kai_ray.config.errors import ConfigError
from kai_ray.control.demand import room_would_help
from kai_ray.control.workload import State, Workload
from kai_ray.core import DEFAULT_GPU_TYPE, HOSTNAME_LABEL, NodeInfo
from kai_ray.sim.cluster import NODE_CPU, NODE_MEMORY
from kai_ray.sim.durations import parse_duration
from kai_ray.sim.gputypes import GPU_TYPE_FIX, gpu_type_problem
from kai_ray.sim.ports import Amount

__all__ = [
    "DEFAULT_IDLE_S",
    "DEFAULT_LATENCY_S",
    "Autoscaler",
    "NodeShape",
    "delay_ends",
    "largest_growth",
    "parse_autoscale",
    "too_big",
]

DEFAULT_LATENCY_S = 300.0  # a cloud VM's boot and join: about 5 minutes
DEFAULT_IDLE_S = 600.0  # the cluster-autoscaler's scale-down-unneeded-time (Ray's default: 5 min)
ADDED_PREFIX = "auto-"  # the names of the nodes it adds: auto-00000, ...
_SPEC = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?::\s*(\S+?))?\s*$")
_FIX = "write MAXxGPUS[:TYPE][,latency=T][,idle=T], e.g. 4x8, 4x8:H100,latency=5m,idle=10m"
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What the autoscaler adds: nodes like `node`, at most `max_nodes` of them at once."""

    node: NodeInfo
    max_nodes: int
    latency_s: float = DEFAULT_LATENCY_S  # from asking to the node being ready
    idle_s: float = DEFAULT_IDLE_S  # a node it added that holds nothing this long goes


def parse_autoscale(text: str) -> NodeShape:
    """`4x8` (up to 4 nodes of 8 GPUs, 64 cores and 512 GiB, as `--cluster 4x8`),
    `4x8:H100` (of that GPU type), then `,latency=T` and `,idle=T` (`5m`, `300`)."""
    first, *options = text.split(",")
    m = _SPEC.match(first)
    if not m:
        raise ConfigError(f"{text!r}: {_FIX}", field="--autoscale")
    gpu_type = m.group(3) or DEFAULT_GPU_TYPE
    problem = gpu_type_problem(gpu_type)
    if problem is not None:
        raise ConfigError(f"{text!r}: the GPU type {problem}; {GPU_TYPE_FIX}", field="--autoscale")
    times = {"latency": DEFAULT_LATENCY_S, "idle": DEFAULT_IDLE_S}
    for option in options:
        key, _, value = option.partition("=")
        if key.strip() not in times or not value:
            raise ConfigError(f"{text!r}: {option!r} is not latency=T or idle=T; {_FIX}", field="--autoscale")
        times[key.strip()] = parse_duration(value, "--autoscale")
    if int(m.group(1)) < 1:
        raise ConfigError(f"{text!r}: at least one node; {_FIX}", field="--autoscale")
    node = NodeInfo("", int(m.group(2)), NODE_CPU, NODE_MEMORY, gpu_type=gpu_type)
    return NodeShape(node, int(m.group(1)), times["latency"], times["idle"])


@dataclass
class Autoscaler:
    """The nodes it added and is adding; the engine asks it what is due when."""

    shape: NodeShape
    launching: list[tuple[float, NodeInfo]] = field(default_factory=list)  # (ready at, node)
    ready: dict[str, NodeInfo] = field(default_factory=dict)  # name -> node, in the cluster
    idle_since: dict[str, float] = field(default_factory=dict)  # ready nodes holding nothing
    launched: int = 0  # every node it ever asked for (their names count up)
    up_since: dict[str, float] = field(default_factory=dict)  # ready node -> when it came
    node_s: float = 0.0  # seconds nodes it added were up, of those already removed
    peak: int = 0  # the most nodes it had added at once (ready or launching)

    def next_due(self) -> float:
        """When a node it launched is ready, or one it added has been idle long enough."""
        ready = min((at for at, _ in self.launching), default=math.inf)
        idle = min(self.idle_since.values(), default=math.inf) + self.shape.idle_s
        return min(ready, idle)

    def arrive(self, now: float) -> list[NodeInfo]:
        """The nodes that are ready now (they join the cluster)."""
        came = [node for at, node in self.launching if at <= now]
        self.launching = [(at, node) for at, node in self.launching if at > now]
        for node in came:
            self.ready[node.name] = node
            self.up_since[node.name] = now
            self.idle_since[node.name] = now  # until something is placed on it
        return came

    def leave(self, now: float) -> list[NodeInfo]:
        """The nodes it added that have held nothing for its idle time (they go)."""
        gone = [self.ready[n] for n, since in self.idle_since.items() if since + self.shape.idle_s <= now]
        for node in gone:
            del self.ready[node.name], self.idle_since[node.name]
            self.node_s += now - self.up_since.pop(node.name)
        return gone

    def note_use(self, now: float, held_on: Mapping[str, Amount]) -> None:
        """Which nodes it added hold something now (the executor's reservations)."""
        for name in self.ready:
            if _holds(held_on.get(name)):
                self.idle_since.pop(name, None)
            else:
                self.idle_since.setdefault(name, now)

    def ask(self, now: float, waiting: Iterable[Workload], held_on: Mapping[str, Amount]) -> int:
        """Launch the nodes the gangs waiting for room need (ready `latency_s` from now);
        how many it launched."""
        room = [_free(node, held_on.get(name)) for name, node in self.ready.items()]
        room += [_free(node, None) for _, node in self.launching]
        new = 0
        for worker in sorted(_wanted(waiting, self.shape.node), reverse=True):
            spot = next((r for r in room if _fits(worker, r)), None)
            if spot is None:
                if len(self.ready) + len(self.launching) + new >= self.shape.max_nodes:
                    continue  # at its maximum: smaller workers may still fit the room it has
                spot = _free(self.shape.node, None)
                room.append(spot)
                new += 1
            spot[0], spot[1], spot[2] = spot[0] - worker[0], spot[1] - worker[1], spot[2] - worker[2]
        for _ in range(new):
            self._launch(now)
        return new

    def _launch(self, now: float) -> None:
        name = f"{ADDED_PREFIX}{self.launched:05d}"
        self.launched += 1
        labels = {**self.shape.node.labels, HOSTNAME_LABEL: name}
        node = NodeInfo(
            name,
            self.shape.node.gpus,
            self.shape.node.cpu,
            self.shape.node.memory,
            self.shape.node.gpu_memory,
            labels=labels,
            gpu_type=self.shape.node.gpu_type,
        )
        self.launching.append((now + self.shape.latency_s, node))
        self.peak = max(self.peak, len(self.ready) + len(self.launching))

    def figures(self, end: float) -> dict[str, float | int]:
        """For summary.json: nodes it added, their node-hours up to `end`, the most at once."""
        up = self.node_s + sum(max(0.0, end - since) for since in self.up_since.values())
        return {"nodes_added": self.launched, "node_hours": up / 3600.0, "peak_nodes": self.peak}


def largest_growth(shape: NodeShape) -> list[NodeInfo]:
    """The most it may add at once: what a job may be sized against."""
    return [shape.node] * shape.max_nodes


def too_big(gpus: float, gang: int, nodes: Iterable[NodeInfo]) -> str:
    """Why a gang of `gang` workers of `gpus` GPUs each fits nowhere even on the largest
    cluster the autoscaler may make (`nodes`), or "" when it may fit."""
    per_worker = max(gpus, 1.0) if gpus > 0 else 0.0  # a fraction still needs a device
    room = sum(n.gpus for n in nodes if n.gpus >= per_worker)
    if room + _EPS >= gpus * gang:
        return ""
    return f"it needs {gang} worker(s) of {gpus:g} GPUs, more than the cluster may grow to ({room:g} GPUs)"


def delay_ends(waiting: Iterable[Workload], delay_s: float, now: float) -> float:
    """When the first of the gangs waiting out their preemption delay may evict (each
    counts from when it last started waiting: the workload's `since`); inf for none."""
    ends = [w.since + delay_s for w in waiting if w.reason_code == "preemption-delay"]
    # Never now or before: a delay that ends within rounding of now ends at the next step.
    return max(min(ends), now + 1e-3) if ends else math.inf


def _wanted(waiting: Iterable[Workload], shape: NodeInfo) -> list[Amount]:
    """The workers of the gangs that wait for room, each as (GPUs, cores, memory), that an
    empty node of the shape could hold."""
    workers: list[Amount] = []
    for w in waiting:
        if w.state is not State.QUEUED or not room_would_help(w.reason_code):
            continue
        if w.spec.accelerator_type and shape.gpu_type not in w.spec.accelerator_type:
            continue  # a node of another type would not help it
        r = w.spec.resources_per_worker
        worker = (float(r.get("GPU", 0.0)), float(r.get("CPU", 0.0)), float(r.get("memory", 0.0)))
        if _fits(worker, list(_free(shape, None))):
            workers += [worker] * w.spec.gang
    return workers


def _free(node: NodeInfo, held: Amount | None) -> list[float]:
    gpus, cpu, memory = held or (0.0, 0.0, 0.0)
    return [node.gpus - gpus, node.cpu - cpu, node.memory - memory]


def _fits(worker: Amount, room: list[float]) -> bool:
    return all(want <= free + _EPS for want, free in zip(worker, room, strict=True))


def _holds(held: Amount | None) -> bool:
    return held is not None and any(abs(x) > _EPS for x in held)
