"""The control plane every backend shares: the one scheduling loop (control/loop.py),
the ports a backend implements (control/ports.py), the planner, the usage history,
validation and views; and, where the scheduler owns its workloads (Ray, the
simulator), the workload table with its lifecycle and write-ahead store
(control/controller.py). No Ray and no Kubernetes here: a backend is a set of port
adapters (kai_ray.ray for Ray, kai_ray.k8s for Kubernetes); kai_ray.control.memory
holds in-memory ones.

    Controller(nodes, executor, store, clock, queues, config).step()
"""

from kai_ray.control.controller import OWNER_KEY, Controller
from kai_ray.control.events import Admitted, ControlEvent, Preempted, WorkloadChanged
from kai_ray.control.lifecycle import transition
from kai_ray.control.loop import CycleListener, SchedulingLoop, StepResult
from kai_ray.control.planner import JobPlan, Plan, PlanError, plan_cycle
from kai_ray.control.ports import (
    Actuator,
    BackendError,
    Clock,
    ClusterSource,
    Executor,
    Lifecycle,
    NodeSource,
    Record,
    Store,
    StoreConflict,
    WorkerPlacement,
)
from kai_ray.control.queues import QueueChange, QueueChangeError
from kai_ray.control.validate import SubmitError
from kai_ray.control.workload import (
    GROUP_PREFIX,
    TERMINAL,
    SlotState,
    State,
    TransitionError,
    Workload,
    WorkloadSpec,
    group_owner,
    task_index,
    task_name,
)

__all__ = [
    "GROUP_PREFIX",
    "OWNER_KEY",
    "TERMINAL",
    "Actuator",
    "Admitted",
    "BackendError",
    "Clock",
    "ClusterSource",
    "ControlEvent",
    "Controller",
    "CycleListener",
    "Executor",
    "JobPlan",
    "Lifecycle",
    "NodeSource",
    "Plan",
    "PlanError",
    "Preempted",
    "QueueChange",
    "QueueChangeError",
    "Record",
    "SchedulingLoop",
    "SlotState",
    "State",
    "StepResult",
    "Store",
    "StoreConflict",
    "SubmitError",
    "TransitionError",
    "WorkerPlacement",
    "Workload",
    "WorkloadChanged",
    "WorkloadSpec",
    "group_owner",
    "plan_cycle",
    "task_index",
    "task_name",
    "transition",
]
