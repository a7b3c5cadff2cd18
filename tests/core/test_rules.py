"""The core's rules, one named case each: what is decided, and why a job waits."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kai_ray.core import UNLIMITED, QueueInfo, TopologyConstraint

from .builders import ClusterBuilder, cycle, outcome


@dataclass
class Case:
    name: str
    cluster: ClusterBuilder
    actions: tuple[str, ...]
    expect: dict[str, set[str]]  # job -> decisions like {"bind@n0"}; {} = nothing decided
    reasons: dict[str, str] = field(default_factory=dict)  # job -> words its reason contains
    config: dict[str, object] = field(default_factory=dict)
    now: float = 0.0


def _racks() -> ClusterBuilder:
    return (
        ClusterBuilder()
        .node("a0", gpus=2, rack="ra")
        .node("a1", gpus=2, rack="ra")
        .node("b0", gpus=4, rack="rb")
        .queue("q", gpu_quota=8)
    )


def _three_nodes() -> ClusterBuilder:
    return ClusterBuilder().node("n0", gpus=4).node("n1", gpus=4).node("n2", gpus=4).queue("q", gpu_quota=12)


CASES = [
    Case(
        "GPUs held outside the scheduler are not offered, and the reason says so",
        ClusterBuilder()
        .node("n0", gpus=4, gpus_used_outside=3)
        .queue("q", gpu_quota=4)
        .job("small", "q")
        .pending()
        .job("big", "q", gpu=2)
        .pending(),
        ("allocate",),
        {"small": {"bind@n0"}},
        reasons={
            "big": "no node has room now for even one task (free: 0 whole GPUs, largest free "
            "node has 0; work outside the scheduler holds 3 GPUs)"
        },
    ),
    Case(
        "a gang that prefers spreading takes a node per task (binpack would stack them)",
        _three_nodes().job("g", "q", spread="preferred").pending(3),
        ("allocate",),
        {"g": {"bind@n0", "bind@n1", "bind@n2"}},
    ),
    Case(
        "preferred spreading doubles up when there are fewer nodes than tasks",
        _three_nodes().job("g", "q", spread="preferred").pending(5),
        ("allocate",),
        {"g": {"bind@n0", "bind@n1", "bind@n2"}},
    ),
    Case(
        "required spreading waits when fewer nodes have room than it has tasks",
        _three_nodes().job("busy", "q", gpu=4).running("n2").job("g", "q", spread="required").pending(3),
        ("allocate",),
        {},
        reasons={"g": "must spread one task per node: only 2 nodes have room for a task"},
    ),
    Case(
        "required spreading over more tasks than nodes can never start, and says so",
        _three_nodes().job("g", "q", spread="required").pending(4),
        ("allocate",),
        {},
        reasons={"g": "even empty it holds at most 3 such tasks, one per node (12 GPUs on 3 nodes)"},
    ),
    Case(
        "required spreading keeps an elastic job's next task off the nodes it holds",
        _three_nodes()
        .job("other", "q", gpu=4)
        .running("n2")
        .job("e", "q", min_member=1, spread="required")
        .running("n0")
        .pending(),
        ("allocate",),
        {"e": {"bind@n1"}},
    ),
    Case(
        "preempt frees a node of its own for a gang that requires spreading",
        ClusterBuilder()
        .node("n0", gpus=2)
        .node("n1", gpus=2)
        .queue("q", gpu_quota=4)
        .job("t1", "q")
        .running("n1")
        .job("t2", "q")
        .running("n1")
        .job("inf", "q", priority="inference", spread="required")
        .pending(2),
        ("allocate", "preempt"),
        # t2 leaves n1 for the spread gang and fits again on n0 beside it: moved, not
        # stopped (KAI's solver places a victim again where it fits).
        {"inf": {"pipeline@n0", "pipeline@n1"}, "t2": {"evict@n1", "pipeline@n0"}},
    ),
    Case(
        "binpack fills the fuller node first",
        ClusterBuilder()
        .node("n0", gpus=4)
        .node("n1", gpus=4)
        .queue("q", gpu_quota=8)
        .job("old", "q")
        .running("n1")
        .job("new", "q")
        .pending(),
        ("allocate",),
        {"new": {"bind@n1"}},
    ),
    Case(
        "spread takes the emptier node",
        ClusterBuilder()
        .node("n0", gpus=4)
        .node("n1", gpus=4)
        .queue("q", gpu_quota=8)
        .job("old", "q")
        .running("n1")
        .job("new", "q")
        .pending(),
        ("allocate",),
        {"new": {"bind@n0"}},
        config={"gpu_placement": "spread"},
    ),
    Case(
        "a gang that fits only in part starts not at all",
        ClusterBuilder()
        .node("n0", gpus=2)
        .node("n1", gpus=2)
        .queue("q", gpu_quota=4)
        .job("busy", "q")
        .running("n1")
        .job("gang", "q", gpu=2)
        .pending(2),
        ("allocate",),
        {},
        {"gang": "only part of the gang fits at once (1 node has room for a task; free: 3 whole GPUs"},
    ),
    Case(
        "a gang larger than the empty cluster can never start, and says so",
        ClusterBuilder().node("n0", gpus=4).node("n1", gpus=4).job("gang", "default", gpu=4).pending(3),
        ("allocate",),
        {},
        {"gang": "even empty it holds at most 2 such tasks (8 GPUs on 2 nodes)"},
    ),
    Case(
        "a queue's limit at the parent level holds its child back",
        ClusterBuilder()
        .node("n0", gpus=8)
        .queue("dept", gpu_quota=2, gpu_limit=2)
        .queue("team", "dept", gpu_quota=2)
        .job("one", "team", gpu=2)
        .running("n0")
        .job("two", "team", gpu=1)
        .pending(),
        ("allocate",),
        {},
        {"two": "queue dept is at its limit of 2 GPU"},
    ),
    Case(
        "a non-preemptible job stays within deserved; a preemptible one may go beyond",
        ClusterBuilder()
        .node("n0", gpus=4)
        .queue("q", gpu_quota=1)
        .job("build", "q", gpu=2, priority="build")
        .pending()
        .job("train", "q", gpu=2)
        .pending(),
        ("allocate",),
        {"train": {"bind@n0"}},
        {"build": "non-preemptible job"},
    ),
    Case(
        "a selector no node matches is named",
        ClusterBuilder()
        .node("n0", gpus=1, zone="a")
        .queue("q", gpu_quota=1)
        .job("j", "q", node_selector={"zone": "b"})
        .pending(),
        ("allocate",),
        {},
        {"j": "nodeSelector zone=b"},
    ),
    Case(
        "a task larger than any node says so",
        ClusterBuilder().node("n0", gpus=2).queue("q", gpu_quota=8).job("huge", "q", gpu=4).pending(),
        ("allocate",),
        {},
        {"huge": "task (4 GPUs, 1 CPU, 1Gi memory) cannot fit in this cluster as it is: no node it may"},
    ),
    Case(
        "a required rack picks the rack with room",
        _racks()
        .job("busy", "q", gpu=1)
        .running("a0")
        .job("gang", "q", gpu=2, topology=TopologyConstraint("t", required="rack"))
        .pending(2),
        ("allocate",),
        {"gang": {"bind@b0"}},
        config={"topologies": {}},
    ),
    Case(
        "a required rack without room for the gang names the largest free rack",
        _racks()
        .job("busy", "q", gpu=1)
        .running("a0")
        .running("b0")
        .job("gang", "q", gpu=2, topology=TopologyConstraint("t", required="rack"))
        .pending(2),
        ("allocate",),
        {},
        {"gang": "it needs 4 GPUs, the largest free rack (ra) has 3"},
    ),
    Case(
        "a gang larger than any rack can never start, and names the largest rack",
        _racks().job("gang", "q", gpu=3, topology=TopologyConstraint("t", required="rack")).pending(2),
        ("allocate",),
        {},
        {"gang": "even empty its largest rack (rb) holds at most 1 such task (4 GPUs on 1 node)"},
    ),
    Case(
        "preempt never crosses queues",
        ClusterBuilder()
        .node("n0", gpus=1)
        .queue("a", gpu_quota=1)
        .queue("b", gpu_quota=0)
        .job("train", "b")
        .running("n0")
        .job("infer", "a", priority="inference")
        .pending(),
        ("preempt",),
        {},
        {"infer": "no lower-priority preemptible job in queue a"},
    ),
    Case(
        "preempt takes a lower-priority job of the same queue",
        ClusterBuilder()
        .node("n0", gpus=1)
        .queue("a", gpu_quota=1)
        .job("train", "a")
        .running("n0")
        .job("infer", "a", priority="inference")
        .pending(),
        ("preempt",),
        {"train": {"evict@n0"}, "infer": {"pipeline@n0"}},
    ),
    Case(
        "the youngest victim goes first, whichever node it is on",
        ClusterBuilder()
        .node("n0", gpus=1)
        .node("n1", gpus=1)
        .queue("a", gpu_quota=2)
        .job("old", "a")
        .running("n0")
        .job("young", "a")
        .running("n1")
        .job("infer", "a", priority="inference")
        .pending(),
        ("preempt",),
        {"young": {"evict@n1"}, "infer": {"pipeline@n1"}},
    ),
    Case(
        "preempt min runtime protects a young victim",
        ClusterBuilder()
        .node("n0", gpus=1)
        .queue("a", gpu_quota=1, preempt_min_runtime=600.0)
        .job("train", "a")
        .running("n0", since=-60)
        .job("infer", "a", priority="inference")
        .pending(),
        ("preempt",),
        {},
    ),
    Case(
        "preempt min runtime lets an old victim go",
        ClusterBuilder()
        .node("n0", gpus=1)
        .queue("a", gpu_quota=1, preempt_min_runtime=600.0)
        .job("train", "a")
        .running("n0", since=-900)
        .job("infer", "a", priority="inference")
        .pending(),
        ("preempt",),
        {"train": {"evict@n0"}, "infer": {"pipeline@n0"}},
    ),
    Case(
        "reclaim min runtime protects the victim of another queue",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("root", gpu_quota=2, cpu_quota=UNLIMITED)
        .queue("a", "root", gpu_quota=1, reclaim_min_runtime=600.0)
        .queue("b", "root", gpu_quota=1)
        .job("a1", "a")
        .running("n0", since=-60)
        .job("a2", "a")
        .running("n0", since=-60)
        .job("b1", "b")
        .pending(),
        ("reclaim",),
        {},
    ),
    Case(
        "reclaim takes from the queue over its fair share",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("root", gpu_quota=2)
        .queue("a", "root", gpu_quota=1)
        .queue("b", "root", gpu_quota=1)
        .job("a1", "a")
        .running("n0")
        .job("a2", "a")
        .running("n0")
        .job("b1", "b")
        .pending(),
        ("reclaim",),
        {"a2": {"evict@n0"}, "b1": {"pipeline@n0"}},
    ),
    Case(
        "no reclaim from a queue at its fair share",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("root", gpu_quota=2)
        .queue("a", "root", gpu_quota=1)
        .queue("b", "root", gpu_quota=1)
        .job("a1", "a")
        .running("n0")
        .job("b1", "b")
        .running("n0")
        .job("b2", "b")
        .pending(),
        ("reclaim",),
        {},
        {"b2": "cannot reclaim"},
    ),
    Case(
        "a gang that requires spreading and cannot start does not make an identical gang "
        "without it skip preemption (one key for skipped searches)",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2)
        .job("t1", "q")
        .running("n0")
        .job("t2", "q")
        .running("n0")
        .job("spread", "q", priority="inference", spread="required")
        .pending(2)
        .job("packed", "q", priority="inference")
        .pending(2),
        ("preempt",),
        {"packed": {"pipeline@n0"}, "t1": {"evict@n0"}, "t2": {"evict@n0"}},
        {"spread": "no lower-priority preemptible job in queue q can make room"},
    ),
    Case(
        "a gang with a required topology nothing offers does not make an identical gang "
        "without one skip consolidation",
        ClusterBuilder()
        .node("n0", gpus=2)
        .node("n1", gpus=2)
        .queue("q", gpu_quota=4)
        .job("r0", "q")
        .running("n0")
        .job("r1", "q")
        .running("n1")
        .job("zoned", "q", gpu=2, topology=TopologyConstraint("t", required="zone"))
        .pending()
        .job("plain", "q", gpu=2)
        .pending(),
        ("allocate", "consolidation"),
        {"plain": {"pipeline@n1"}, "r1": {"evict@n1", "pipeline@n0"}},
        {"zoned": "no matching node has the label zone"},
    ),
    Case(
        "a reclaim rolled back (the department would go over its fair share) leaves the "
        "reason allocate gave, not none",
        ClusterBuilder()
        .node("n0", gpus=6)
        .queue("dept", gpu_quota=3, weight=0)
        .queue("a1", "dept", gpu_quota=1)
        .queue("a2", "dept", gpu_quota=2)
        .queue("e", gpu_quota=1, weight=0)
        .job("serve", "a2", priority="inference")
        .running("n0", count=4)
        .job("e1", "e")
        .running("n0")
        .job("e2", "e")
        .running("n0")
        .job("j", "a1")
        .pending(),
        ("allocate", "reclaim"),
        {},
        {"j": "no node has room now for even one task"},
    ),
    Case(
        "consolidation does not run under spread placement",
        ClusterBuilder()
        .node("n0", gpus=4)
        .node("n1", gpus=4)
        .queue("q", gpu_quota=8)
        .job("r0", "q", gpu=2)
        .running("n0")
        .job("r1", "q", gpu=2)
        .running("n1")
        .job("big", "q", gpu=3)
        .pending(),
        ("consolidation",),
        {},
        config={"gpu_placement": "spread"},
    ),
    Case(
        "stale gang within its grace period is left alone",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2)
        .job("g", "q")
        .running("n0", since=-300)
        .failed(since=-30),
        ("stalegangeviction",),
        {},
    ),
    Case(
        "a negative grace period never evicts",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2)
        .job("g", "q")
        .running("n0", since=-300)
        .failed(since=-3000),
        ("stalegangeviction",),
        {},
        config={"stale_gang_grace_period": -1.0},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule(case: Case) -> None:
    result = cycle(case.cluster.build(), *case.actions, now=case.now, **case.config)
    assert outcome(result) == case.expect
    for job, words in case.reasons.items():
        assert words in result.pending_reasons.get(job, ""), result.pending_reasons


def test_unknown_queue_is_reported_and_nothing_else_is_disturbed() -> None:
    snap = (
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2)
        .job("ok", "q")
        .pending()
        .job("lost", "nowhere")
        .pending()
        .build()
    )
    result = cycle(snap, "allocate")
    assert outcome(result) == {"ok": {"bind@n0"}}
    assert "queue 'nowhere' does not exist" in result.invalid["lost"]


def test_unknown_spread_is_reported_with_the_fix() -> None:
    snap = (
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2)
        .job("ok", "q")
        .pending()
        .job("odd", "q", spread="STRICT")
        .pending()
        .build()
    )
    result = cycle(snap, "allocate")
    assert outcome(result) == {"ok": {"bind@n0"}}
    assert result.invalid["odd"] == (
        "job 'odd': spread 'STRICT' is unknown; use 'preferred', 'required' or '' (no spreading)"
    )


def test_invalid_tree_is_refused_with_the_queue_and_field() -> None:
    snap = ClusterBuilder().node("n0").build()
    snap.queues = [QueueInfo("a", parent="b"), QueueInfo("b", parent="a")]
    with pytest.raises(ValueError, match="field parent makes a cycle"):
        cycle(snap, "allocate")
