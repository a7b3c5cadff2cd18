"""The control plane every backend shares: workloads and their lifecycle, the planner,
validation, views, and the controller that drives one scheduling loop through the
ports (kai_ray.control.ports). No Ray and no Kubernetes here: a backend is a set of
port adapters (kai_ray.ray for Ray); kai_ray.control.memory holds in-memory ones.

    Controller(cluster, actuator, store, clock, queues, config).step()
"""

from kai_ray.control.controller import OWNER_KEY, Controller, StepResult
from kai_ray.control.events import Admitted, ControlEvent, Preempted, WorkloadChanged
from kai_ray.control.lifecycle import transition
from kai_ray.control.planner import JobPlan, Plan, PlanError, plan_cycle
from kai_ray.control.ports import (
    ActionFailed,
    Actuator,
    Clock,
    ClusterSource,
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
    "ActionFailed",
    "Actuator",
    "Admitted",
    "Clock",
    "ClusterSource",
    "ControlEvent",
    "Controller",
    "JobPlan",
    "Plan",
    "PlanError",
    "Preempted",
    "QueueChange",
    "QueueChangeError",
    "Record",
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
