"""What the operator tells people and autoscalers: pod conditions, Events, Queue status.

A pending pod of a gang that waits for room gets `PodScheduled=False` with reason
`Unschedulable`, the reason a cluster autoscaler or Karpenter acts on; one held back by
its queue (limit, quota, fair share) or not schedulable as written gets the core's reason
code instead (`QueueLimit`, `FairShare`, ...), which no autoscaler buys a node for. The
gang's top owner (RayCluster, RayJob, RayService, Job or the pod) gets an Event whenever
its reason changes, with its place in its queue. Everything is written only when it
changes: a thousand waiting pods do not cost a thousand writes a cycle. A place in line
moves whenever a job arrives ahead of it or the line grows, so a pod whose message
changed only there is written again at most every `PLACE_REFRESH_S` (its reason, at once).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kai_ray.control.demand import wants_capacity
from kai_ray.control.forecast import Eta
from kai_ray.control.planner import Plan
from kai_ray.core import CycleResult, Evict, Reason
from kai_ray.k8s.client import ApiError, Kube, gather_limited
from kai_ray.k8s.gangs import Gang
from kai_ray.k8s.queues import KAI_RAY_QUEUE_API, QueueSet, queue_status_body
from kai_ray.k8s.suspension import is_virtual
from kai_ray.k8s.taints import describe

__all__ = ["Reporter", "condition_reason", "eta_phrase", "in_pods"]

log = logging.getLogger(__name__)
COMPONENT = "kai-ray"
_API_VERSIONS = {
    "RayCluster": "ray.io/v1",
    "RayJob": "ray.io/v1",
    "RayService": "ray.io/v1",
    "Job": "batch/v1",
    "Pod": "v1",
}
_EVICTED = {
    "preempt": "Preempted",
    "reclaim": "Reclaimed",
    "consolidation": "Consolidated",
    "stalegangeviction": "StaleGang",
}
KAI_UNITS = {"gpu": 1.0, "cpu": 1e-3, "memory": 1e6}  # core units per KAI unit
# A waiting pod whose message changed only in its place in line is written again at most
# this often: otherwise each job that joins a queue of a thousand waiting gangs rewrites
# all their pods (the line's length is in every message), and the API server's writes go
# to old news while new pods wait for their first word.
PLACE_REFRESH_S = 10.0


class Gangs(Protocol):
    """What the reporter reads of the backend's world (kai_ray.k8s.source.KubeSource)."""

    @property
    def gangs(self) -> Mapping[str, Gang]: ...
    @property
    def problems(self) -> Mapping[str, Gang]: ...
    @property
    def queue_set(self) -> QueueSet: ...
    def queue_access(self) -> Mapping[str, Mapping[str, Any]]: ...


def condition_reason(reason: Reason) -> str:
    """`Unschedulable` for work a new node would help; the code in CamelCase otherwise."""
    if wants_capacity(reason):
        return "Unschedulable"
    return "".join(part.capitalize() for part in reason.code.split("-"))


_OF_TASK = re.compile(r"\bof task ([^\s:]+)")


def in_pods(text: str, namespace: str) -> str:
    """A core reason in this backend's words: the core names a task, which is a pod here
    (`of task w-1` -> `of pod ml/w-1`, `of its tasks` -> `of its pods`)."""
    if "task" not in text:
        return text
    return _OF_TASK.sub(lambda m: f"of pod {namespace}/{m[1]}", text).replace("of its tasks", "of its pods")


def eta_phrase(eta: Eta | None) -> str:
    """The forecast start for a waiting pod's message, as a clock time rounded the more
    the further ahead it is (a message is written again only when it changes, not as
    time passes); "" without a forecast."""
    if eta is None:
        return ""
    if eta.at is None:
        return f"; {eta.text}"
    ahead = eta.at - eta.made_at
    step = 60.0 if ahead < 3600 else (300.0 if ahead < 86400 else 3600.0)
    at = dt.datetime.fromtimestamp(round(eta.at / step) * step, dt.UTC)
    return f"; expected to start about {at.strftime('%Y-%m-%d %H:%M')} UTC (run times: {eta.why})"


_Said = tuple[str, str, str, float]  # reason, message, message without its place, when


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reporter:
    def __init__(
        self,
        kube: Kube,
        in_flight: int = 32,
        place_refresh_s: float = PLACE_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.in_flight = kube, in_flight
        self.place_refresh_s, self.clock = place_refresh_s, clock
        # pod uid -> what it was told: (reason, message, the message without its place in
        # line, when written).
        self._pod_said: dict[str, _Said] = {}
        # gang id -> (the gang read, reason code, what its pods were all told): a gang that
        # waits as it did costs no look at its pods.
        self._told: dict[str, tuple[Gang, str, _Said]] = {}
        self._gang_said: dict[str, str] = {}  # gang id -> reason code of its last Event
        self._forecast_said: dict[str, bool] = {}  # gang id -> an Event of it said its start
        self._queue_said: dict[str, Any] = {}  # queue name -> status written
        self._refused_said: dict[str, str] = {}  # running gang id -> the rule's words told

    async def report(
        self, world: Gangs, result: CycleResult, plan: Plan, etas: Mapping[str, Eta] | None = None
    ) -> None:
        # The waiting pods' conditions go first, then the Events and the rest: a pod's
        # condition is what people, autoscalers and kubectl read of why it waits, and a
        # burst of new jobs should not wait for their Events to learn it.
        conditions: list[Any] = []
        calls: list[Any] = []
        etas = etas or {}
        for job, reason in result.waiting.items():
            gang = world.gangs.get(job)
            if gang is not None:
                self._waiting(gang, reason, plan.positions.get(job), etas.get(job), conditions, calls)
        for gang in world.problems.values():
            self._waiting(gang, Reason("invalid", gang.problem), None, None, conditions, calls)
        for job in plan.jobs:
            gang = world.gangs.get(job)
            if gang is not None and job not in result.waiting and self._gang_said.pop(job, ""):
                self._told.pop(job, None)
                self._forecast_said.pop(job, None)
                calls.append(self.event(gang, "Normal", "Scheduled", "placed by kai-ray"))
        calls += self._running_refused(world, result)
        calls += self._queues(result, world)
        for outcome in await gather_limited(conditions + calls, self.in_flight):
            if isinstance(outcome, ApiError) and outcome.status != 404:
                log.warning("status report failed: %s", outcome)
            elif isinstance(outcome, BaseException) and not isinstance(outcome, ApiError):
                log.warning("status report failed: %r", outcome)

    def _waiting(
        self,
        gang: Gang,
        reason: Reason,
        position: tuple[int, int] | None,
        eta: Eta | None,
        conditions: list[Any],
        events: list[Any],
    ) -> None:
        """Tell a waiting gang's pods why it waits (their writes added to `conditions`),
        and its owner when the reason changed (`events`)."""
        where = f" (position {position[0]} of {position[1]} in queue {gang.queue})" if position else ""
        words = in_pods(describe(reason.text), gang.namespace)
        start = eta_phrase(eta)
        message, rest = words + where + start, words + start  # rest: without its place in line
        word, now = condition_reason(reason), self.clock()
        told = self._told.get(gang.id)
        if (
            told
            and told[0] is gang
            and told[1] == reason.code
            and self._stands(told[2], word, message, rest, now)
        ):
            return  # as told, or only its place in line moved since lately
        writes, settled = self._pod_conditions(gang, word, message, rest, now)
        conditions += writes
        if settled:
            self._told[gang.id] = (gang, reason.code, (word, message, rest, now))
        else:  # some pods' new place waits for the refresh: their gang is looked at again
            self._told.pop(gang.id, None)
        known = eta is not None and eta.at is not None
        if self._gang_said.get(gang.id) != reason.code:
            self._gang_said[gang.id] = reason.code
            self._forecast_said[gang.id] = known
            events.append(self.event(gang, "Normal" if wants_capacity(reason) else "Warning", word, message))
        elif known and not self._forecast_said.get(gang.id):
            self._forecast_said[gang.id] = True  # its start became known after its first Event
            events.append(self.event(gang, "Normal", "Forecast", message))

    def _pod_conditions(
        self, gang: Gang, word: str, message: str, rest: str, now: float
    ) -> tuple[list[Any], bool]:
        """The writes of the gang's waiting pods whose condition is not this one: at once
        where the reason or its words changed, at most every place_refresh_s where only
        the place in line did; and whether every such pod now holds this message."""
        calls: list[Any] = []
        settled = True
        for pod in gang.pods:
            if pod.get("spec", {}).get("nodeName") or is_virtual(pod):
                continue  # a virtual pod stands for a suspended owner's: it has no status
            uid = pod["metadata"].get("uid", "")
            said = self._pod_said.get(uid)
            if self._stands(said, word, message, rest, now):
                settled = settled and said is not None and said[1] == message
                continue
            self._pod_said[uid] = (word, message, rest, now)
            calls.append(self._pod_condition(pod, word, message))
        return calls, settled

    def _stands(self, said: _Said | None, word: str, message: str, rest: str, now: float) -> bool:
        """Whether what was told may stand: the same, or the same but for the place in
        line, told less than place_refresh_s ago."""
        if said is None or said[0] != word or said[2] != rest:
            return False
        return said[1] == message or now - said[3] < self.place_refresh_s

    async def _pod_condition(self, pod: dict[str, Any], word: str, message: str) -> None:
        meta = pod["metadata"]
        body = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": word,
                        "message": message,
                        "lastTransitionTime": _now(),
                    }
                ]
            }
        }
        await self.kube.patch(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", body, merge=False
        )

    async def evicted(self, pod: dict[str, Any], job: str, e: Evict) -> None:
        meta = pod["metadata"]
        word = _EVICTED.get(e.action, "Evicted")
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
        }
        await self._post_event(meta["namespace"], involved, "Warning", word, f"{e.reason} (gang {job})")

    async def event(self, gang: Gang, kind: str, reason: str, message: str) -> None:
        involved = {
            "apiVersion": _API_VERSIONS.get(gang.kind, "v1"),
            "kind": gang.kind,
            "name": gang.name,
            "namespace": gang.namespace,
        }
        await self._post_event(gang.namespace, involved, kind, reason, message)

    async def _post_event(
        self, ns: str, involved: dict[str, Any], kind: str, reason: str, message: str
    ) -> None:
        now = _now()
        await self.kube.create(
            f"/api/v1/namespaces/{ns}/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{involved['name']}.", "namespace": ns},
                "involvedObject": involved,
                "reason": reason,
                "message": message[:1000],
                "type": kind,
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )

    def _running_refused(self, world: Gangs, result: CycleResult) -> list[Any]:
        """Running work that its queue's access rule no longer admits (the rule, or the
        namespace's labels, changed since it started) is not evicted: it is told, once."""
        calls = []
        for job, reason in result.refused.items():
            gang = world.gangs.get(job)
            if gang is None or job in result.waiting or self._refused_said.get(job) == reason.text:
                continue
            self._refused_said[job] = reason.text
            message = f"runs, but its queue no longer admits it: {reason.text}; it is not evicted for this"
            calls.append(self.event(gang, "Warning", condition_reason(reason), message))
        for job in [j for j in self._refused_said if j not in result.refused]:
            del self._refused_said[job]
        return calls

    def _queues(self, result: CycleResult, world: Gangs) -> list[Any]:
        queues, access = world.queue_set, world.queue_access()
        waiting = Counter(reason_queue for reason_queue in _waiting_queues(result))
        refused = Counter(g.queue for job in result.refused if (g := world.gangs.get(job)) is not None)
        calls: list[Any] = []
        for name, obj in queues.source.items():
            problem = queues.problems.get(name, "")
            status = result.queues.get(name)
            body = queue_status_body(
                name, status, waiting.get(name, 0), problem, KAI_UNITS, access.get(name), refused.get(name, 0)
            )
            body = _finite(body)
            if self._queue_said.get(name) == body:
                continue
            self._queue_said[name] = body
            calls.append(self._queue_status(obj, body))
            if problem:
                involved = {
                    "apiVersion": obj.get("apiVersion", KAI_RAY_QUEUE_API),
                    "kind": "Queue",
                    "name": name,
                }
                calls.append(self._post_event("default", involved, "Warning", "InvalidQueue", problem))
        return calls

    async def _queue_status(self, obj: dict[str, Any], status: dict[str, Any]) -> None:
        api = obj.get("apiVersion", KAI_RAY_QUEUE_API)
        path = f"/apis/{api}/queues/{obj['metadata']['name']}/status"
        await self.kube.patch(path, {"status": status})


def _waiting_queues(result: CycleResult) -> list[str]:
    return [queue for queue, jobs in result.queue_order.items() for _ in jobs]


def _finite(value: Any) -> Any:
    """JSON has no infinity: an unlimited amount is written as -1, as KAI writes it."""
    if isinstance(value, float) and not math.isfinite(value):
        return -1
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
