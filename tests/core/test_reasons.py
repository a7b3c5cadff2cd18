"""Pending reasons word for word, one named case each: what a user reads."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kai_ray.core import TopologyConstraint

from .builders import ClusterBuilder, cycle

NODE_ID = "ray.io/node-id"  # what the Ray backend labels each node with
ONE_NODE = TopologyConstraint("kai-ray-node", required=NODE_ID)
ONE_HOST = TopologyConstraint("any", required="kubernetes.io/hostname")


@dataclass
class Case:
    name: str
    cluster: ClusterBuilder
    reason: str  # the job "g"'s reason, exactly
    actions: tuple[str, ...] = ("allocate",)


def _gpu_nodes(*gpus: int) -> ClusterBuilder:
    builder = ClusterBuilder()
    for i, count in enumerate(gpus):
        builder.node(f"n{i}", gpus=count)
    return builder


def _ray_nodes() -> ClusterBuilder:
    """Two 4-GPU nodes labelled with Ray node ids; 2 GPUs busy on one, 3 on the other."""
    return (
        ClusterBuilder()
        .node("n0", gpus=4, **{NODE_ID: "abc123"})
        .node("n1", gpus=4, **{NODE_ID: "def456"})
        .job("busy", "default", gpu=2, cpu=0, memory=0)
        .running("n0")
        .job("busy1", "default", gpu=3, cpu=0, memory=0)
        .running("n1")
    )


CASES = [
    Case(
        "a gang larger than the empty cluster",
        _gpu_nodes(4, 4).job("g", "default", gpu=4, cpu=0, memory=0).pending(3),
        "gang of 3 tasks (4 GPUs each) cannot fit in this cluster as it is: even empty it holds at most "
        "2 such tasks (8 GPUs on 2 nodes); lower the gang size or add nodes",
    ),
    Case(
        "a gang larger than what its node selector and the schedulable nodes allow",
        ClusterBuilder()
        .node("a0", gpus=4, zone="a")
        .node("a1", gpus=4, zone="a", unschedulable=True)
        .node("b0", gpus=4, zone="b")
        .job("g", "default", gpu=4, cpu=0, memory=0, node_selector={"zone": "a"})
        .pending(2),
        "gang of 2 tasks (4 GPUs each) cannot fit in this cluster as it is: even empty it holds at most "
        "1 such task (4 GPUs on 1 node); lower the gang size or add nodes",
    ),
    Case(
        "fractions: as many per device as fit",
        _gpu_nodes(1).job("g", "default", gpu=0.4, cpu=0, memory=0).pending(3),
        "gang of 3 tasks (0.4 GPU each) cannot fit in this cluster as it is: even empty it holds at most "
        "2 such tasks (1 GPU on 1 node); lower the gang size or add nodes",
    ),
    Case(
        "a gang on one node (Ray's STRICT_PACK) larger than any node",
        _gpu_nodes(2, 2).job("g", "default", cpu=0, memory=0, topology=ONE_NODE).pending(4),
        "gang of 4 tasks (1 GPU each) cannot fit in this cluster as it is: even empty one node holds at "
        "most 2 such tasks (2 GPUs on 1 node); lower the gang size or ask for less per task",
    ),
    Case(
        "a gang on one node says 'one node', not the node-id label",
        _ray_nodes().job("g", "default", cpu=0, memory=0, topology=ONE_NODE).pending(4),
        "gang of 4 tasks (1 GPU each) must share one node: it needs 4 GPUs, the largest free node "
        "(abc123) has 2",
    ),
    Case(
        "the hostname level reads 'one node' too, naming nodes without the label by name",
        _gpu_nodes(4, 4)
        .job("busy", "default", gpu=3, cpu=0, memory=0)
        .running("n0")
        .job("busy1", "default", gpu=2, cpu=0, memory=0)
        .running("n1")
        .job("g", "default", cpu=0, memory=0, topology=ONE_HOST)
        .pending(3),
        "gang of 3 tasks (1 GPU each) must share one node: it needs 3 GPUs, the largest free node (n1) has 2",
    ),
    Case(
        "one node with room, a GPU and a CPU: singular",
        _gpu_nodes(2, 2)
        .job("busy", "default", gpu=2, cpu=0, memory=0)
        .running("n0")
        .job("g", "default", cpu=1)
        .pending(3),
        "gang of 3 tasks (1 GPU, 1 CPU, 1Gi memory each): only part of the gang fits at once (1 node has "
        "room for a task; free: 2 whole GPUs, largest free node has 2); the gang starts whole or not at all",
    ),
    Case(
        "tasks without GPUs are told about CPUs",
        ClusterBuilder()
        .node("n0", cpu=4)
        .node("n1", cpu=2)
        .job("busy", "default", gpu=0, cpu=2, memory=0)
        .running("n0")
        .job("g", "default", gpu=0, cpu=2, memory=0)
        .pending(3),
        "gang of 3 tasks (2 CPUs each): only part of the gang fits at once (2 nodes have room for a task; "
        "free: 4 CPUs, largest free node has 2); the gang starts whole or not at all",
    ),
    Case(
        "a gang short of tasks: one left",
        _gpu_nodes(4).job("g", "default", min_member=3).pending().failed().failed(),
        "gang needs 3 tasks but only 1 exists (some failed or finished); it cannot start whole",
    ),
    Case(
        "a queue limit of one GPU",
        _gpu_nodes(4)
        .queue("q", gpu_quota=1, gpu_limit=1)
        .job("busy", "q", cpu=0, memory=0)
        .running("n0")
        .job("g", "q", cpu=0, memory=0)
        .pending(),
        "queue q is at its limit of 1 GPU (holds 1 GPU, this job asks for 1 GPU more)",
    ),
    Case(
        "reclaim names the resource that would go over the fair share",
        _gpu_nodes(2)
        .queue("root", gpu_quota=2)
        .queue("a", "root", gpu_quota=1)
        .queue("b", "root", gpu_quota=1)
        .job("a1", "a", cpu=0, memory=0)
        .running("n0")
        .job("b1", "b", cpu=0, memory=0)
        .running("n0")
        .job("g", "b", cpu=0, memory=0)
        .pending(),
        "no free room, and queue b cannot reclaim: it would go over its fair share of 1 GPU "
        "(it holds 1 GPU, this job asks for 1 GPU)",
        ("reclaim",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reason(case: Case) -> None:
    result = cycle(case.cluster.build(), *case.actions)
    assert result.pending_reasons["g"] == case.reason
