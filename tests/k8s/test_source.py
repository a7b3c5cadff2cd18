"""The Kubernetes ClusterSource's world, patched from the watches' deltas, against the
world rebuilt from every object (kai_ray.k8s.reference): random sequences of changes,
each followed by a step's observe, must leave both equal; and a steady step keeps the
objects of what did not change."""

from __future__ import annotations

import copy
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.k8s import DEFAULT_SCHEDULER_NAMES
from kai_ray.k8s.client import Kube
from kai_ray.k8s.install import default_queues
from kai_ray.k8s.reference import same_world
from kai_ray.k8s.source import KubeSource
from kai_ray.k8s.watches import Watches
from tests.k8s.test_world import node, pod
from tests.properties import examples

NODES = ["n0", "n1", "n2"]
CLUSTERS = ["a", "b", "c"]


def raycluster(name: str, workers: int, priority: str = "") -> dict[str, Any]:
    labels = {"ray.io/priority-class-name": priority} if priority else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": labels,
        },
        "spec": {"workerGroupSpecs": [{"groupName": "g", "replicas": workers, "minReplicas": workers}]},
    }


class World:
    """Objects in the informers, each change announced as the watch announces it."""

    def __init__(self) -> None:
        self.watches = Watches(cast(Kube, None))
        self.source = KubeSource(self.watches, DEFAULT_SCHEDULER_NAMES, "default-queue")
        for q in default_queues():
            self.watches.queues[0].items[("", q["metadata"]["name"])] = q
        for name in NODES:
            self.put_node(node(name, gpus=4))
        for informer in (self.watches.nodes, self.watches.pods, *self.watches.queues):
            assert informer.on_relist is not None
            informer.on_relist()

    def put_node(self, obj: dict[str, Any]) -> None:
        kind = "MODIFIED" if ("", obj["metadata"]["name"]) in self.watches.nodes.items else "ADDED"
        self.watches.nodes.items[("", obj["metadata"]["name"])] = obj
        if self.watches.nodes.on_change:
            self.watches.nodes.on_change(kind, obj)

    def put_pod(self, obj: dict[str, Any]) -> None:
        self.watches.pods.items[("ns", obj["metadata"]["name"])] = obj
        assert self.watches.pods.on_change is not None
        self.watches.pods.on_change("MODIFIED", obj)

    def drop_pod(self, name: str) -> None:
        obj = self.watches.pods.items.pop(("ns", name), None)
        if obj is not None and self.watches.pods.on_change:
            self.watches.pods.on_change("DELETED", obj)

    def put_owner(self, obj: dict[str, Any]) -> None:
        informer = self.watches.owners["RayCluster"]
        informer.items[("ns", obj["metadata"]["name"])] = obj
        assert informer.on_change is not None
        informer.on_change("MODIFIED", obj)

    def drop_owner(self, name: str) -> None:
        informer = self.watches.owners["RayCluster"]
        obj = informer.items.pop(("ns", name), None)
        if obj is not None and informer.on_change:
            informer.on_change("DELETED", obj)

    def step(self) -> None:
        snapshot = self.source.observe(0.0)
        same_world(snapshot, self.source.rebuild().snapshot)  # the check mode does it too


# A pod's required node affinity (read per pod: the gang's pods may differ): on a node
# name, on a label no node has, or written wrong (the gang then has a problem).
AFFINITY = {
    "on-n1": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}],
    "nowhere": [{"matchExpressions": [{"key": "gpu-type", "operator": "Exists"}]}],
    "wrong": [{"matchExpressions": [{"key": "gpu-type", "operator": "Gt", "values": ["x"]}]}],
}
AFFINITY_KEYS = sorted(AFFINITY)


CHANGES = st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(CLUSTERS), st.integers(0, 3), st.sampled_from(["", *NODES])),
    st.tuples(st.just("other"), st.integers(0, 3), st.sampled_from(NODES), st.integers(0, 4)),
    st.tuples(st.just("drop"), st.sampled_from(CLUSTERS), st.integers(0, 3), st.just("")),
    st.tuples(
        st.just("owner"), st.sampled_from(CLUSTERS), st.integers(1, 3), st.sampled_from(["", "train", "nope"])
    ),
    st.tuples(st.just("no-owner"), st.sampled_from(CLUSTERS), st.just(0), st.just("")),
    st.tuples(st.just("taint"), st.sampled_from(NODES), st.booleans(), st.just("")),
    st.tuples(st.just("assume"), st.sampled_from(CLUSTERS), st.integers(0, 3), st.sampled_from(NODES)),
    st.tuples(
        st.just("affinity"), st.sampled_from(CLUSTERS), st.integers(0, 3), st.sampled_from(AFFINITY_KEYS)
    ),
)


def apply(world: World, change: tuple[Any, ...]) -> None:
    kind, a, b, c = change
    if kind == "pod":
        world.put_pod(pod(f"{a}-{b}", gpus=1, node_name=c, owner=a))
    elif kind == "other":  # another scheduler's pod: use outside on its node
        world.put_pod(pod(f"other-{a}", gpus=c, node_name=b, scheduler="default-scheduler"))
    elif kind == "affinity":  # a pending pod whose template asks for certain nodes
        made = pod(f"{a}-{b}", gpus=1, owner=a)
        terms = {"nodeSelectorTerms": AFFINITY[c]}
        made["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}
        world.put_pod(made)
    elif kind == "drop":
        world.drop_pod(f"{a}-{b}")
    elif kind == "owner":
        world.put_owner(raycluster(a, b, c))
    elif kind == "no-owner":
        world.drop_owner(a)
    elif kind == "taint":
        world.put_node(node(a, gpus=4, taint="NoSchedule" if b else None))
    else:  # a binding sent, not yet seen in the watch
        found = world.watches.pods.items.get(("ns", f"{a}-{b}"))
        if found is not None:
            world.source.assume(found["metadata"]["uid"], c, 0.0)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(CHANGES, min_size=1, max_size=4), min_size=1, max_size=8))
def test_the_patched_world_is_the_rebuilt_one(batches: list[list[tuple[Any, ...]]]) -> None:
    world = World()
    world.step()
    for batch in batches:
        for change in batch:
            apply(world, change)
        world.step()


def test_a_steady_step_keeps_what_did_not_change() -> None:
    world = World()
    for c in ("a", "b"):
        world.put_owner(raycluster(c, 1))
        for i in range(2):
            world.put_pod(pod(f"{c}-{i}", node_name="n0" if c == "a" else "", owner=c))
    world.step()
    first = world.source.observe(0.0)
    assert world.source.observe(0.0) is first  # nothing changed: the same world
    moved = copy.deepcopy(world.watches.pods.items[("ns", "b-0")])
    moved["spec"]["nodeName"] = "n1"
    world.put_pod(moved)
    after = world.source.observe(0.0)
    jobs = {j.name: j for j in after.jobs}
    before = {j.name: j for j in first.jobs}
    assert jobs["ns/RayCluster/a"] is before["ns/RayCluster/a"]  # untouched gang, same object
    assert jobs["ns/RayCluster/b"] is not before["ns/RayCluster/b"]
    # Our pods are the core's tasks, not use outside: the nodes did not change, and the
    # list is the same object (the cycle compares it by identity first).
    assert after.nodes is first.nodes
    same_world(after, world.source.rebuild().snapshot)
