"""Required node affinity in the core: Kubernetes' operators, terms ORed and requirements
ANDed, per task within one gang, and every action keeping a task to the nodes it may use."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kai_ray.core import NodeAffinity, NodeRequirement, SchedulerConfig, run_cycle
from kai_ray.core.model.affinity import describe_affinity, requirement_matches

from .builders import ClusterBuilder, affinity, cycle, name_req, outcome, req

# ---------------------------------------------------------------- one requirement


@dataclass
class Match:
    name: str
    requirement: NodeRequirement
    value: str | None  # the node's label (None: the node lacks it)
    expected: bool


MATCHES = [
    Match("In, a listed value", req("gpu", "In", "a100", "h100"), "h100", True),
    Match("In, another value", req("gpu", "In", "a100"), "h100", False),
    Match("In, no label", req("gpu", "In", "a100"), None, False),
    Match("NotIn, a listed value", req("gpu", "NotIn", "a100"), "a100", False),
    Match("NotIn, another value", req("gpu", "NotIn", "a100"), "h100", True),
    Match("NotIn holds on a node without the label", req("gpu", "NotIn", "a100"), None, True),
    Match("Exists", req("gpu", "Exists"), "", True),
    Match("Exists, no label", req("gpu", "Exists"), None, False),
    Match("DoesNotExist, no label", req("gpu", "DoesNotExist"), None, True),
    Match("DoesNotExist, a label", req("gpu", "DoesNotExist"), "a100", False),
    Match("Gt, larger", req("cores", "Gt", "4"), "8", True),
    Match("Gt, equal", req("cores", "Gt", "4"), "4", False),
    Match("Gt compares numbers, not text", req("cores", "Gt", "4"), "10", True),
    Match("Gt with a sign", req("cores", "Gt", "-1"), "+0", True),
    Match("Gt, a label that is not an integer", req("cores", "Gt", "4"), "8.5", False),
    Match("Gt, no label", req("cores", "Gt", "4"), None, False),
    Match("Lt, smaller", req("cores", "Lt", "4"), "3", True),
    Match("Lt, larger", req("cores", "Lt", "4"), "30", False),
    Match("Lt, beyond int64", req("cores", "Lt", "4"), "-9223372036854775809", False),
    Match("a field: the node's name", name_req("In", "n1"), "n1", True),
    Match("a field NotIn", name_req("NotIn", "n1"), "n1", False),
]


@pytest.mark.parametrize("case", MATCHES, ids=[c.name for c in MATCHES])
def test_a_requirement_matches_as_kubernetes(case: Match) -> None:
    assert requirement_matches(case.requirement, case.value) is case.expected


@dataclass
class Invalid:
    name: str
    args: tuple[str, str, tuple[str, ...], bool]  # key, operator, values, field
    words: str


INVALID = [
    Invalid(
        "an unknown operator", ("gpu", "Equals", ("a",), False), "operator 'Equals' is unknown; use one of"
    ),
    Invalid("In without values", ("gpu", "In", (), False), "needs at least one value"),
    Invalid("Exists with values", ("gpu", "Exists", ("a",), False), "takes no values; remove values"),
    Invalid("Gt with two values", ("n", "Gt", ("1", "2"), False), "exactly one value"),
    Invalid("Gt with a non-integer", ("n", "Gt", ("four",), False), "'four' is not one; write e.g. '4'"),
    Invalid("Lt with a fraction", ("n", "Lt", ("1.5",), False), "compares integers"),
    Invalid("an empty key", ("", "Exists", (), False), "key is empty"),
    Invalid("a field other than the name", ("metadata.uid", "In", ("x",), True), "use metadata.name"),
    Invalid("Exists on the name", ("metadata.name", "Exists", (), True), "use In or NotIn"),
]


@pytest.mark.parametrize("case", INVALID, ids=[c.name for c in INVALID])
def test_an_invalid_requirement_is_refused_with_the_fix(case: Invalid) -> None:
    key, operator, values, field = case.args
    with pytest.raises(ValueError, match=case.words.replace("(", r"\(").replace(")", r"\)")):
        NodeRequirement(key, operator, values, field)


def test_an_affinity_reads_as_kubernetes_writes_it() -> None:
    one = affinity([req("gpu", "In", "a100", "h100"), req("cores", "Gt", "4")])
    assert describe_affinity(one) == "gpu In [a100, h100], cores Gt 4"
    two = affinity([req("gpu", "In", "a100"), req("zone", "Exists")], [name_req("In", "n9")], pool="x")
    assert (
        describe_affinity(two)
        == "(gpu In [a100], zone Exists) or metadata.name In [n9], with nodeSelector pool=x"
    )
    assert describe_affinity(affinity([])) == "(an empty term, which no node meets)"


# ---------------------------------------------------------------- placement


def _labelled() -> ClusterBuilder:
    """n0: a100 with 8 cores, n1: h100 with 16, n2: no GPU type; 4 GPUs each."""
    return (
        ClusterBuilder()
        .node("n0", gpus=4, **{"gpu-type": "a100", "cores": "8"})
        .node("n1", gpus=4, **{"gpu-type": "h100", "cores": "16"})
        .node("n2", gpus=4)
    )


@dataclass
class Where:
    name: str
    affinity: NodeAffinity
    nodes: set[str]  # where the one-GPU task may land; empty: it waits


WHERE = [
    Where("In", affinity([req("gpu-type", "In", "h100")]), {"n1"}),
    Where("NotIn (a node without the label too)", affinity([req("gpu-type", "NotIn", "h100")]), {"n0", "n2"}),
    Where("Exists", affinity([req("gpu-type", "Exists")]), {"n0", "n1"}),
    Where("DoesNotExist", affinity([req("gpu-type", "DoesNotExist")]), {"n2"}),
    Where("Gt", affinity([req("cores", "Gt", "8")]), {"n1"}),
    Where("Lt", affinity([req("cores", "Lt", "16")]), {"n0"}),
    Where(
        "a term's requirements all hold",
        affinity([req("gpu-type", "Exists"), req("cores", "Lt", "9")]),
        {"n0"},
    ),
    Where(
        "terms are ORed",
        affinity([req("gpu-type", "In", "h100")], [req("gpu-type", "DoesNotExist")]),
        {"n1", "n2"},
    ),
    Where("the node's name", affinity([name_req("In", "n2")]), {"n2"}),
    Where("a task's own nodeSelector", affinity(**{"gpu-type": "a100"}), {"n0"}),
    Where(
        "nodeSelector and affinity both hold",
        affinity([req("cores", "Gt", "8")], **{"gpu-type": "a100"}),
        set(),
    ),
    Where("an empty term meets no node", affinity([]), set()),
]


@pytest.mark.parametrize("case", WHERE, ids=[c.name for c in WHERE])
def test_a_task_lands_only_where_its_affinity_admits(case: Where) -> None:
    # Three one-GPU jobs: spread placement takes the emptiest node first, so every
    # admitted node (at most three) gets one, and no other node does.
    snap = _labelled()
    for i in range(3):
        snap = snap.job(f"j{i}", "default").pending(affinity=case.affinity)
    result = cycle(snap.build(), "allocate", gpu_placement="spread")
    assert {d.node for d in result.decisions} == case.nodes
    if not case.nodes:
        assert result.waiting["j0"].code in ("node-affinity", "node-selector")


def test_tasks_of_one_gang_may_differ() -> None:
    """A head with no affinity goes where binpack sends it; the GPU workers only to h100
    (binpack alone would send them to n0, the first of two equally full nodes)."""
    snap = (
        _labelled()
        .job("busy", "default", gpu=3)
        .running("n2")
        .job("rc", "default")
        .pending()  # the head: fullest node first, n2
        .pending(2, affinity=affinity([req("gpu-type", "In", "h100")]))
        .build()
    )
    decisions = run_cycle(snap, SchedulerConfig(actions=("allocate",)), 0.0).decisions
    assert sorted((d.task, d.node) for d in decisions) == [("rc-0", "n2"), ("rc-1", "n1"), ("rc-2", "n1")]


def test_a_gang_waits_whole_when_one_task_affinity_has_no_room() -> None:
    snap = (
        _labelled()
        .job("busy", "default", gpu=4)
        .running("n0")
        .job("rc", "default")
        .pending()
        .pending(affinity=affinity([req("gpu-type", "In", "a100")]))
        .build()
    )
    result = cycle(snap, "allocate")
    assert "rc" not in outcome(result)
    assert result.waiting["rc"].code == "no-room"


def test_look_alike_gangs_each_name_their_own_task() -> None:
    """Equal gangs share failed searches, but the affinity reason names each one's task."""
    b200 = affinity([req("gpu-type", "In", "b200")])
    snap = _labelled()
    for name in ("a", "b", "c"):
        snap = snap.job(name, "default").pending().pending(affinity=b200)
    result = cycle(snap.build())
    for name in ("a", "b", "c"):
        assert result.waiting[name].text == (
            f"no schedulable node meets the required node affinity of task {name}-1: gpu-type In [b200]"
        )


@pytest.mark.parametrize("x", ["1", None])
def test_an_affinity_every_task_shares_is_the_jobs(x: str | None) -> None:
    labels = {"zone": "a"} if x is None else {"zone": "a", "x": x}
    snap = (
        ClusterBuilder()
        .node("n0", gpus=4, **labels)
        .node("n1", gpus=4, x="1")  # has x, but not zone a
        .job("j", "default", node_selector={"zone": "a"})
        .pending(2, affinity=affinity([req("x", "Exists")]))
        .build()
    )
    result = cycle(snap)
    if x is not None:
        assert outcome(result) == {"j": {"bind@n0"}}
        return
    reason = result.waiting["j"]
    assert reason.code == "node-affinity"
    assert reason.text == (
        "no schedulable node meets the required node affinity of its tasks: x Exists; "
        "nodes must also match nodeSelector zone=a"
    )


def test_a_selector_no_node_matches_is_said_before_the_affinity() -> None:
    snap = _labelled().job("j", "default", node_selector={"zone": "z"})
    snap = snap.pending(affinity=affinity([req("x", "Exists")]))
    assert cycle(snap.build()).waiting["j"].code == "node-selector"


def test_a_look_alike_with_another_affinity_is_searched_again() -> None:
    """The failed search of a gang is not the failure of one wanting other nodes."""
    snap = (
        _labelled()
        .job("busy", "default", gpu=4)
        .running("n0")
        .job("want-a100", "default")
        .pending(affinity=affinity([req("gpu-type", "In", "a100")]))
        .job("want-h100", "default")
        .pending(affinity=affinity([req("gpu-type", "In", "h100")]))
        .build()
    )
    assert outcome(cycle(snap, "allocate")) == {"want-h100": {"bind@n1"}}


def test_elastic_surplus_keeps_to_its_affinity() -> None:
    a100 = affinity([req("gpu-type", "In", "a100")])
    snap = _labelled().job("e", "default", gpu=2, min_member=1).pending(4, affinity=a100).build()
    assert outcome(cycle(snap, "allocate")) == {"e": {"bind@n0"}}


def test_preemption_takes_victims_only_on_nodes_the_preemptor_may_use() -> None:
    """The youngest victim runs on n1; the preemptor may only use n0, so the older job
    there goes instead."""
    snap = (
        ClusterBuilder()
        .node("n0", gpus=1, pool="gpu-a")
        .node("n1", gpus=1, pool="gpu-b")
        .queue("q", gpu_quota=2)
        .job("old", "q", created_at=0)
        .running("n0", since=-7200)
        .job("young", "q", created_at=5)
        .running("n1", since=-60)
        .job("serve", "q", priority="inference", created_at=9)
        .pending(affinity=affinity([req("pool", "In", "gpu-a")]))
        .build()
    )
    result = cycle(snap, "allocate", "preempt")
    assert outcome(result) == {"old": {"evict@n0"}, "serve": {"pipeline@n0"}}


def test_the_victim_search_looks_only_at_nodes_the_preemptor_may_use() -> None:
    """Seventy nodes of younger victims come first in victim order. The gang's head may
    use any node and takes the youngest; its worker may use only a0, and the search
    (which tries a bounded number of nodes) looks there, not at the others."""
    snap = ClusterBuilder().node("a0", gpus=1, pool="a").queue("q", gpu_quota=100)
    snap = snap.job("old", "q", created_at=0).running("a0", since=-7200)
    for i in range(70):
        snap = snap.node(f"b{i}", gpus=1, pool="b")
        snap = snap.job(f"young{i}", "q", created_at=1 + i).running(f"b{i}", since=-60)
    snap = snap.job("serve", "q", priority="inference", created_at=99).pending()
    snap = snap.pending(affinity=affinity([req("pool", "In", "a")]))
    result = cycle(snap.build(), "allocate", "preempt")
    assert outcome(result) == {
        "young69": {"evict@b69"},
        "old": {"evict@a0"},
        "serve": {"pipeline@b69", "pipeline@a0"},
    }


def test_consolidation_moves_a_task_only_where_its_affinity_admits() -> None:
    """To free n0 for a 2-GPU gang, the one-GPU job there must move to n1, which its
    affinity refuses: nothing moves. (The gang outranks it, so in the solver's
    simulation the gang is placed first and the small job looks for room after it.)"""
    snap = (
        ClusterBuilder()
        .node("n0", gpus=2, pool="a")
        .node("n1", gpus=1, pool="b")
        .job("small", "default")
        .running("n0", affinity=affinity([req("pool", "In", "a")]))
        .job("gang", "default", gpu=2, priority="build-preemptible")
        .pending()
        .build()
    )
    assert "small" not in outcome(cycle(snap, "allocate", "consolidation"))
    free = snap.jobs[0].tasks[0]
    free.node_affinity = None
    assert outcome(cycle(snap, "allocate", "consolidation")) == {
        "small": {"evict@n0", "pipeline@n1"},
        "gang": {"pipeline@n0"},
    }
