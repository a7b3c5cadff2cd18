"""`kai-ray bench k8s --shape NAME`: the shapes of KAI-Scheduler's own scale tests
(test/e2e/scale of KAI's source: a distributed job under a topology, a reclaim for one
very large job, unschedulable jobs, distributed jobs of several sizes), run end to end on
a fresh real kube-apiserver (kai_ray.testing.apiserver) per scheduler, with KAI's objects:
Queues of `scheduling.run.ai/v2` (a parent and leaves), KAI's four PriorityClasses, and
distributed jobs as KAI's scale tests make them: a batch Job with
`kai.scheduler/batch-min-member` (one PodGroup of that minMember under KAI's podgrouper;
one gang of that size under kai-ray) and the topology annotations, whose pods the bench
makes itself, as the Job controller would (none runs: the Job makes no pods of its own).

Every figure is read the same way whichever scheduler runs: the bench's own watch of the
pods (kai_ray.bench.k8stracker), from the moment the bench's request creating the last pod
of the step was answered. kai-ray's operator runs as a process of its own
(kai_ray.bench.k8sschedulers); with `kai_bin`, KAI's binaries then run the same shape on
another fresh server, and the result carries both and their ratio.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kai_ray.bench.k8sschedulers import KaiBinaries, KaiRayOperator, Scheduler, check_kai_bin
from kai_ray.bench.k8stracker import PART, Tracker
from kai_ray.k8s.client import Kube, gather_limited, load_kubeconfig, run_async
from kai_ray.k8s.gangs import BATCH_MIN_MEMBER, PREEMPTIBILITY_LABEL, QUEUE_LABEL, TOPOLOGY, TOPOLOGY_REQUIRED
from kai_ray.testing.apiserver import ApiServer
from kai_ray.testing.fakes import FakeKubelet, make_node

__all__ = ["SHAPES", "Plan", "plan_shape", "run_shape"]

SHAPES = ("topology-512", "reclaim-250", "unschedulable-1000", "gangs")
NS = "bench"
SCHEDULER_NAME = "kai-scheduler"
ZONE, RACK = "topology.kubernetes.io/zone", "bench.kai-ray.io/rack"
TOPOLOGY_NAME = "bench-topology"
NODES_PER_RACK = 16
PARENT = "bench-parent"
NO_NODE = {"bench.kai-ray.io/pool": "none"}  # a node selector no node matches
KAI_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
IN_FLIGHT = 32  # creations in flight


@dataclass(frozen=True)
class Plan:
    """One shape at one size: the nodes, the queues, and what is submitted."""

    shape: str
    gpus_per_node: int
    nodes: list[tuple[str, dict[str, str]]]  # (name, labels)
    queues: dict[str, int]  # leaf queue -> GPU quota (-1: no quota), under PARENT
    pods: int  # the job's pods (topology), the gang's (reclaim), the jobs (unschedulable)
    gpus_per_pod: int = 1
    gangs: tuple[int, ...] = ()
    fill: int = 0  # reclaim: one-GPU pods filling the cluster first
    zones: dict[str, int] = field(default_factory=dict)  # topology: zone -> nodes
    config: dict[str, Any] = field(default_factory=dict)  # kai-ray's settings file

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "shape": self.shape,
            "nodes": len(self.nodes),
            "gpus_per_node": self.gpus_per_node,
        }
        out |= (
            {"pods": self.pods, "gpus_per_pod": self.gpus_per_pod}
            if self.pods
            else {"gangs": list(self.gangs)}
        )
        if self.zones:
            fits = [
                z for z, n in self.zones.items() if n * self.gpus_per_node >= self.pods * self.gpus_per_pod
            ]
            out |= {"zones": self.zones, "zone_that_fits": fits, "nodes_per_rack": NODES_PER_RACK}
            out |= {"required_level": ZONE}
        if self.fill:
            out |= {"fill_pods": self.fill, "queues_gpu_quota": self.queues}
        return out


def plan_shape(
    shape: str,
    *,
    pods: int | None = None,
    nodes: int | None = None,
    gpus_per_node: int = 8,
    gangs: tuple[int, ...] | None = None,
) -> Plan:
    """The shape's layout (ValueError naming the fix for sizes that do not make it)."""
    gpn = gpus_per_node
    if shape not in SHAPES:
        raise ValueError(f"no shape {shape!r}: use one of {', '.join(SHAPES)}")
    if shape in ("topology-512", "reclaim-250") and nodes is not None:
        raise ValueError(f"{shape} lays its nodes out from its pods: give --pods, not --nodes")
    if shape == "topology-512":
        size, gpp = pods or 512, 2
        if gpn < gpp or size < gpn:
            need = f"--gpus-per-node {gpp} or more and --pods {gpn} or more"
            raise ValueError(f"{shape}: its pods ask for {gpp} GPUs each: give {need}")
        need = math.ceil(size * gpp / gpn)  # nodes the job fills
        # Four zones; only the third holds the job (with room to spare), the others
        # fall short by an eighth: a required zone that fits, but not every zone does.
        small, big = need - max(1, need // 8), need + max(1, 3 * need // 8)
        zones = {"zone-a": small, "zone-b": small, "zone-c": big, "zone-d": small}
        layout = [
            (f"{zone}-{k:03d}", {ZONE: zone, RACK: f"{zone}-rack-{k // NODES_PER_RACK:02d}"})
            for zone, count in zones.items()
            for k in range(count)
        ]
        config = {"topologies": {TOPOLOGY_NAME: {"levels": [ZONE, RACK]}}}
        return Plan(shape, gpn, layout, {"bench": -1}, size, gpp, zones=zones, config=config)
    if shape == "reclaim-250":
        # KAI's "reclaims for one very large job": the cluster full of one-GPU pods of a
        # queue of no quota, then a job of whole-node pods, as many as half the nodes, of a
        # queue whose quota is what that job asks.
        size = pods or 250
        count = 2 * size
        queues = {"filler": 0, "starved": size * gpn}
        return Plan(shape, gpn, _plain_nodes(count), queues, size, gpn, fill=count * gpn)
    count = 500 if nodes is None else nodes
    if shape == "unschedulable-1000":
        return Plan(shape, gpn, _plain_nodes(count), {"bench": -1}, pods or 1000)
    sizes = gangs or (8, 64, 256)
    if sum(sizes) > count * gpn:
        raise ValueError(f"gangs of {sizes} one-GPU pods need {sum(sizes)} GPUs: give more --nodes")
    return Plan(shape, gpn, _plain_nodes(count), {"bench": -1}, 0, 1, gangs=tuple(sizes))


def _plain_nodes(count: int) -> list[tuple[str, dict[str, str]]]:
    return [(f"node-{i:04d}", {}) for i in range(count)]


# ---------------------------------------------------------------- running


def run_shape(
    shape: str,
    *,
    pods: int | None = None,
    nodes: int | None = None,
    gpus_per_node: int = 8,
    gangs: tuple[int, ...] | None = None,
    kai_bin: Path | None = None,
) -> dict[str, Any]:
    """kai-ray's figures on the shape; with `kai_bin`, KAI's beside them and the ratio
    (KAI's seconds over kai-ray's: above 1, kai-ray was faster)."""
    plan = plan_shape(shape, pods=pods, nodes=nodes, gpus_per_node=gpus_per_node, gangs=gangs)
    kai_crds = check_kai_bin(kai_bin) if kai_bin is not None else None  # before anything starts
    out = plan.describe()
    out["kai_ray"] = _measure(plan, KaiRayOperator(kai_crds))
    if kai_bin is not None:
        out["kai"] = _measure(plan, KaiBinaries(kai_bin))
        out["kai_over_kai_ray"] = _ratios(out["kai_ray"], out["kai"])
    return out


def _ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> Any:
    if "seconds" in ours:
        return round(theirs["seconds"] / max(ours["seconds"], 1e-6), 2)
    return {k: _ratios(v, theirs[k]) for k, v in ours.items() if isinstance(v, dict) and "seconds" in v}


def _measure(plan: Plan, scheduler: Scheduler) -> dict[str, Any]:
    started = time.perf_counter()
    with ApiServer() as api:
        figures = run_async(_run(api, plan, scheduler))
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    return figures


async def _run(api: ApiServer, plan: Plan, scheduler: Scheduler) -> dict[str, Any]:
    async with Kube(load_kubeconfig(api.kubeconfig)) as kube:
        await scheduler.install(kube)
        await _cluster(kube, plan, scheduler)
        tracker = Tracker(kube, NS)
        await tracker.start()
        kubelet = None
        try:
            scheduler.start(api.kubeconfig, Path(api.dir), plan.config)
            if plan.fill:  # evicted pods are finished (deleted) as a kubelet would
                kubelet = asyncio.create_task(FakeKubelet(kube).run())
            await _probe(kube, tracker, scheduler, next(iter(plan.queues)))
            figures = await _SHAPES[plan.shape](kube, tracker, plan, scheduler)
        except Exception as exc:
            raise RuntimeError(f"{scheduler.name} on {plan.shape}: {exc}\n{scheduler.tail()}") from exc
        finally:
            scheduler.stop()
            if kubelet is not None:
                kubelet.cancel()
                await asyncio.gather(kubelet, return_exceptions=True)
            await tracker.stop()
        figures["apiserver_version"] = (await kube.get("/version")).get("gitVersion", "?")
        if scheduler.name == "kai":
            figures["flags"] = scheduler.flags
        return figures


async def _cluster(kube: Kube, plan: Plan, scheduler: Scheduler) -> None:
    """The namespace, KAI's priority classes, the queues, the nodes (and KAI's Topology
    object where its CRD is installed)."""
    await kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    for name, value in KAI_CLASSES.items():
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        await kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", {**body, "value": value})
    for name, quota in {PARENT: -1, **plan.queues}.items():
        await kube.create("/apis/scheduling.run.ai/v2/queues", _queue(name, quota))
    made = await gather_limited(
        [make_node(kube, name, gpus=plan.gpus_per_node, labels=labels) for name, labels in plan.nodes],
        IN_FLIGHT,
    )
    _raise_first(made, "nodes")
    if plan.zones and any(c["metadata"]["name"] == "topologies.kai.scheduler" for c in scheduler.crds):
        levels = [{"nodeLabel": ZONE}, {"nodeLabel": RACK}]
        body = {
            "apiVersion": "kai.scheduler/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": TOPOLOGY_NAME},
        }
        await kube.create("/apis/kai.scheduler/v1alpha1/topologies", {**body, "spec": {"levels": levels}})


def _queue(name: str, gpu_quota: int) -> dict[str, Any]:
    """A KAI Queue (scheduling.run.ai/v2); a leaf under PARENT."""
    free = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    resources = {"gpu": {**free, "quota": gpu_quota}, "cpu": free, "memory": free}
    spec: dict[str, Any] = {"resources": resources} | ({"parentQueue": PARENT} if name != PARENT else {})
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def _raise_first(results: list[Any], what: str) -> None:
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise RuntimeError(f"{len(failed)} {what} could not be made: {failed[0]}")


def _pod(name: str, part: str, queue: str, gpus: int, **extra: Any) -> dict[str, Any]:
    """A pod for KAI's scheduler name (kai-ray answers to it too), in `queue`."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    labels = {QUEUE_LABEL: queue, PART: part, **extra.pop("labels", {})}
    more_meta = extra.pop("metadata", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels, **more_meta},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "bench", "resources": resources}],
            **extra,
        },
    }


async def _create_pods(kube: Kube, pods: list[dict[str, Any]]) -> float:
    """Create them (IN_FLIGHT at a time); the moment the last creation was answered."""
    made = await gather_limited([kube.create(f"/api/v1/namespaces/{NS}/pods", p) for p in pods], IN_FLIGHT)
    _raise_first(made, "pods")
    return time.perf_counter()


async def _job(
    kube: Kube, name: str, size: int, gpus: int, queue: str, annotations: dict[str, str] | None = None
) -> float:
    """A distributed batch Job as KAI's scale tests submit one (parallelism and completions
    `size`, `kai.scheduler/batch-min-member: size`), and its pods, made by the bench as the
    Job controller would make them; the moment the last pod's creation was answered."""
    meta = {"name": name, "namespace": NS, "labels": {QUEUE_LABEL: queue}}
    meta["annotations"] = {BATCH_MIN_MEMBER: str(size), **(annotations or {})}
    template = _pod("", name, queue, gpus)
    template["metadata"] = {"labels": template["metadata"]["labels"]}
    spec = {"parallelism": size, "completions": size, "template": template}
    job = await kube.create(f"/apis/batch/v1/namespaces/{NS}/jobs", {"metadata": meta, "spec": spec})
    uid = job["metadata"]["uid"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}
    owned = {"ownerReferences": [{**owner, "blockOwnerDeletion": True}]}
    job_labels = {"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": uid}
    pods = [_pod(f"{name}-{i}", name, queue, gpus, labels=job_labels, metadata=owned) for i in range(size)]
    return await _create_pods(kube, pods)


async def _probe(kube: Kube, tracker: Tracker, scheduler: Scheduler, queue: str) -> None:
    """One small pod, bound: the scheduler has listed the cluster and acts (for KAI, its
    podgrouper, scheduler and binder all); then gone again."""
    await _create_pods(kube, [_pod("probe", "probe", queue, 0)])
    await tracker.until("the probe pod bound", lambda t: t.part("probe").bound >= 1, 180, scheduler.check)
    await kube.delete(f"/api/v1/namespaces/{NS}/pods/probe", grace=0)


def _timeout(pods: int) -> float:
    return 300 + 0.25 * pods


def _seconds(since: float, until: float) -> float:
    return round(max(0.0, until - since), 3)


async def _bound(tracker: Tracker, part: str, count: int, scheduler: Scheduler) -> float:
    what = f"{count} pods of {part} bound"
    return await tracker.until(what, lambda t: t.part(part).bound >= count, _timeout(count), scheduler.check)


def _gang_figures(tracker: Tracker, part: str, made: float, done: float, early: int) -> dict[str, Any]:
    """Seconds from the last pod created to all bound; `early`: pods seen bound before the
    last one existed (a gang bound in part: 0 when its minimum is kept)."""
    return {
        "seconds": _seconds(made, done),
        "bound": tracker.part(part).bound,
        "bound_before_last_created": early,
    }


# ---------------------------------------------------------------- the shapes


async def _topology(kube: Kube, tracker: Tracker, plan: Plan, scheduler: Scheduler) -> dict[str, Any]:
    """One job of `plan.pods` pods that must share a zone: timed from its last pod
    created to all of them bound; which zones they went to."""
    place = {TOPOLOGY: TOPOLOGY_NAME, TOPOLOGY_REQUIRED: ZONE}
    made = await _job(kube, "topology", plan.pods, plan.gpus_per_pod, "bench", place)
    early = tracker.part("topology").bound
    done = await _bound(tracker, "topology", plan.pods, scheduler)
    zone_of = {name: labels[ZONE] for name, labels in plan.nodes}
    zones: dict[str, int] = {}
    for pod, node in tracker.nodes.items():
        if pod.startswith("topology-"):
            zones[zone_of[node]] = zones.get(zone_of[node], 0) + 1
    return {**_gang_figures(tracker, "topology", made, done, early), "zones_used": zones}


async def _reclaim(kube: Kube, tracker: Tracker, plan: Plan, scheduler: Scheduler) -> dict[str, Any]:
    """The cluster filled with one-GPU pods of queue `filler` (preemptible, no quota),
    then one job of whole-node pods of queue `starved` (its quota is what the job asks):
    timed from the job's last pod created to all of it bound, the filler pods it took
    evicted and deleted on the way."""
    fill_started = time.perf_counter()
    preemptible = {PREEMPTIBILITY_LABEL: "preemptible"}
    fill = [_pod(f"fill-{i:05d}", "fill", "filler", 1, labels=preemptible) for i in range(plan.fill)]
    await _create_pods(kube, fill)
    await _bound(tracker, "fill", plan.fill, scheduler)
    what = f"{plan.fill} filler pods running"
    timeout = _timeout(plan.fill)
    await tracker.until(what, lambda t: t.part("fill").running >= plan.fill, timeout, scheduler.check)
    fill_s = time.perf_counter() - fill_started
    made = await _job(kube, "gang", plan.pods, plan.gpus_per_pod, "starved")
    early = tracker.part("gang").bound
    done = await _bound(tracker, "gang", plan.pods, scheduler)
    fill_counts = tracker.part("fill")
    gang_nodes = {node for pod, node in tracker.nodes.items() if pod.startswith("gang-")}
    first, last = fill_counts.first_deleted, fill_counts.last_deleted
    return {
        **_gang_figures(tracker, "gang", made, done, early),
        "evicted": fill_counts.deleted,  # filler pods deleted by the time the job was bound
        # from the last gang pod created: the first and the last filler pod seen deleted,
        # the first gang pod seen bound
        "first_eviction_s": _seconds(made, first) if first else None,
        "last_eviction_s": _seconds(made, last) if last else None,
        "first_bound_s": _seconds(made, tracker.part("gang").first_bound),
        "gang_nodes": len(gang_nodes),
        "fill_s": round(fill_s, 1),
    }


async def _unschedulable(kube: Kube, tracker: Tracker, plan: Plan, scheduler: Scheduler) -> dict[str, Any]:
    """`plan.pods` jobs of one pod that cannot fit: half ask for twice a node's GPUs, half
    select a node label no node has. Timed from the last created to each pod carrying
    `PodScheduled=False` with the scheduler's reason."""
    too_big = plan.gpus_per_node * 2
    pods = [
        _pod(f"big-{i:04d}", "too-big", "bench", too_big)
        if i % 2 == 0
        else _pod(f"nowhere-{i:04d}", "no-node", "bench", 1, nodeSelector=NO_NODE)
        for i in range(plan.pods)
    ]
    made = await _create_pods(kube, pods)

    def all_told(t: Tracker) -> bool:
        return t.part("too-big").told + t.part("no-node").told >= plan.pods

    done = await tracker.until(f"{plan.pods} pods told why", all_told, _timeout(plan.pods), scheduler.check)
    parts = ("too-big", "no-node")
    return {
        "seconds": _seconds(made, done),
        "told": sum(tracker.part(p).told for p in parts),
        "bound": sum(tracker.part(p).bound for p in parts),
        "reasons": {p: tracker.reasons_now(p) for p in parts},
        "messages": {f"{p}/{r}": m[:300] for (p, r), m in sorted(tracker.messages.items()) if p in parts},
    }


async def _gangs(kube: Kube, tracker: Tracker, plan: Plan, scheduler: Scheduler) -> dict[str, Any]:
    """Jobs of each size in turn, one GPU a pod: each timed from its last pod created to
    all of it bound."""
    out = {}
    for size in plan.gangs:
        name = f"gang{size}"
        made = await _job(kube, name, size, 1, "bench")
        early = tracker.part(name).bound
        done = await _bound(tracker, name, size, scheduler)
        out[name] = _gang_figures(tracker, name, made, done, early)
    return out


_SHAPES = {
    "topology-512": _topology,
    "reclaim-250": _reclaim,
    "unschedulable-1000": _unschedulable,
    "gangs": _gangs,
}
