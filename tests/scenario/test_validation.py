"""Every kind of invalid scenario: one ConfigError naming the file, object, field and fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from kai_ray.config import ConfigError
from kai_ray.scenario.loader import parse_scenario
from kai_ray.scenario.schema import MAX_GPUS_PER_NODE, MAX_ROUNDS, MAX_TASKS
from tests.scenario.builders import ScenarioBuilder, pending, running, scenario


@dataclass(frozen=True)
class Case:
    id: str
    data: Callable[[], Any]  # the raw file content
    fragments: tuple[str, ...]  # all must appear in the message


def without(key: str) -> Callable[[], Any]:
    def build() -> Any:
        data = scenario().job("j").build()
        del data[key]
        return data

    return build


def b(builder: ScenarioBuilder) -> Callable[[], Any]:
    return builder.build


def two_level(**team: Any) -> ScenarioBuilder:
    return scenario().queue("dept").queue("team", "dept", **team)


def _term(*entries: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"matchExpressions": list(entries)}]


CASES = [
    Case(
        "node affinity with an unknown operator",
        b(scenario().job("j", nodeAffinity=_term({"key": "gpu", "operator": "Equals", "values": ["a"]}))),
        (
            "job 'j': nodeAffinity[0].matchExpressions[0]: operator 'Equals' is unknown",
            "use one of In, NotIn",
        ),
    ),
    Case(
        "node affinity Gt with a non-integer",
        b(scenario().job("j", pending(nodeAffinity=_term({"key": "c", "operator": "Gt", "values": ["x"]})))),
        ("job 'j': tasks[0]: nodeAffinity[0].matchExpressions[0]", "'x' is not one; write e.g. '4'"),
    ),
    Case(
        "node affinity of a task count, with a typo",
        b(scenario().job("j", tasks={"count": 2, "nodeAffinity": [{"matchExpression": []}]})),
        (
            "job 'j': tasks: nodeAffinity[0]: unknown key 'matchExpression'",
            "matchExpressions and matchFields",
        ),
    ),
    Case(
        "node affinity that is not a list of terms",
        b(scenario().job("j", nodeAffinity={"key": "gpu"})),
        ("job 'j': nodeAffinity",),
    ),
    Case(
        "node affinity with no terms",
        b(scenario().job("j", nodeAffinity=[])),
        ("job 'j': nodeAffinity: expected a non-empty list of terms",),
    ),
    Case(
        "a node field other than the name",
        b(
            scenario().job(
                "j", nodeAffinity=[{"matchFields": [{"key": "spec.x", "operator": "In", "values": ["a"]}]}]
            )
        ),
        ("matchFields[0]: matchFields key 'spec.x'", "use metadata.name"),
    ),
    Case("not a map", lambda: ["nodes"], ("a scenario is a YAML map",)),
    Case("missing nodes", without("nodes"), ("nodes: this key is required; add it",)),
    Case("missing jobs", without("jobs"), ("jobs: this key is required",)),
    Case(
        "job without tasks",
        lambda: {**scenario().build(), "jobs": [{"name": "j"}]},
        ("job 'j': tasks: this key is required",),
    ),
    Case(
        "job with an empty task list",
        b(scenario().job("j", tasks=[])),
        ("job 'j': tasks", "a job needs at least one task"),
    ),
    Case(
        "unknown top-level key",
        b(scenario().job("j").set("expected", {})),
        ("unknown key 'expected'", "did you mean 'expect'"),
    ),
    Case(
        "unknown node key",
        b(scenario().node("n1", gpu=2).job("j")),
        ("node 'n1'", "unknown key 'gpu'", "did you mean 'gpus'"),
    ),
    Case(
        "unknown job key",
        b(scenario().job("j", minMembers=1)),
        ("job 'j'", "unknown key 'minMembers'", "did you mean 'minMember'"),
    ),
    Case(
        "unknown task key",
        b(scenario().job("j", {"state": "Pending", "gpugroup": "g0"})),
        ("job 'j': tasks[0]", "unknown key 'gpugroup'", "did you mean 'gpuGroup'"),
    ),
    Case(
        "unknown key in the count shorthand",
        b(scenario().job("j", tasks={"count": 2, "status": "Pending"})),
        ("job 'j': tasks", "unknown key 'status'", "did you mean 'state'"),
    ),
    Case(
        "unknown expectation key",
        b(scenario().job("j").expect("j", state="Running")),
        ("expectation for job 'j'", "unknown key 'state'", "did you mean 'status'"),
    ),
    Case(
        "unknown config key",
        b(scenario().job("j").set("config", {"gracePeriod": 1})),
        ("config", "unknown key 'gracePeriod'"),
    ),
    Case(
        "bad node quantity",
        b(scenario().node("n1", memory="10 gigs").job("j")),
        ("node 'n1': memory", "'10 gigs' is not a quantity", "e.g. 500m or 16Gi"),
    ),
    Case(
        "bad job quantity",
        b(scenario().job("j", cpu="two")),
        ("job 'j': cpu", "'two' is not a quantity"),
    ),
    Case(
        "bad task quantity",
        b(scenario().job("j", pending(memory="1Gb"))),
        ("job 'j': tasks[0].memory", "'1Gb' is not a quantity"),
    ),
    Case(
        "bad duration",
        b(scenario().job("j", running("node0", since="yesterday"))),
        ("job 'j': tasks[0].since", "'yesterday' is not a duration"),
    ),
    Case(
        "bad task state",
        b(scenario().job("j", {"state": "Binding"})),
        ("job 'j': tasks[0].state", "'Pending', 'Running', 'Releasing', 'Succeeded'"),
    ),
    Case(
        "unknown reason code",
        b(scenario().job("j").expect("j", reason="busy")),
        ("expectation for job 'j': reason", "'busy' is not a reason code", "preemption-delay"),
    ),
    Case(
        "negative preemption delay",
        b(scenario().job("j").set("config", {"preemptionDelay": "-1m"})),
        ("preemptionDelay", "-60s is negative; use 0 (no wait for new nodes)"),
    ),
    Case(
        "cluster can grow is not a bool",
        b(scenario().job("j").set("clusterCanGrow", "maybe")),
        ("clusterCanGrow",),
    ),
    Case(
        "bad expected status",
        b(scenario().job("j").expect("j", status="Done")),
        ("expectation for job 'j': status", "'Pipelined'"),
    ),
    Case("rounds 0", b(scenario().job("j").set("rounds", 0)), ("rounds", "greater than or equal")),
    Case(
        "rounds over the bound",
        b(scenario().job("j").set("rounds", MAX_ROUNDS + 1)),
        ("rounds: 1001 is more than 1000, the most cycles a scenario may run", "lower rounds"),
    ),
    Case(
        "a count over the bound",
        b(scenario().job("j", tasks={"count": MAX_TASKS + 1})),
        ("job 'j': tasks.count: 100001 is more than 100000", "lower count"),
    ),
    Case(
        "more tasks in the file than the bound",
        b(scenario().job("a", tasks={"count": 60_000}).job("b", tasks={"count": 60_000})),
        ("jobs: the jobs have 120000 tasks in all, more than 100000", "split the file"),
    ),
    Case(
        "a node with more GPUs than the bound",
        b(scenario().node("big", gpus=MAX_GPUS_PER_NODE + 1).job("j")),
        ("node 'big': gpus: 1025 is more than 1024", "model a larger machine as several nodes"),
    ),
    Case("an endless clock", b(scenario().job("j").set("now", float("inf"))), ("now", "finite number")),
    Case(
        "a time that is not a number",
        b(scenario().job("j", running("node0", since=float("nan")))),
        ("job 'j': tasks[0].since", "finite number"),
    ),
    Case("an endless request", b(scenario().job("j", cpu=float("inf"))), ("job 'j': cpu", "finite number")),
    Case(
        "unknown action",
        b(scenario().job("j").set("actions", ["allocate", "backfill"])),
        ("actions", "'backfill' is not an action", "allocate, consolidation"),
    ),
    Case(
        "queue with unknown parent",
        b(scenario().queue("team", "dept").job("j", queue="team")),
        ("queue 'team'", "parent 'dept' does not exist", "define that queue"),
    ),
    Case(
        "queue cycle",
        b(scenario().queue("a", "b").queue("b", "a").job("j", queue="a")),
        ("queue 'a'", "makes a cycle"),
    ),
    Case(
        "limit below quota",
        b(two_level(resources={"gpu": {"quota": 4, "limit": 2}}).job("j", queue="team")),
        ("queue 'team': resources.gpu.limit 2 is below its quota 4", "raise the limit"),
    ),
    Case(
        "negative quota",
        b(two_level(resources={"memory": {"quota": -5}}).job("j", queue="team")),
        ("queue 'team': resources.memory.quota is -5", "-1 for the whole cluster"),
    ),
    Case(
        "job in an unknown queue",
        b(two_level().job("j", queue="teem")),
        ("job 'j': queue", "queue 'teem' does not exist", "leaf queues (team)"),
    ),
    Case(
        "job in the default queue that the file does not define",
        b(two_level().job("j")),
        ("job 'j': queue", "queue 'default' does not exist", "(team)"),
    ),
    Case(
        "job in a non-leaf queue",
        b(two_level().job("j", queue="dept")),
        ("job 'j': queue", "queue 'dept' has child queues (team)", "only leaf queues hold jobs"),
    ),
    Case(
        "unknown priority class",
        b(scenario().job("j", priority="batch")),
        ("job 'j': priority", "'batch' does not exist", "build, build-preemptible, inference"),
    ),
    Case(
        "unknown topology",
        b(scenario().job("j", topology={"name": "dc", "required": "rack"})),
        ("job 'j': topology.name", "topology 'dc' does not exist", "define it under topologies"),
    ),
    Case(
        "topology level not in the topology",
        b(
            scenario()
            .set("topologies", {"dc": {"levels": ["rack"]}})
            .job("j", topology={"name": "dc", "required": "zone"})
        ),
        ("job 'j': topology.required", "'zone' is not a level of topology 'dc'", "rack"),
    ),
    Case(
        "task on an unknown node",
        b(scenario().job("j", running("node9"))),
        ("job 'j': tasks[0].node", "node 'node9' does not exist", "(node0)"),
    ),
    Case(
        "running task without a node",
        b(scenario().job("j", {"state": "Running"})),
        ("job 'j': tasks[0].node", "a Running task needs node:"),
    ),
    Case(
        "pending task with a node",
        b(scenario().job("j", pending(node="node0"))),
        ("job 'j': tasks[0].node", "a Pending task is on no node", "remove node:"),
    ),
    Case(
        "gpuGroup without a node",
        b(scenario().job("j", {"state": "Succeeded", "gpuGroup": "g0"})),
        ("job 'j': tasks[0].gpuGroup", "remove gpuGroup:"),
    ),
    Case(
        "more gpuGroups than devices",
        b(
            ScenarioBuilder()
            .node("n", gpus=1)
            .job("a", running("n", gpuGroup="g0"), gpu=0.5)
            .job("b", running("n", gpuGroup="g1"), gpu=0.5)
        ),
        ("job 'b': tasks[0].gpuGroup", "node 'n', which has 1 GPU,", "all named already (g0)"),
    ),
    Case(
        "gpu and gpuMemory",
        b(scenario().job("j", gpu=0.5, gpuMemory="10Gi")),
        ("job 'j'", "gives both gpu and gpuMemory"),
    ),
    Case(
        "gpu and gpuMemory on a task",
        b(scenario().job("j", pending(gpu=0.5, gpuMemory="10Gi"))),
        ("job 'j': tasks[0]", "gives both gpu and gpuMemory"),
    ),
    Case(
        "gpu that is neither whole nor a fraction",
        b(scenario().job("j", gpu=1.5)),
        ("job 'j': gpu", "1.5 is neither whole devices nor a fraction"),
    ),
    Case(
        "negative gpu",
        b(scenario().job("j", gpu=-1)),
        ("job 'j': gpu", "greater than or equal to 0"),
    ),
    Case(
        "minMember 0",
        b(scenario().job("j", minMember=0)),
        ("job 'j': minMember", "greater than or equal to 1"),
    ),
    Case(
        "a task without its subgroup",
        b(scenario().job("j", pending(subGroup="a"), pending(), subGroups=[{"name": "a", "minMember": 1}])),
        ("job 'j': tasks[1].subGroup", "names no subgroup", "one of a"),
    ),
    Case(
        "a task naming a subgroup its job does not list",
        b(scenario().job("j", pending(subGroup="b"), subGroups=[{"name": "a", "minMember": 1}])),
        ("job 'j': tasks[0].subGroup", "subgroup 'b' is not one of the job's", "one of a"),
    ),
    Case(
        "a subgroup on a job without subgroups",
        b(scenario().job("j", pending(subGroup="a"))),
        ("job 'j': tasks[0].subGroup", "lists no subGroups", "add subGroups:"),
    ),
    Case(
        "a subgroup listed twice",
        b(scenario().job("j", pending(subGroup="a"), subGroups=[{"name": "a", "minMember": 1}] * 2)),
        ("job 'j': subGroups[1]", "'a' is listed twice"),
    ),
    Case(
        "minMember that is not the subgroups' sum",
        b(scenario().job("j", pending(subGroup="a"), minMember=2, subGroups=[{"name": "a", "minMember": 1}])),
        ("job 'j': minMember", "not the sum of the subGroups' minMember (1)"),
    ),
    Case(
        "duplicate job",
        b(scenario().job("j").job("j")),
        ("job 'j'", "used by two jobs", "rename one"),
    ),
    Case(
        "expectation for an unknown job",
        b(scenario().job("j").expect("k", status="Running")),
        ("expect.k", "there is no job 'k'", "(j)"),
    ),
    Case(
        "task expectations that do not match the tasks",
        b(scenario().job("j", pending(), pending()).expect("j", tasks=[{"status": "Pending"}])),
        ("expect.j.tasks", "lists 1 task expectation but the job has 2 tasks", "one per task"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_scenario(case: Case) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_scenario(case.data(), path="bad.yaml")
    message = str(caught.value)
    assert message.startswith("bad.yaml: "), message
    assert caught.value.path == "bad.yaml"
    for fragment in case.fragments:
        assert fragment in message, message
    assert "\n" not in message


def test_a_valid_scenario_is_not_refused() -> None:
    parse_scenario(scenario().job("j").build(), path="ok.yaml")


def test_the_bounds_themselves_are_accepted() -> None:
    data = (
        scenario()
        .node("big", gpus=MAX_GPUS_PER_NODE)
        .job("a", tasks={"count": MAX_TASKS // 2})
        .job("b", tasks={"count": MAX_TASKS // 2})
        .set("rounds", MAX_ROUNDS)
        .build()
    )
    loaded = parse_scenario(data, path="big.yaml")
    assert loaded.rounds == MAX_ROUNDS
    assert sum(len(j.tasks) for j in loaded.snapshot.jobs) == MAX_TASKS
