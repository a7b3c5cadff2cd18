"""A queue's `access` block (docs/tenants.md) in every kai-ray queue shape, stored and read
back, and each bad value refused naming the queue, the field and the fix."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from kai_ray.config import ConfigError, parse_queues
from kai_ray.config.priority import PriorityClasses, PriorityClassSpec
from kai_ray.config.queues import parse_queue_object
from kai_ray.control.queues import queue_from_json
from kai_ray.core import NodeRequirement, QueueAccess, TenantSelector

from .test_queues import kai, one, own

RULE = {
    "tenants": ["team-a", "team-a"],  # a name twice is kept once
    "tenantSelector": {
        "matchLabels": {"tier": "gold"},
        "matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}],
    },
    "maxPriority": "build",
}
WANT = QueueAccess(
    tenants=("team-a",),
    tenant_selector=TenantSelector((("tier", "gold"),), (NodeRequirement("team", "NotIn", ("x",)),)),
    max_priority=100,
    max_priority_class="build",
)


@pytest.mark.parametrize(
    "document",
    [
        [{"name": "q", "access": RULE}],
        own("q", access=RULE),
        {**kai("q", access=RULE), "apiVersion": "kai-ray.io/v2"},
    ],
    ids=["plain-list", "kai-ray.io/v1", "kai-ray.io/v2"],
)
def test_each_kai_ray_shape_reads_the_rule(document: Any) -> None:
    assert one([document]).access == WANT


def test_without_a_rule_a_queue_has_none_and_kais_own_queue_takes_no_rule() -> None:
    assert one([kai("q")]).access is None
    with pytest.raises(ConfigError, match="unknown key 'access'"):
        parse_queues([kai("q", access=RULE)])


def test_the_rule_is_stored_and_read_back() -> None:
    queue = dataclasses.replace(
        one([[{"name": "q", "access": {**RULE, "priorityClasses": ["train", "build"]}}]])
    )
    again = queue_from_json(json.loads(json.dumps(dataclasses.asdict(queue))))
    assert (
        again == queue
        and again.access is not None
        and again.access.priority_classes
        == (
            ("train", 50),
            ("build", 100),
        )
    )


def test_a_ceiling_may_be_a_number_or_a_class_of_the_cluster() -> None:
    assert one([[{"name": "q", "access": {"maxPriority": 90}}]]).access == QueueAccess(max_priority=90)
    classes = PriorityClasses({"research": PriorityClassSpec(value=60)})
    doc = {**kai("q", access={"priorityClasses": ["research"]}), "apiVersion": "kai-ray.io/v2"}
    assert parse_queue_object(doc, classes=classes).access == QueueAccess(
        priority_classes=(("research", 60),)
    )


@pytest.mark.parametrize(
    ("access", "field", "words"),
    [
        (
            {"maxPriority": "urgent"},
            "queue 'q': access.maxPriority",
            "priority class 'urgent' does not exist",
        ),
        ({"priorityClasses": ["train", "nope"]}, "queue 'q': access.priorityClasses[1]", "does not exist"),
        ({"priorityClasses": []}, "queue 'q': access.priorityClasses", "would allow no workload"),
        (
            {"tenantSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}},
            "queue 'q': access.tenantSelector.matchExpressions[0]",
            "needs at least one value",
        ),
        (
            {"tenantSelector": {"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["1"]}]}},
            "operator",
            "'In', 'NotIn', 'Exists' or 'DoesNotExist'",
        ),
        ({"tenants": [""]}, "tenants", "at least 1 character"),
        ({"tenant": ["a"]}, "access", "did you mean 'tenants'?"),
    ],
)
def test_bad_input_names_the_queue_the_field_and_the_fix(
    access: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_queues([[{"name": "q", "access": access}]])
    assert field in str(caught.value) and words in str(caught.value), caught.value


@pytest.mark.parametrize(
    ("child", "words"),
    [
        (
            {"tenants": ["team-a", "team-c"]},
            "access.tenants names 'team-c', which its parent 'p' does not admit",
        ),
        ({"maxPriority": "inference"}, "access.maxPriority 125 is over its parent 'p''s ceiling of 100"),
        ({"priorityClasses": ["inference"]}, "access.priorityClasses names 'inference' (125)"),
    ],
)
def test_a_child_wider_than_its_parent_is_refused(child: dict[str, Any], words: str) -> None:
    parent = {"name": "p", "access": {"tenants": ["team-a", "team-b"], "maxPriority": "build"}}
    with pytest.raises(ConfigError) as caught:
        parse_queues([[parent, {"name": "c", "parentQueue": "p", "access": child}]])
    said = str(caught.value)
    assert "queue 'c'" in said and words in said and "a child queue may only narrow" in said, said


def test_a_child_within_its_parent_is_read() -> None:
    parent = {"name": "p", "access": {"tenants": ["team-a", "team-b"], "maxPriority": "build"}}
    child = {"name": "c", "parentQueue": "p", "access": {"tenants": ["team-a"], "maxPriority": "train"}}
    queues = parse_queues([[parent, child]])
    assert [q.access.max_priority for q in queues if q.access] == [100, 50]
