"""What a cycle says about the jobs that still wait: a reason code for each (one named
situation per code), and each leaf queue's line (queue_order), which is the order
allocate serves jobs in."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kai_ray.core import REASON_CODES, QueueAccess, Reason, TopologyConstraint

from .builders import ClusterBuilder, affinity, cycle, outcome, req

DOCS = Path(__file__).resolve().parents[2] / "docs" / "semantics.md"


@dataclass
class Case:
    name: str
    cluster: ClusterBuilder
    code: str  # job "j"'s reason code
    words: str = ""  # and words its text contains
    actions: tuple[str, ...] = ("allocate",)
    config: dict[str, object] = field(default_factory=dict)


def _two_gpus() -> ClusterBuilder:
    return ClusterBuilder().node("n0", gpus=2).queue("q", gpu_quota=2)


def _racks() -> ClusterBuilder:
    return ClusterBuilder().node("a0", gpus=2, rack="a").node("b0", gpus=2, rack="b").queue("q", gpu_quota=4)


CASES = [
    Case("an unknown queue", _two_gpus().job("j", "nowhere").pending(), "invalid", "does not exist"),
    Case(
        "no action that tries the job",
        _two_gpus().job("j", "q").pending(),
        "not-tried",
        "not tried this cycle",
        actions=("stalegangeviction",),
    ),
    Case(
        "a gang whose other tasks failed",
        _two_gpus().job("j", "q", min_member=3).failed().pending(2),
        "gang-incomplete",
        "it cannot start whole",
    ),
    Case(
        # Settled: once the older gang failed, every job left is sure to fail, and this
        # one gets its reason without being ranked (settling.py).
        "a gang whose other tasks failed, behind a gang that failed",
        _two_gpus().job("big", "q").pending(3).job("j", "q", min_member=3).failed().pending(2),
        "gang-incomplete",
        "it cannot start whole",
    ),
    Case(
        "a gang larger than the empty cluster",
        _two_gpus().job("j", "q").pending(3),
        "gang-too-big",
        "cannot fit in this cluster as it is",
    ),
    Case(
        "an elastic task larger than any node",
        ClusterBuilder()
        .node("big", gpus=4, unschedulable=True)
        .node("n0", gpus=2)
        .job("j", "default", gpu=4, min_member=1)
        .running("big")
        .pending(),
        "gang-too-big",
        "no node is that large",
    ),
    Case(
        "a node selector no node matches",
        _two_gpus().job("j", "q", node_selector={"zone": "b"}).pending(),
        "node-selector",
        "nodeSelector zone=b",
    ),
    Case(
        "a task's required node affinity that no node meets",
        _two_gpus().job("j", "q").pending().pending(affinity=affinity([req("gpu-type", "In", "h100")])),
        "node-affinity",
        "no schedulable node meets the required node affinity of task j-1: gpu-type In [h100]",
    ),
    Case(
        "GPU types the cluster does not have",
        ClusterBuilder()
        .node("n0", gpus=2, gpu_type="A100")
        .job("j", "default", gpu_types=("H100",))
        .pending(),
        "gpu-type",
        "no schedulable node has a GPU type it accepts (H100); the nodes it may use have A100",
    ),
    Case(
        "a required rack without room",
        _racks()
        .job("busy", "q")
        .running("a0")
        .running("b0")
        .job("j", "q", topology=TopologyConstraint("t", required="rack"))
        .pending(2),
        "topology",
        "must share one rack",
    ),
    Case(
        "required spreading over too few nodes with room",
        _racks().job("busy", "q", gpu=2).running("b0").job("j", "q", spread="required").pending(2),
        "spread",
        "must spread one task per node",
    ),
    Case(
        "a gang that fits only in part",
        _two_gpus().job("busy", "q").running("n0").job("j", "q").pending(2),
        "no-room",
        "only part of the gang fits at once",
    ),
    Case(
        "a queue at its limit",
        ClusterBuilder()
        .node("n0", gpus=4)
        .queue("q", gpu_quota=1, gpu_limit=1)
        .job("busy", "q")
        .running("n0")
        .job("j", "q")
        .pending(),
        "queue-limit",
        "queue q is at its limit of 1 GPU",
    ),
    Case(
        "a parent queue at its limit",
        ClusterBuilder()
        .node("n0", gpus=4)
        .queue("dept", gpu_quota=1, gpu_limit=1)
        .queue("team", "dept", gpu_quota=1)
        .job("busy", "team")
        .running("n0")
        .job("j", "team")
        .pending(),
        "queue-limit",
        "queue dept is at its limit",
    ),
    Case(
        "a non-preemptible job over its queue's quota",
        ClusterBuilder()
        .node("n0", gpus=4)
        .queue("q", gpu_quota=1)
        .job("j", "q", gpu=2, priority="build")
        .pending(),
        "queue-quota",
        "would go over its deserved quota",
    ),
    Case(
        "reclaim would take the queue over its fair share",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("a", gpu_quota=1)
        .queue("b", gpu_quota=1)
        .job("a1", "a")
        .running("n0")
        .job("b1", "b")
        .running("n0")
        .job("j", "b")
        .pending(),
        "fair-share",
        "queue b cannot reclaim: it would go over its fair share of 1 GPU",
        actions=("reclaim",),
    ),
    Case(
        "the only victim is within its min runtime",
        ClusterBuilder()
        .node("n0", gpus=1)
        .queue("q", gpu_quota=1, preempt_min_runtime=600.0)
        .job("train", "q")
        .running("n0", since=-60)
        .job("j", "q", priority="inference")
        .pending(),
        "min-runtime",
        "preempting would make room, but 1 running job it would take is within the minimum runtime "
        "(the last for 540s more)",
        actions=("allocate", "preempt"),
    ),
    Case(
        # Settled: j's look-alike failed first, on min runtime; j is passed over by its
        # key, and still gets that failure's reason, not allocate's "no free room".
        "a look-alike behind it found the only victim within its min runtime",
        ClusterBuilder()
        .node("n0", gpus=1)
        .queue("q", gpu_quota=1, preempt_min_runtime=600.0)
        .job("train", "q")
        .running("n0", since=-60)
        .job("first", "q", priority="inference")
        .pending()
        .job("j", "q", priority="inference")
        .pending(),
        "min-runtime",
        "(the last for 540s more)",
        actions=("allocate", "preempt"),
    ),
    Case(
        "preempting would make room, but an autoscaler may add nodes first",
        ClusterBuilder()
        .grows()
        .node("n0", gpus=1)
        .queue("q", gpu_quota=1)
        .job("train", "q")
        .running("n0")
        .job("j", "q", priority="inference")
        .pending(),
        "preemption-delay",
        "waiting up to 120s for new nodes before preempting (an autoscaler may add them); 120s left",
        actions=("allocate", "preempt"),
        config={"preemption_delay_s": 120.0},
    ),
    Case(
        # Allocate binds j, the one that fits; preempt then takes it back, and the
        # running job, for the higher-priority gang that needs both GPUs.
        "placed this cycle, then taken back for a gang of higher priority",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2)
        .job("train", "q")
        .running("n0")
        .job("serve", "q", priority="inference")
        .pending(2)
        .job("j", "q")
        .pending(),
        "taken-back",
        "placed this cycle, then taken back by preempt (preempted by serve in q)",
        actions=("allocate", "preempt"),
    ),
    Case(
        "a gang that waited long holds the room; the job would end after its start",
        ClusterBuilder()
        .node("n0", gpus=2)
        .job("run", "default")
        .running("n0")
        .runtime(expected=3600)
        .job("gang", "default", created_at=-1)
        .pending(2)
        .job("j", "default")
        .pending()
        .runtime(expected=7200),
        "reserved",
        "reserved for gang gang",
        config={"reserve_after_s": 60.0, "now": 120.0},
    ),
    Case(
        "a tenant its queue does not admit",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2, access=QueueAccess(tenants=("team-a",)))
        .job("j", "q", tenant="team-b")
        .pending(),
        "queue-tenant",
        "queue 'q' admits tenant team-a, not tenant 'team-b'",
    ),
    Case(
        "a priority over its queue's ceiling",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2, access=QueueAccess(max_priority=100, max_priority_class="build"))
        .job("j", "q", priority="inference")
        .pending(),
        "priority-ceiling",
        "priority 125 is over the ceiling of queue 'q', 100 (build)",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reason_code(case: Case) -> None:
    result = cycle(case.cluster.build(), *case.actions, **case.config)
    reason = result.waiting["j"]
    assert reason.code == case.code, reason
    assert case.words in reason.text
    assert result.pending_reasons["j"] == reason.text


def test_every_code_has_a_case_and_a_line_in_the_docs() -> None:
    assert {c.code for c in CASES} == set(REASON_CODES)
    documented = set(re.findall(r"^- `([a-z-]+)`:", DOCS.read_text(), flags=re.MULTILINE))
    assert set(REASON_CODES) <= documented, set(REASON_CODES) - documented


def test_a_code_outside_the_set_is_refused() -> None:
    with pytest.raises(ValueError, match="reason code 'busy' is not one of"):
        Reason("busy", "the cluster is busy")


def test_waiting_covers_exactly_the_jobs_with_a_pending_reason() -> None:
    snap = (
        _two_gpus()
        .job("placed", "q")
        .pending()
        .job("waits", "q", gpu=2)
        .pending()
        .job("lost", "nowhere")
        .pending()
        .build()
    )
    result = cycle(snap, "allocate")
    assert set(result.waiting) == set(result.pending_reasons) == {"waits", "lost"}
    assert {job: r.text for job, r in result.waiting.items()} == result.pending_reasons


# ---------------------------------------------------------------- queue order


def _line_up(gpus: int) -> ClusterBuilder:
    """Two leaf queues under one department; jobs of mixed priority and age in each."""
    return (
        ClusterBuilder()
        .node("n0", gpus=gpus)
        .queue("dept", gpu_quota=8)
        .queue("a", "dept", gpu_quota=4)
        .queue("b", "dept", gpu_quota=4)
        .queue("idle", "dept", gpu_quota=0)
        .job("a-old-train", "a", created_at=1)
        .pending()
        .job("b-build", "b", priority="build-preemptible", created_at=2)
        .pending()
        .job("a-new-infer", "a", priority="inference", created_at=3)
        .pending()
        .job("a-mid-train", "a", created_at=2)
        .pending()
        .job("b-train", "b", created_at=0)
        .pending()
    )


def test_queue_order_is_priority_then_age_within_each_leaf_queue() -> None:
    result = cycle(_line_up(gpus=0).build(), "allocate")
    assert result.queue_order == {
        "a": ("a-new-infer", "a-old-train", "a-mid-train"),
        "b": ("b-build", "b-train"),
        "idle": (),
    }


@pytest.mark.parametrize("room", [1, 2, 3, 4])
def test_allocate_serves_each_queue_in_its_queue_order(room: int) -> None:
    """With room for some jobs, each queue's placed jobs are the head of the line it had
    with no room, and its new line is the rest."""
    line = cycle(_line_up(gpus=0).build(), "allocate").queue_order
    result = cycle(_line_up(gpus=room).build(), "allocate")
    placed = set(outcome(result))
    assert len(placed) == room
    for queue, jobs in line.items():
        served = [j for j in jobs if j in placed]
        assert list(jobs[: len(served)]) == served, (queue, jobs, placed)
        assert result.queue_order[queue] == jobs[len(served) :]


def test_an_elastic_job_at_its_gang_waits_behind_a_job_short_of_its_gang() -> None:
    snap = (
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2)
        .job("elastic-old", "q", min_member=1, created_at=0)
        .running("n0")
        .pending(2)
        .job("rigid-new", "q", gpu=2, created_at=5)
        .pending()
        .build()
    )
    result = cycle(snap, "allocate")
    assert outcome(result) == {"elastic-old": {"bind@n0"}}
    assert result.queue_order == {"q": ("rigid-new", "elastic-old")}
