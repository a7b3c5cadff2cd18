"""Queue files: the three shapes, units, defaults, and every way to get them wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.config import ConfigError, load_queues, parse_queues
from kai_ray.core.model.snapshot import UNLIMITED, QueueInfo

GI = 1024.0**3


def one(documents: list[Any]) -> QueueInfo:
    (queue,) = parse_queues(documents)
    return queue


def kai(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def own(name: str, **spec: Any) -> dict[str, Any]:
    return {**kai(name, **spec), "apiVersion": "kai-ray.io/v1"}


# ------------------------------------------------------------------ shapes and units


def test_plain_list_uses_kai_ray_units() -> None:
    queue = one(
        [
            [
                {
                    "name": "team-a",
                    "priority": 120,
                    "resources": {
                        "gpu": {"quota": 4, "limit": 8, "overQuotaWeight": 2},
                        "cpu": {"quota": "500m"},
                        "memory": {"quota": "16Gi", "limit": -1},
                    },
                    "preemptMinRuntime": "5m",
                    "reclaimMinRuntime": 30,
                }
            ]
        ]
    )
    assert queue == QueueInfo(
        name="team-a",
        priority=120,
        quota=(4.0, 0.5, 16 * GI),
        limit=(8.0, UNLIMITED, UNLIMITED),
        over_quota_weight=(2.0, 1.0, 1.0),
        preempt_min_runtime=300.0,
        reclaim_min_runtime=30.0,
    )


def test_a_resource_not_given_has_quota_0_weight_1_and_no_limit() -> None:
    queue = one([[{"name": "q", "resources": {"gpu": {"quota": 2}}}]])
    assert queue.quota == (2.0, 0.0, 0.0)
    assert queue.limit == (UNLIMITED, UNLIMITED, UNLIMITED)
    assert queue.over_quota_weight == (1.0, 1.0, 1.0)
    assert queue.priority == 100
    assert queue.preempt_min_runtime is None  # inherit from the parent


def test_kai_documents_use_millicores_and_megabytes_of_a_million_bytes() -> None:
    queue = one(
        [
            kai(
                "dept",
                resources={
                    "cpu": {"quota": 1500, "limit": 3000},
                    "memory": {"quota": 1000, "limit": -1, "overQuotaWeight": 3},
                    "gpu": {"quota": 0.5},
                },
            )
        ]
    )
    assert queue.quota == (0.5, 1.5, 1000 * 1e6)
    assert queue.limit == (UNLIMITED, 3.0, UNLIMITED)
    assert queue.over_quota_weight == (1.0, 1.0, 3.0)


def test_kai_unlimited_stays_minus_one_in_every_unit() -> None:
    queue = one([kai("q", resources={r: {"quota": -1} for r in ("gpu", "cpu", "memory")})])
    assert queue.quota == (UNLIMITED, UNLIMITED, UNLIMITED)


def test_kai_ray_documents_use_quantities() -> None:
    queue = one([own("q", parentQueue=None, resources={"memory": {"quota": "2Gi"}})])
    assert queue.quota == (0.0, 0.0, 2 * GI)


def test_documents_keep_file_order_and_parents() -> None:
    queues = parse_queues([kai("dept"), kai("team", parentQueue="dept", displayName="Team", priority=150)])
    assert [(q.name, q.parent, q.priority) for q in queues] == [
        ("dept", None, 100),
        ("team", "dept", 150),
    ]


def test_kubectl_list_and_ignored_metadata_and_status() -> None:
    item = kai("q")
    item["metadata"]["labels"] = {"a": "b"}
    item["status"] = {"childQueues": []}
    queues = parse_queues([{"apiVersion": "v1", "kind": "List", "items": [item]}])
    assert [q.name for q in queues] == ["q"]


def test_load_queues_reads_multi_document_files(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(yaml.safe_dump_all([kai("dept"), own("team", parentQueue="dept")]))
    assert [q.name for q in load_queues(path)] == ["dept", "team"]


# ------------------------------------------------------------------ validation

INVALID: list[tuple[str, list[Any], list[str]]] = [
    (
        "unknown parent",
        [[{"name": "team-a", "parentQueue": "dept"}]],
        ["queue 'team-a'", "parent 'dept' does not exist", "define that queue"],
    ),
    (
        "cycle",
        [[{"name": "a", "parentQueue": "b"}, {"name": "b", "parentQueue": "a"}]],
        ["queue 'a'", "cycle", "a -> b -> a", "must end at a queue without a parent"],
    ),
    (
        "limit below quota",
        [[{"name": "team-a", "resources": {"gpu": {"quota": 4, "limit": 2}}}]],
        [
            "queue 'team-a': resources.gpu.limit 2 is below its quota 4; raise the limit "
            "to at least the quota or lower the quota"
        ],
    ),
    (
        "limit below quota shown in the user's memory notation",
        [[{"name": "m", "resources": {"memory": {"quota": "16Gi", "limit": "8Gi"}}}]],
        ["queue 'm': resources.memory.limit 8Gi is below its quota 16Gi"],
    ),
    (
        "limit below quota shown in KAI's units",
        [kai("k", resources={"cpu": {"quota": 2000, "limit": 1000}})],
        ["queue 'k': resources.cpu.limit 1000 is below its quota 2000"],
    ),
    (
        "negative quota",
        [[{"name": "q", "resources": {"cpu": {"quota": -2}}}]],
        ["queue 'q': resources.cpu.quota is -2", "-1 for the whole cluster"],
    ),
    (
        "negative limit",
        [[{"name": "q", "resources": {"gpu": {"limit": -3}}}]],
        ["queue 'q': resources.gpu.limit is -3", "-1 for no limit"],
    ),
    (
        "negative weight",
        [[{"name": "q", "resources": {"gpu": {"overQuotaWeight": -1}}}]],
        ["queue 'q': resources.gpu.overQuotaWeight is -1", "use a value >= 0"],
    ),
    (
        "unknown field",
        [[{"name": "q", "resources": {"gpu": {"qouta": 1}}}]],
        ["queue 'q': resources.gpu", "unknown key 'qouta'", "did you mean 'quota'"],
    ),
    (
        "unknown top-level field of a queue",
        [[{"name": "q", "parent": "x"}]],
        ["queue 'q'", "unknown key 'parent'", "did you mean 'parentQueue'"],
    ),
    (
        "bad quantity",
        [[{"name": "q", "resources": {"memory": {"quota": "16GB"}}}]],
        ["queue 'q': resources.memory.quota", "'16GB' is not a quantity", "e.g. 500m or 16Gi"],
    ),
    (
        "quantity in a KAI document",
        [kai("k", resources={"memory": {"quota": "16Gi"}})],
        ["queue 'k': spec: resources.memory.quota", "millicores", "kai-ray.io/v1"],
    ),
    (
        "unknown field in a KAI spec",
        [kai("k", parent="x")],
        ["queue 'k': spec", "unknown key 'parent'", "parentQueue"],
    ),
    (
        "unsupported apiVersion",
        [{**kai("k"), "apiVersion": "scheduling.run.ai/v1"}],
        ["queue 'k'", "apiVersion 'scheduling.run.ai/v1' is not supported", "use scheduling"],
    ),
    (
        "not a queue",
        [{**kai("k"), "kind": "PodGroup"}],
        ["kind 'PodGroup' is not a queue", "use kind: Queue"],
    ),
    (
        "missing name",
        [[{"priority": 1}]],
        ["queues[0].name", "required"],
    ),
    (
        "duplicate name",
        [[{"name": "q"}, {"name": "q"}]],
        ["queue 'q'", "used twice", "rename one"],
    ),
    (
        "neither list nor documents",
        [{"name": "q"}],
        ["document 1", "expected a list of queues"],
    ),
]


@pytest.mark.parametrize(("documents", "fragments"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_queue_files_name_object_field_and_fix(documents: list[Any], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_queues(documents, path="queues.yaml")
    message = str(caught.value)
    assert message.startswith("queues.yaml: ")
    assert caught.value.path == "queues.yaml"
    for fragment in fragments:
        assert fragment in message
    assert "\n" not in message


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_queues(tmp_path / "nope.yaml")


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text("- name: a\n  resources: {gpu: [\n")
    with pytest.raises(ConfigError, match=r"line \d+, column \d+: not valid YAML"):
        load_queues(path)


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "[]\n", "---\n---\n"])
def test_a_file_without_queues_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"q\.yaml: holds no queues; list at least one") as caught:
        load_queues(path)
    assert "kai-ray queue delete NAME" in str(caught.value)


def test_kai_ray_v2_documents_are_kais_shape_and_units() -> None:
    """kai-ray's Queue CRD on Kubernetes: a KAI Queue with its apiVersion changed."""
    spec = {"priority": 120, "resources": {"cpu": {"quota": 1500}, "memory": {"quota": 2000}}}
    ours = one([{**kai("q", **spec), "apiVersion": "kai-ray.io/v2"}])
    assert ours == one([kai("q", **spec)])
    assert ours.quota[1:] == (1.5, 2000 * 1e6)


# ------------------------------------------------------------------ run-time defaults


def test_a_queue_may_give_its_workloads_default_run_times() -> None:
    q = one([own("team", expectedRuntime="90m", maxRuntime="1d")])
    assert (q.expected_runtime, q.max_runtime) == (5400.0, 86400.0)
    assert one([[{"name": "plain"}]]).max_runtime is None


@pytest.mark.parametrize(("key", "value"), [("maxRuntime", "0"), ("expectedRuntime", "-5m")])
def test_a_run_time_default_at_or_below_zero_is_refused_naming_the_queue(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"queue 'team'.*{key}.*above 0"):
        parse_queues([own("team", **{key: value})])


def test_a_run_time_default_that_is_not_a_duration_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"maxRuntime.*not a duration"):
        parse_queues([own("team", maxRuntime="soon")])
