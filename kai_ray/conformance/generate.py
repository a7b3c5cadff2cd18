"""Cluster states for the conformance corpus: seeded, small, contended, and each using the
features a user picks kai-ray for (docs/conformance.md says how the corpus is made).

A state is a scenario document (a plain dict, kai-ray's scenario format) plus the names
of the running tasks that KAI should see as bound through a BindRequest still in flight
(the scenario format has no such state: kai-ray counts them as running, as KAI does).

Every draw comes from one `random.Random` seeded by the set's name, its seed and the
state's index, so `state(feature_set, seed, index)` is the same state on every machine.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FEATURES", "State", "draw_pending_job", "draw_state", "state_rng"]

# The features the corpus covers, each drawn as a layer over a contended base cluster.
FEATURES = (
    "topology",
    "subgroups",
    "minruntime",
    "usage",
    "affinity",
    "releasing",
    "gpumemory",
    "deepqueues",
)
_CLASSES = ("train", "build-preemptible", "build", "inference")
_GPU_MEMORY_GI = 80


@dataclass
class State:
    doc: dict[str, Any]
    in_flight: set[str] = field(default_factory=set)


def state_rng(set_name: str, seed: int, index: int) -> random.Random:
    return random.Random(f"{set_name}/{seed}/{index}")


def draw_state(rng: random.Random, name: str, features: frozenset[str], scale: int = 1) -> State:
    """A contended cluster: nodes mostly full of running work, a few waiting gangs,
    queues over and under their share, and the given features layered on. `scale`
    multiplies the nodes and the jobs (the corpus' few big states, timed beside KAI)."""
    unknown = features - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; known: {', '.join(FEATURES)}")
    nodes = _nodes(rng, features, scale)
    queues = _queues(rng, deep="deepqueues" in features)
    leaves = [q["name"] for q in queues if not any(c.get("parent") == q["name"] for c in queues)]
    doc: dict[str, Any] = {"name": name, "rounds": 1, "nodes": nodes, "queues": queues}
    room = {n: float(spec["gpus"]) for n, spec in nodes.items()}
    groups: dict[str, list[float]] = {n: [] for n in nodes}
    jobs: list[dict[str, Any]] = []
    for i in range(rng.randint(2, 3 + len(nodes) // scale) * scale):
        job = _running_job(rng, f"r{i}", leaves, (nodes, room, groups), features)
        if job is not None:
            jobs.append(job)
    for i in range(rng.randint(2, 5) * scale):
        jobs.append(draw_pending_job(rng, f"p{i}", leaves, nodes, features))
    doc["jobs"] = jobs
    state = State(doc)
    _layer_topology(rng, doc, features)
    _layer_minruntime(rng, doc, features)
    _layer_usage(rng, doc, features)
    _layer_affinity(rng, doc, features)
    _layer_releasing(rng, state, features)
    return state


def _nodes(rng: random.Random, features: frozenset[str], scale: int) -> dict[str, dict[str, Any]]:
    count = rng.randint(2, 6) * scale
    nodes: dict[str, dict[str, Any]] = {}
    for i in range(count):
        spec: dict[str, Any] = {"gpus": rng.choice((4, 4, 8)), "cpu": 64, "memory": "256Gi"}
        labels: dict[str, str] = {}
        if "topology" in features:
            labels["zone"] = f"z{i * 2 // count}"
            labels["rack"] = f"r{i * 4 // count}"
        if "affinity" in features:
            labels["gpu-type"] = rng.choice(("a100", "h100"))
        if "gpumemory" in features:
            spec["gpuMemory"] = f"{rng.choice((40, 80))}Gi"
        if labels:
            spec["labels"] = labels
        nodes[f"n{i}"] = spec
    return nodes


def _resources(rng: random.Random, quota_max: int) -> dict[str, Any]:
    limit = rng.choice((-1, -1, -1, rng.randint(max(quota_max, 1), 16)))
    quota = rng.randint(0, quota_max)
    return {
        "gpu": {
            "quota": quota,
            "overQuotaWeight": rng.choice((0, 1, 1, 2, 3)),
            "limit": max(limit, quota) if limit != -1 else -1,
        }
    }


def _queues(rng: random.Random, *, deep: bool) -> list[dict[str, Any]]:
    queues: list[dict[str, Any]] = []
    for d in range(rng.randint(2, 3)):
        top = f"d{d}"
        queues.append({"name": top, "resources": _resources(rng, 6)})
        parents = [top]
        if deep:
            parents = [f"{top}-s{s}" for s in range(rng.randint(1, 2))]
            for p in parents:
                queues.append({"name": p, "parent": top, "resources": _resources(rng, 4)})
        for p in parents:
            for q in range(rng.randint(1, 3)):
                queues.append(
                    {
                        "name": f"{p}-q{q}",
                        "parent": p,
                        "priority": rng.choice((100, 100, 120)),
                        "resources": _resources(rng, 3),
                    }
                )
    return queues


def _gpu_request(rng: random.Random, features: frozenset[str]) -> dict[str, Any]:
    if "gpumemory" in features and rng.random() < 0.4:
        return {"gpuMemory": f"{rng.choice((10, 20, 40))}Gi"}
    return {"gpu": rng.choice((1, 1, 2, 2, 4, 0.5, 0.25))}


def _fraction_of(request: dict[str, Any], node: dict[str, Any] | None) -> float:
    """The request's share of one device of `node` (None: the largest device). A memory
    slice counts against the device's usable memory: KAI floors it to hundreds of MiB."""
    if "gpuMemory" in request:
        device = int(str((node or {}).get("gpuMemory", f"{_GPU_MEMORY_GI}Gi")).removesuffix("Gi")) * 1024
        return int(str(request["gpuMemory"]).removesuffix("Gi")) * 1024 / (device - device % 100)
    return float(request["gpu"])


def _place(
    rng: random.Random,
    nodes: dict[str, Any],
    room: dict[str, float],
    groups: dict[str, list[float]],
    request: dict[str, Any],
) -> tuple[str, str | None] | None:
    """A node (and device group, for a share) with room for one task, or None."""
    order = list(room)
    rng.shuffle(order)
    for node in order:
        share = _fraction_of(request, nodes.get(node))
        if "gpuMemory" in request and share > 1:
            continue  # a memory slice larger than the device's usable memory runs nowhere there
        if share < 1:
            for g, used in enumerate(groups[node]):
                if used + share <= 1:
                    groups[node][g] += share
                    return node, f"g{g}"
            if room[node] >= 1:
                room[node] -= 1
                groups[node].append(share)
                return node, f"g{len(groups[node]) - 1}"
        elif room[node] >= share:
            room[node] -= share
            return node, None
    return None


def _new_job(
    rng: random.Random, name: str, leaves: list[str], features: frozenset[str], most_tasks: int
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A job's head (its queue, class and request per task) and how many tasks it has:
    one for a share of a device, up to `most_tasks` for whole GPUs."""
    request = _gpu_request(rng, features)
    count = 1 if _fraction_of(request, None) < 1 else rng.randint(1, most_tasks)
    job: dict[str, Any] = {
        "name": name,
        "queue": rng.choice(leaves),
        "priority": rng.choice(_CLASSES),
        **request,
        "cpu": 1,
        "memory": "1Gi",
    }
    return job, request, count


def _running_job(
    rng: random.Random,
    name: str,
    leaves: list[str],
    cluster: tuple[dict[str, Any], dict[str, float], dict[str, list[float]]],
    features: frozenset[str],
) -> dict[str, Any] | None:
    nodes, room, groups = cluster
    job, request, count = _new_job(rng, name, leaves, features, most_tasks=3)
    tasks = []
    for _ in range(count):
        spot = _place(rng, nodes, room, groups, request)
        if spot is None:
            break
        # Starts fall half a minute off the minute, and the clock moves by whole minutes
        # between sessions: no task is ever exactly at a min-runtime boundary.
        task: dict[str, Any] = {"state": "Running", "node": spot[0], "since": -rng.randint(1, 120) * 60 - 30}
        if spot[1] is not None:
            task["gpuGroup"] = spot[1]
        tasks.append(task)
    if not tasks:
        return None
    job["tasks"] = tasks
    if "subgroups" in features and rng.random() < 0.4 and len(tasks) >= 1:
        _as_subgroups(rng, job, running=True)
    return job


def draw_pending_job(
    rng: random.Random, name: str, leaves: list[str], nodes: dict[str, Any], features: frozenset[str]
) -> dict[str, Any]:
    job, _, count = _new_job(rng, name, leaves, features, most_tasks=4)
    job["tasks"] = [{"state": "Pending"} for _ in range(count)]
    if count > 1 and rng.random() < 0.35:
        job["minMember"] = rng.randint(1, count - 1)
    if "subgroups" in features and rng.random() < 0.6:
        _as_subgroups(rng, job, running=False)
    return job


def _as_subgroups(rng: random.Random, job: dict[str, Any], *, running: bool) -> None:
    """KAI's podgrouper shape for a RayCluster: a CPU head of one, GPU workers with their
    own minimum, maybe elastic workers beyond it."""
    workers = job["tasks"]
    job.pop("minMember", None)
    minimum = len(workers) if running else rng.randint(1, len(workers))
    head: dict[str, Any] = {"subGroup": "head", "gpu": 0, "state": "Running" if running else "Pending"}
    if running:
        head.update(node=workers[0]["node"], since=workers[0]["since"])
    for task in workers:
        task["subGroup"] = "workers"
    job["subGroups"] = [{"name": "head", "minMember": 1}, {"name": "workers", "minMember": minimum}]
    job["tasks"] = [head, *workers]


def _layer_topology(rng: random.Random, doc: dict[str, Any], features: frozenset[str]) -> None:
    if "topology" not in features:
        return
    doc["topologies"] = {"dc": {"levels": ["zone", "rack"]}}
    for job in doc["jobs"]:
        if rng.random() < 0.6:
            constraint: dict[str, Any] = {"name": "dc"}
            kind = rng.choice(("required", "required", "preferred", "both"))
            if kind in ("required", "both"):
                constraint["required"] = rng.choice(("zone", "rack"))
            if kind in ("preferred", "both"):
                constraint["preferred"] = (
                    "rack" if constraint.get("required") != "rack" else "kubernetes.io/hostname"
                )
            job["topology"] = constraint


def _layer_minruntime(rng: random.Random, doc: dict[str, Any], features: frozenset[str]) -> None:
    if "minruntime" not in features:
        return
    for queue in doc["queues"]:
        if rng.random() < 0.5:
            queue["preemptMinRuntime"] = rng.choice(("10m", "30m", "1h"))
        if rng.random() < 0.5:
            queue["reclaimMinRuntime"] = rng.choice(("10m", "30m", "1h"))
    # Half a minute from any boundary (10m, 30m, 1h), so the clock's drift between the
    # writing of a state and its deciding never moves a task across one.
    for job in doc["jobs"]:
        for task in job["tasks"]:
            if "since" in task:
                task["since"] = -rng.choice((90, 390, 570, 630, 1770, 1830, 2970, 3570, 3630, 7170))


def _layer_usage(rng: random.Random, doc: dict[str, Any], features: frozenset[str]) -> None:
    if "usage" not in features:
        return
    queues = doc["queues"]
    children: dict[str, list[str]] = {}
    for q in queues:
        if "parent" in q:
            children.setdefault(q["parent"], []).append(q["name"])
    # Each leaf's share of the cluster over the window; a parent used what its children
    # did. Scaled so that no queue used more than the whole cluster.
    drawn = {
        q["name"]: rng.choice((0.0, 0.05, 0.1, 0.2, 0.3, 0.5)) for q in queues if q["name"] not in children
    }

    def total(name: str) -> float:
        return drawn[name] if name not in children else sum(total(c) for c in children[name])

    scale = max([1.0] + [total(q["name"]) for q in queues if "parent" not in q])
    drawn = {name: math.floor(v / scale * 1000) / 1000 for name, v in drawn.items()}
    usage = {q["name"]: {"gpu": round(total(q["name"]), 3)} for q in queues}
    doc["usage"] = usage
    doc["config"] = {**doc.get("config", {}), "kValue": rng.choice((0.5, 1, 2))}


def _layer_affinity(rng: random.Random, doc: dict[str, Any], features: frozenset[str]) -> None:
    if "affinity" not in features:
        return
    tainted = [n for n in doc["nodes"] if rng.random() < 0.3]
    for n in tainted:
        doc["nodes"][n]["taints"] = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    for job in doc["jobs"]:
        running = any(t.get("state") == "Running" for t in job["tasks"])
        on_tainted = any(t.get("node") in tainted for t in job["tasks"])
        if on_tainted or rng.random() < 0.3:
            job["tolerations"] = [
                {"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}
            ]
        if running:
            continue  # required affinity is ignored during execution: only waiting work gets one
        pick = rng.random()
        if pick < 0.3:
            job["nodeAffinity"] = [
                {
                    "matchExpressions": [
                        {"key": "gpu-type", "operator": "In", "values": [rng.choice(("a100", "h100"))]}
                    ]
                }
            ]
        elif pick < 0.45:
            job["nodeAffinity"] = [
                {"matchExpressions": [{"key": "gpu-type", "operator": "NotIn", "values": ["h100"]}]}
            ]
        elif pick < 0.6:
            job["nodeSelector"] = {"gpu-type": rng.choice(("a100", "h100"))}


def _layer_releasing(rng: random.Random, state: State, features: frozenset[str]) -> None:
    if "releasing" not in features:
        return
    for job in state.doc["jobs"]:
        running = [t for t in job["tasks"] if t.get("state") == "Running"]
        if not running:
            continue
        pick = rng.random()
        if pick < 0.2:
            for task in running:  # a whole gang being evicted: its room is not free yet
                task["state"] = "Releasing"
        elif pick < 0.4:
            index = job["tasks"].index(running[-1])
            state.in_flight.add(f"{job['name']}-{index}")
