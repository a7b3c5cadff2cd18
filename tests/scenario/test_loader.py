"""Loading a scenario: what the spec says each key becomes in the core's snapshot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kai_ray.config.errors import ConfigError
from kai_ray.core.model.snapshot import (
    UNLIMITED,
    NodeInfo,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskStatus,
    Topology,
    TopologyConstraint,
)
from kai_ray.scenario.expect import JobExpectation, TaskExpectation
from kai_ray.scenario.loader import load_scenario, parse_scenario
from tests.scenario.builders import ScenarioBuilder, pending, running, scenario

GI = 1024.0**3


def test_node_defaults() -> None:
    loaded = ScenarioBuilder().node("n").job("j").load()
    assert loaded.snapshot.nodes == [
        NodeInfo(name="n", gpus=0, cpu=1000.0, memory=10 * 1024.0**4, gpu_memory=80 * GI)
    ]


def test_node_fields() -> None:
    loaded = (
        ScenarioBuilder()
        .node(
            "n",
            gpus=8,
            cpu="500m",
            memory="512Gi",
            gpuMemory="40Gi",
            labels={"rack": 1},
            unschedulable=True,
        )
        .job("j")
        .load()
    )
    (node,) = loaded.snapshot.nodes
    assert (node.gpus, node.cpu, node.memory, node.gpu_memory) == (8, 0.5, 512 * GI, 40 * GI)
    assert node.labels == {"rack": "1"}
    assert node.unschedulable


def test_default_queue_has_unlimited_quota() -> None:
    loaded = scenario().job("j").load()
    assert loaded.snapshot.queues == [
        QueueInfo(name="default", quota=(UNLIMITED,) * 3, limit=(UNLIMITED,) * 3)
    ]
    assert loaded.snapshot.jobs[0].queue == "default"


def test_queues_use_parent_and_kai_ray_units() -> None:
    loaded = (
        scenario()
        .queue("dept", resources={"gpu": {"quota": 4, "overQuotaWeight": 4}})
        .queue(
            "team",
            "dept",
            priority=120,
            resources={"cpu": {"quota": "1500m"}},
            reclaimMinRuntime="10m",
        )
        .job("j", queue="team")
        .load()
    )
    dept, team = loaded.snapshot.queues
    assert (dept.quota, dept.over_quota_weight) == ((4.0, 0.0, 0.0), (4.0, 1.0, 1.0))
    assert (team.parent, team.priority, team.quota) == ("dept", 120, (0.0, 1.5, 0.0))
    assert team.reclaim_min_runtime == 600.0


def test_top_level_defaults() -> None:
    loaded = scenario().job("j").load(path="some/dir/case.yaml")
    assert (loaded.rounds, loaded.now) == (1, 0.0)
    assert loaded.config == SchedulerConfig()
    assert loaded.expectations == {}
    assert loaded.file == "some/dir/case.yaml"


def test_name_defaults_to_the_file_name() -> None:
    data = scenario().job("j").build()
    del data["name"]
    assert parse_scenario(data, path="dir/case.yaml").name == "case.yaml"


def test_config_actions_and_topologies() -> None:
    loaded = (
        scenario()
        .set("actions", ["allocate", "preempt"])
        .set("config", {"placement": {"gpu": "spread"}, "staleGangGracePeriod": "0s"})
        .set("topologies", {"dc": {"levels": ["zone", "rack"]}})
        .job("j")
        .load()
    )
    assert loaded.config.actions == ("allocate", "preempt")
    assert loaded.config.gpu_placement == "spread"
    assert loaded.config.stale_gang_grace_period == 0.0
    assert loaded.config.topologies == {"dc": Topology("dc", ("zone", "rack"))}


def test_times_are_relative_to_now() -> None:
    loaded = (
        scenario()
        .set("now", "10m")
        .job("j", running("node0", since=-300), pending(), staleSince="-30s")
        .load()
    )
    job = loaded.snapshot.jobs[0]
    assert loaded.now == 600.0
    assert [t.since for t in job.tasks] == [300.0, 600.0]
    assert job.stale_since == 570.0


def test_stale_since_is_left_to_the_core_when_not_given() -> None:
    assert scenario().job("j").load().snapshot.jobs[0].stale_since is None


def test_created_at_defaults_to_position() -> None:
    loaded = scenario().job("a").job("b", createdAt=-5).job("c").load()
    assert [j.created_at for j in loaded.snapshot.jobs] == [0.0, -5.0, 2.0]


def test_task_names_and_count_shorthand() -> None:
    loaded = scenario().job("w", tasks={"count": 3, "state": "Running", "node": "node0"}).load()
    tasks = loaded.snapshot.jobs[0].tasks
    assert [t.name for t in tasks] == ["w-0", "w-1", "w-2"]
    assert {t.status for t in tasks} == {TaskStatus.RUNNING}
    tasks[0].since = 99.0  # tasks are distinct objects, not one shared three times
    assert tasks[1].since == 0.0


def test_requests_from_the_job_with_per_task_overrides() -> None:
    loaded = (
        scenario()
        .job("j", pending(), pending(cpu=4, gpuMemory="20Gi"), gpu=1, cpu="500m", memory="1Gi")
        .load()
    )
    first, second = (t.request for t in loaded.snapshot.jobs[0].tasks)
    assert first == Request(gpu=1.0, cpu=0.5, memory=GI)
    # A task's gpuMemory replaces the job's gpu as a whole.
    assert second == Request(gpu=0.0, gpu_memory=20 * GI, cpu=4.0, memory=GI)


PRIORITIES = [
    ("default is train", {}, (50, True)),
    ("class name", {"priority": "inference"}, (125, False)),
    ("integer", {"priority": 0}, (0, True)),
    ("own preemptible", {"priority": "build", "preemptible": True}, (100, True)),
]


@pytest.mark.parametrize(("fields", "expected"), [p[1:] for p in PRIORITIES], ids=[p[0] for p in PRIORITIES])
def test_priorities(fields: dict[str, object], expected: tuple[int, bool]) -> None:
    job = scenario().job("j", **fields).load().snapshot.jobs[0]
    assert (job.priority, job.preemptible) == expected


def test_custom_priority_classes() -> None:
    loaded = (
        scenario()
        .set("priorityClasses", {"urgent": {"value": 200, "preemptible": True}})
        .job("j", priority="urgent")
        .load()
    )
    job = loaded.snapshot.jobs[0]
    assert (job.priority, job.preemptible) == (200, True)


def test_gang_topology_and_selector() -> None:
    loaded = (
        scenario()
        .set("topologies", {"dc": {"levels": ["rack"]}})
        .job(
            "j",
            pending(),
            pending(),
            minMember=1,
            nodeSelector={"zone": "a"},
            topology={"name": "dc", "required": "rack", "preferred": "kubernetes.io/hostname"},
        )
        .load()
    )
    job = loaded.snapshot.jobs[0]
    assert job.min_member == 1
    assert job.node_selector == {"zone": "a"}
    assert job.topology == TopologyConstraint("dc", "rack", "kubernetes.io/hostname")


def test_min_member_defaults_to_every_task() -> None:
    job = scenario().job("j", pending(), pending()).load().snapshot.jobs[0]
    assert (job.min_member, job.gang_size) == (0, 2)


def test_expectations() -> None:
    loaded = (
        scenario()
        .job("j", pending(), pending())
        .expect("j", status="Binding", node=None, tasks=[{"gpuGroups": ["g0"]}, {}])
        .load()
    )
    assert loaded.expectations == {
        "j": JobExpectation(
            every_task=TaskExpectation(status="Binding", node=None, check_node=True),
            tasks=(TaskExpectation(gpu_groups=("g0",)), TaskExpectation()),
        )
    }


def test_empty_expect_is_no_expectation() -> None:
    assert scenario().job("j").set("expect", None).load().expectations == {}


def test_load_from_a_file(tmp_path: Path) -> None:
    path = scenario().job("j").write(tmp_path)
    assert load_scenario(path).snapshot.jobs[0].name == "j"


def test_usage_history_and_parents_summed_from_their_children() -> None:
    data = scenario().job("j").build()
    data["queues"] = [
        {"name": "dept"},
        {"name": "a", "parent": "dept"},
        {"name": "b", "parent": "dept"},
        {"name": "solo"},
    ]
    data["jobs"][0]["queue"] = "a"
    data["usage"] = {"a": {"gpu": 0.25}, "b": {"gpu": 0.5, "cpu": 0.125}, "solo": {"memory": 1}}
    usage = parse_scenario(data).snapshot.usage
    assert usage == {
        "a": (0.25, 0.0, 0.0),
        "b": (0.5, 0.125, 0.0),
        "solo": (0.0, 0.0, 1.0),
        "dept": (0.75, 0.125, 0.0),
    }
    data["usage"]["dept"] = {"gpu": 0.1}  # given: kept as written
    assert parse_scenario(data).snapshot.usage["dept"] == (0.1, 0.0, 0.0)


@pytest.mark.parametrize(
    ("usage", "config", "message"),
    [
        ({"nope": {"gpu": 0.1}}, {}, "usage.nope: queue 'nope' does not exist; give usage for queues"),
        ({"default": {"gpu": 1.5}}, {}, "usage.default.gpu"),
        (
            {"default": {"gpu": 0.5}},
            {"usageWindow": "1h"},
            "usage: a fixed usage history and config.usageWindow",
        ),
    ],
)
def test_bad_usage_names_the_field_and_the_fix(usage: object, config: object, message: str) -> None:
    data = scenario().job("j").build()
    data["usage"], data["config"] = usage, config
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_scenario(data, path="case.yaml")
