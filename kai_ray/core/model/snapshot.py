"""The scheduling core's input and output: plain, immutable-by-convention dataclasses.

A backend (scenario files, Ray, Kubernetes, the simulator) translates its world into a
`ClusterSnapshot`, calls `run_cycle`, and translates the `CycleResult` back. Units are
resolved before they reach the core: cpu in cores, memory and gpu memory in bytes, gpu
in devices (a value below 1 is a fraction of one device), time in seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kai_ray.core.model.access import QueueAccess, TenantSelector
from kai_ray.core.model.affinity import NodeAffinity, NodeRequirement, NodeSelectorTerm
from kai_ray.core.model.gpushare import device_share, shares_device

__all__ = [
    "BORROW",
    "CPU",
    "DEFAULT_ACTIONS",
    "DEFAULT_GPU_TYPE",
    "GPU",
    "HOSTNAME_LABEL",
    "MEMORY",
    "NODE_ID_LABELS",
    "PREEMPT",
    "REASON_CODES",
    "RESOURCES",
    "SPREAD_MODES",
    "TRY_NEXT_TYPE",
    "UNLIMITED",
    "Bind",
    "ClusterSnapshot",
    "CycleResult",
    "Decision",
    "Evict",
    "GpuTypeFungibility",
    "GpuTypeShare",
    "JobInfo",
    "NodeAffinity",
    "NodeInfo",
    "NodeRequirement",
    "NodeSelectorTerm",
    "Pipeline",
    "QueueAccess",
    "QueueInfo",
    "QueueStatus",
    "Reason",
    "Request",
    "Reserved",
    "SchedulerConfig",
    "TakeBack",
    "TaskInfo",
    "TaskStatus",
    "TenantSelector",
    "Topology",
    "TopologyConstraint",
]

# The resources that queues account for (quota, limit, fair share), in array order.
RESOURCES: tuple[str, str, str] = ("gpu", "cpu", "memory")
GPU, CPU, MEMORY = 0, 1, 2
UNLIMITED = -1.0  # a quota of -1 means "the whole cluster"; a limit of -1 means "no cap"
# The GPU type of a node whose type is not known (docs/gpu-types.md): a cluster with one
# type decides exactly as one without types.
DEFAULT_GPU_TYPE = "default"

DEFAULT_ACTIONS: tuple[str, ...] = (
    "allocate",
    "consolidation",
    "reclaim",
    "preempt",
    "stalegangeviction",
)


class TaskStatus(enum.Enum):
    PENDING = "Pending"
    BINDING = "Binding"  # placed this cycle on capacity free now
    PIPELINED = "Pipelined"  # placed this cycle on capacity still being released
    RUNNING = "Running"
    RELEASING = "Releasing"  # being evicted: holds its capacity until it is gone
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    # Which tasks count where, for the statuses; accounting.py applies it to the cycle's
    # working state, for the full build and the cycle cache alike.
    @property
    def holds_capacity(self) -> bool:
        """Holds what it asked for on its node (a releasing task, until it is gone)."""
        return self in _HOLDING

    @property
    def is_active(self) -> bool:
        """Counts toward the gang (minMember) and toward the queue's allocation:
        releasing tasks do not."""
        return self in _ACTIVE


_HOLDING = frozenset({TaskStatus.BINDING, TaskStatus.PIPELINED, TaskStatus.RUNNING, TaskStatus.RELEASING})
_ACTIVE = frozenset({TaskStatus.BINDING, TaskStatus.PIPELINED, TaskStatus.RUNNING})


@dataclass(frozen=True, slots=True)
class Request:
    """What one task asks for."""

    gpu: float = 0.0  # whole devices (an integer >= 1) or a fraction of one (0 < gpu < 1)
    gpu_memory: float = 0.0  # bytes of one device's memory, instead of `gpu`
    cpu: float = 0.0  # cores
    memory: float = 0.0  # bytes
    extended: tuple[tuple[str, float], ...] = ()  # other resources, sorted by name

    @property
    def is_fractional(self) -> bool:
        """Shares one device with others (a gpu fraction or a slice of gpu memory)."""
        return shares_device(self)

    def gpu_fraction(self, device_memory: float) -> float:
        """The share of one device this request takes on a node with that device memory
        (the rule: gpushare.py)."""
        return device_share(self, device_memory)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    gpus: int = 0
    cpu: float = 1000.0
    memory: float = 10 * 1024**4
    gpu_memory: float = 80 * 1024**3  # per device
    labels: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False  # no new placements; running tasks stay
    extended: tuple[tuple[str, float], ...] = ()
    gpu_model: str = ""  # the device's product name, as discovered (shown, never decided on)
    # The kind of GPU the node has, as queues and workloads name it (H100, A100, ...):
    # Ray's accelerator type, Kubernetes' nvidia.com/gpu.product label.
    gpu_type: str = DEFAULT_GPU_TYPE
    # Held by work this scheduler does not manage ("gpu", "cpu", "memory" or an extended
    # name): not free to place on, but still part of the node's capacity.
    used_outside: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class GpuTypeShare:
    """A queue's GPUs of one type (docs/gpu-types.md): quota, limit and over-quota weight
    beside the queue's plain gpu figures, which stay the total over every type."""

    gpu_type: str
    quota: float = 0.0  # -1: every GPU of the type
    limit: float = UNLIMITED
    over_quota_weight: float | None = None  # None: the queue's gpu over-quota weight


# How a workload that accepts several GPU types picks between them (docs/gpu-types.md,
# "Fungibility"), as Kueue's flavor fungibility: take the next type's room (TRY_NEXT_TYPE),
# or go over quota (BORROW) / evict (PREEMPT) in the type it prefers first.
BORROW, PREEMPT, TRY_NEXT_TYPE = "Borrow", "Preempt", "TryNextType"


@dataclass(frozen=True, slots=True)
class GpuTypeFungibility:
    """A queue's choice for its workloads that accept several GPU types."""

    # Borrow: its preferred type first, over the queue's quota of it if need be;
    # TryNextType: first the types it accepts within the queue's quota of each.
    when_can_borrow: str = BORROW
    # TryNextType: free room of any type it accepts before any eviction; Preempt: its
    # first type only, evicting there if need be, and later types' free room only after.
    when_can_preempt: str = TRY_NEXT_TYPE


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One queue of the tree. Per-resource triples are in RESOURCES order."""

    name: str
    parent: str | None = None
    priority: int = 100
    quota: tuple[float, float, float] = (0.0, 0.0, 0.0)
    limit: tuple[float, float, float] = (UNLIMITED, UNLIMITED, UNLIMITED)
    over_quota_weight: tuple[float, float, float] = (1.0, 1.0, 1.0)
    preempt_min_runtime: float | None = None  # None: inherit from the parent (default 0)
    reclaim_min_runtime: float | None = None
    # Defaults for the run time of its workloads that declare none (seconds; None: none):
    # read by the forecast (expected) and by the control plane's stop (max).
    expected_runtime: float | None = None
    max_runtime: float | None = None
    gpu_types: tuple[GpuTypeShare, ...] = ()  # per GPU type; a type not listed: no quota of it
    gpu_type_fungibility: GpuTypeFungibility | None = None  # None: the parent's (top: defaults)
    # Who may submit to it and at which priorities (model/access.py); None: no rule of
    # its own, its parent's holds (at the top: open to all, unless SchedulerConfig says
    # closed_queues).
    access: QueueAccess | None = None


# Node labels whose value is the node's own identity: Kubernetes' hostname label, and
# Ray's node id (kai-ray's Ray backend places STRICT_PACK over it). A topology level on
# one of them has one node per domain, so the core (1) counts a node that lacks the
# label as its own domain and (2) says "one node" in reasons rather than the raw key.
# It is a property of the label, not of one topology: the hostname level is implicit in
# every topology (a constraint may name it without listing it in Topology.levels), so a
# display name on Topology could not cover it; both keys are set by their platforms on
# every node, so one fixed set serves every backend.
HOSTNAME_LABEL = "kubernetes.io/hostname"
NODE_ID_LABELS = frozenset({HOSTNAME_LABEL, "ray.io/node-id"})


@dataclass(frozen=True, slots=True)
class Topology:
    name: str
    levels: tuple[str, ...]  # node labels, outermost first


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    topology: str
    required: str | None = None  # a level: every task inside one domain of it
    preferred: str | None = None  # a level: best effort


@dataclass(slots=True)
class TaskInfo:
    name: str
    status: TaskStatus
    request: Request
    node: str | None = None
    gpu_group: int | None = None  # device index on its node, for fractional tasks
    since: float = 0.0  # absolute time the task entered its status
    # The subgroup of its job it belongs to (JobInfo.subgroups); "" for none. Read only
    # when its job has subgroups: a task of a subgroup the job does not list is surplus.
    subgroup: str = ""
    # The nodes this task may use beyond its job's node selector (required node affinity
    # and its own nodeSelector pairs); None: any the job may use. Tasks of one job may differ.
    node_affinity: NodeAffinity | None = None


# JobInfo.spread: none, one task per node when possible, one task per node or wait.
SPREAD_MODES = ("", "preferred", "required")


@dataclass(slots=True)
class JobInfo:
    """A workload: a gang of tasks admitted all together (minMember), plus elastic surplus.

    With `subgroups` (KAI's PodGroup subGroups: name -> minimum), the gang is every
    subgroup's minimum of its own tasks (TaskInfo.subgroup), and `min_member` is not
    read: the rule is kai_ray/core/model/subgroups.py. Empty: one gang of gang_size tasks."""

    name: str
    queue: str
    tasks: list[TaskInfo]
    priority: int = 50
    preemptible: bool = True
    min_member: int = 0  # 0: every task is part of the gang
    created_at: float = 0.0
    topology: TopologyConstraint | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    stale_since: float | None = None  # when active tasks dropped below min_member
    # One task per node: "preferred" (best effort, like Ray's SPREAD) or "required"
    # (like STRICT_SPREAD: a task that finds no node of its own waits); "" for none.
    spread: str = ""
    subgroups: Mapping[str, int] = field(default_factory=dict)
    # Time, in seconds of run time (None: not known). Decisions do not read them: the
    # forecast of when waiting work starts does (kai_ray.control.forecast). `ran`: the
    # run time of its earlier runs (it was preempted), counted against both.
    expected_runtime: float | None = None
    max_runtime: float | None = None
    ran: float = 0.0
    # The GPU types its tasks may run on, most preferred first; empty: any. Its gang runs
    # on one type (the first of them with room) unless `mixed_gpu_types`.
    gpu_types: tuple[str, ...] = ()
    mixed_gpu_types: bool = False
    # Who submitted it (model/access.py): a namespace on Kubernetes, a token's tenant on
    # Ray; None: no tenant rule applies (a trusted submitter: Ray without tokens, an
    # admin). Its labels are the namespace's (or the Ray tenant's) for tenant selectors.
    tenant: str | None = None
    tenant_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def gang_size(self) -> int:
        """How many tasks the gang holds at least (with subgroups: their minimums' sum)."""
        if self.subgroups:
            return sum(self.subgroups.values())
        return self.min_member if self.min_member > 0 else len(self.tasks)


@dataclass(slots=True)
class ClusterSnapshot:
    nodes: list[NodeInfo]
    queues: list[QueueInfo]  # creation order: earlier is older (a tie-break)
    jobs: list[JobInfo]
    # Normalised historical usage per queue (0..1 per resource), for time-based fair share.
    usage: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)
    # An autoscaler may add nodes (the backend knows: Ray's autoscaler runs, or the
    # Kubernetes operator was told a cluster-autoscaler or Karpenter is there). Only
    # SchedulerConfig.preemption_delay_s reads it: waiting for nodes makes sense only
    # where nodes may come.
    can_grow: bool = False


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    gpu_placement: Literal["binpack", "spread"] = "binpack"
    cpu_placement: Literal["binpack", "spread"] = "binpack"
    gpu_device_order: Literal["pack", "spread"] = "pack"
    k_value: float = 1.0
    # Time-based fair share (KAI's time-aware fairness): the usage history a backend
    # keeps for ClusterSnapshot.usage (kai_ray.control.usage). The core itself reads
    # only the snapshot's usage; these say how a backend should build it.
    usage_window_s: float = 0.0  # seconds of history; 0: off (no history, plain DRF)
    usage_half_life_s: float = 0.0  # exponential decay of older usage; 0: none
    usage_window_type: Literal["sliding", "tumbling"] = "sliding"
    stale_gang_grace_period: float = 60.0  # seconds; negative: never evict
    # Seconds a gang that could start only by evicting others (reclaim, preempt, or
    # consolidation's moves) first waits for new nodes, counted from when it last started
    # waiting (policy.waiting_since), when the snapshot says the cluster can grow
    # (ClusterSnapshot.can_grow); 0: no wait, as without an autoscaler.
    preemption_delay_s: float = 0.0
    max_consolidation_preemptees: int = 16
    full_hierarchy_fairness: bool = True
    topologies: Mapping[str, Topology] = field(default_factory=dict)
    # Skip a search equivalent to one that already failed in this cycle (the same
    # placement inputs, see failedsearches.py). Off only to check that skipping changes nothing.
    skip_failed_searches: bool = True
    # Reservations with backfill (reservations.py): a gang that has waited this many
    # seconds and finds no room keeps the nodes it is expected to start on, as running
    # work ends; work behind it in line may use that room only if it is expected to end
    # before the gang's expected start. 0: off (KAI's semantics).
    reserve_after_s: float = 0.0
    max_reservations: int = 1  # gangs holding a reservation at once, first in line first
    # Queues are closed to tenants unless a queue's rule names them (QueueInfo.access):
    # a queue tree where no queue on the path sets a tenant rule admits no tenant. Off:
    # open to every tenant, as KAI (which only checks that the queue exists).
    closed_queues: bool = False


# ---------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Bind:
    job: str
    task: str
    node: str
    gpu_group: int | None = None


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Placed on capacity that evicted tasks are still releasing: bind once it is free."""

    job: str
    task: str
    node: str
    gpu_group: int | None = None


@dataclass(frozen=True, slots=True)
class Evict:
    job: str
    task: str
    node: str
    action: str  # consolidation | reclaim | preempt | stalegangeviction
    reason: str


@dataclass(frozen=True, slots=True)
class TakeBack:
    """A task placed earlier in this cycle and taken back as a victim before it started
    (KAI's reclaim and preempt take a session's new placements too, and report them
    Releasing). Nothing is carried out: the task was never bound, so it stays pending.
    `node` is where it had been placed."""

    job: str
    task: str
    node: str
    action: str  # reclaim | preempt | consolidation
    reason: str


Decision = Bind | Pipeline | Evict | TakeBack


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """Per queue after the cycle, in RESOURCES order."""

    deserved: tuple[float, float, float]
    fair_share: tuple[float, float, float]
    allocated: tuple[float, float, float]
    requested: tuple[float, float, float]
    # Per GPU type some queue names (docs/gpu-types.md): quota, limit, fair_share and
    # allocated, in devices; empty where no queue names a type.
    gpu_types: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


# Why a job waits, as a stable identifier (docs/semantics.md lists them with a line each):
# a backend or a person may filter on these; the words of `Reason.text` may change.
REASON_CODES: tuple[str, ...] = (
    "invalid",  # the job cannot be considered at all (unknown queue, ...)
    "not-tried",  # no action of this cycle tried it
    "gang-incomplete",  # fewer tasks left than its gang (some failed or finished)
    "gang-too-big",  # can never fit the cluster as it is, even empty
    "node-selector",  # no schedulable node matches its node selector
    "node-affinity",  # no schedulable node meets the required node affinity of one of its tasks
    "gpu-type",  # no schedulable node it may use has a GPU type it accepts
    "topology",  # no domain of its required topology level has room
    "spread",  # too few nodes with room hold none of its tasks (required spread)
    "no-room",  # would fit the empty cluster, not the room free now; no victim makes room
    "taken-back",  # placed this cycle, then taken back as a victim for a job that comes first
    "queue-limit",  # its queue, or one above it, is at its limit
    "queue-quota",  # non-preemptible: its queue, or one above it, would go over its quota
    "fair-share",  # reclaim would take its queue over its fair share
    "min-runtime",  # the running jobs that would make room are within their min runtime
    "preemption-delay",  # evicting would make room; it first waits for new nodes (autoscaler)
    "reserved",  # the room it fits in is held for a gang that waited long, which starts before it would end
    "queue-tenant",  # its queue does not admit its tenant (who submitted it): never placed
    "priority-ceiling",  # its priority is over its queue's ceiling, or not a class the queue allows
)
_CODES = frozenset(REASON_CODES)


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a job waits: a code from REASON_CODES and the words a person reads."""

    code: str
    text: str

    def __post_init__(self) -> None:
        if self.code not in _CODES:
            raise ValueError(f"reason code {self.code!r} is not one of {', '.join(REASON_CODES)}")


@dataclass(frozen=True, slots=True)
class Reserved:
    """A waiting gang's reservation: when it is expected to start, and on which nodes."""

    start: float
    nodes: tuple[str, ...]


@dataclass(slots=True)
class CycleResult:
    decisions: list[Decision]
    # Every job left with pending tasks -> why, in words a person understands.
    pending_reasons: dict[str, str]
    queues: dict[str, QueueStatus]
    # Jobs that could not be considered at all (unknown queue, ...) -> why.
    invalid: dict[str, str] = field(default_factory=dict)
    # Per leaf queue, its jobs still holding pending tasks, in the order allocate serves
    # them (the policy's job order on the state the cycle ends with): first = next in line.
    queue_order: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The same jobs as pending_reasons (invalid ones included) -> code and words.
    waiting: dict[str, Reason] = field(default_factory=dict)
    # Gangs still waiting that hold a reservation (SchedulerConfig.reserve_after_s).
    reservations: dict[str, Reserved] = field(default_factory=dict)
    # Jobs their queue does not take (QueueInfo.access) -> the rule's reason: the waiting
    # ones (also in `waiting`) and the running ones, which keep running, reported.
    refused: dict[str, Reason] = field(default_factory=dict)
