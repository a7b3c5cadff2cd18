"""Queue access rules as people read them (kai_ray.control.accessview, views.queue_views,
views.refusal_of): a queue's own rule and the rule in effect along its path, and, for a
workload its queue does not take, the rule that stops it, named, over a real controller."""

from __future__ import annotations

import pytest

from kai_ray.control.accessview import access_views, refused_by, rule_lines
from kai_ray.control.views import queue_views, refusal_of
from kai_ray.core import NodeRequirement, QueueAccess, QueueInfo, SchedulerConfig, TenantSelector

from .harness import make

ORG = QueueInfo(
    "org", access=QueueAccess(tenants=("prod", "research"), max_priority=100, max_priority_class="build")
)
TEAM = QueueInfo(
    "team",
    parent="org",
    quota=(-1, -1, -1),
    access=QueueAccess(
        tenant_selector=TenantSelector((("tier", "gold"),), (NodeRequirement("zone", "In", ("a", "b")),)),
        priority_classes=(("train", 50), ("build", 100), ("inference", 125)),
    ),
)
OPEN = QueueInfo("open", quota=(-1, -1, -1))
QUEUES = [ORG, TEAM, OPEN]


def test_a_queue_shows_its_own_rule_as_written() -> None:
    views = access_views(QUEUES, closed=False)
    assert views["org"]["own"] == {
        "tenants": ["prod", "research"],
        "tenant_selector": None,
        "max_priority": 100,
        "max_priority_class": "build",
        "priority_classes": None,
    }
    assert views["team"]["own"]["tenant_selector"] == "tier=gold, zone In [a, b]"
    assert views["open"]["own"] is None


def test_the_rule_in_effect_narrows_along_the_path() -> None:
    team = access_views(QUEUES, closed=False)["team"]["effective"]
    # Both rules hold: the child's selector and the parent's names (its own first).
    assert team["tenants"] == (
        "tenants labelled tier=gold, zone In [a, b] and tenants prod, research (rule of org)"
    )
    assert [r["queue"] for r in team["tenant_rules"]] == ["team", "org"]
    assert (team["open"], team["closed_by_default"]) == (False, False)
    # The parent's ceiling holds below it; the child's classes lose inference (125 > 100).
    assert (team["max_priority"], team["max_priority_class"], team["max_priority_from"]) == (
        100,
        "build",
        "org",
    )
    assert team["priority_classes"] == [{"name": "train", "value": 50}, {"name": "build", "value": 100}]
    assert team["priority_classes_from"] == "team"


@pytest.mark.parametrize(
    ("closed", "words", "is_open"), [(False, "every tenant", True), (True, "no tenant", False)]
)
def test_a_queue_without_rules_is_open_unless_closed_by_default(
    closed: bool, words: str, is_open: bool
) -> None:
    effective = access_views(QUEUES, closed)["open"]["effective"]
    assert effective["tenants"].startswith(words)
    assert (effective["open"], effective["closed_by_default"]) == (is_open, closed)
    assert effective["max_priority"] is None and effective["priority_classes"] is None


def test_a_ceiling_set_only_by_classes_is_their_highest() -> None:
    queues = [QueueInfo("q", access=QueueAccess(priority_classes=(("train", 50), ("build", 100))))]
    effective = access_views(queues, False)["q"]["effective"]
    assert (effective["max_priority"], effective["max_priority_class"]) == (100, "build")


@pytest.mark.parametrize(
    ("tenant", "labels", "priority", "rule_queue", "field", "allows"),
    [
        ("dev", {"tier": "gold", "zone": "a"}, 50, "org", "access.tenants", "tenants prod, research"),
        ("prod", {"tier": "silver"}, 50, "team", "access.tenantSelector", "tenants labelled tier=gold"),
        (
            "prod",
            {"tier": "gold", "zone": "a"},
            125,
            "org",
            "access.maxPriority",
            "priorities up to 100 (build)",
        ),
        (
            "prod",
            {"tier": "gold", "zone": "b"},
            75,
            "team",
            "access.priorityClasses",
            "the priority classes train",
        ),
    ],
)
def test_the_rule_that_stops_a_workload_is_named(
    tenant: str, labels: dict[str, str], priority: int, rule_queue: str, field: str, allows: str
) -> None:
    found = refused_by("team", QUEUES, False, priority=priority, tenant=tenant, labels=labels)
    assert found is not None
    assert (found["rule_queue"], found["field"], found["inherited"]) == (
        rule_queue,
        field,
        rule_queue != "team",
    )
    assert found["allows"].startswith(allows)
    assert found["code"] == ("queue-tenant" if field.startswith("access.tenant") else "priority-ceiling")


def test_a_workload_its_queue_takes_has_no_rule() -> None:
    assert (
        refused_by("team", QUEUES, False, priority=50, tenant="prod", labels={"tier": "gold", "zone": "a"})
        is None
    )
    assert refused_by("team", QUEUES, False, priority=100, tenant=None) is None  # no tenant: trusted
    assert refused_by("open", QUEUES, True, priority=125, tenant=None) is None


def test_explains_lines_name_the_queue_the_field_what_it_allows_and_the_fix() -> None:
    found = refused_by("team", QUEUES, False, priority=50, tenant="dev", labels={"tier": "gold", "zone": "a"})
    assert found is not None
    assert rule_lines(found) == [
        "  stopped by the access rule (queue-tenant): access.tenants of queue 'org' "
        "(a parent of 'team': its rule holds below it)",
        "    it allows tenants prod, research",
        "    fix: submit to a queue that admits tenant 'dev', "
        "or an admin adds it to access.tenants of queue 'org'",
    ]
    closed = refused_by("open", QUEUES, True, priority=50, tenant="dev")
    assert closed is not None and closed["field"] == "closedQueues"
    assert rule_lines(closed, waiting=False)[0] == (
        "  runs, but its queue no longer admits it: the access rule (queue-tenant): "
        "closedQueues (the scheduler's setting)"
    )


def test_queue_views_and_refusal_of_over_a_controller() -> None:
    """A rule applied after a workload queued: it waits with the rule's code, and what
    Ray's explain adds (refusal_of) names the rule; the queue views carry it."""
    h = make(
        nodes=1, queues=[QueueInfo("a", quota=(-1, -1, -1))], config=SchedulerConfig(closed_queues=False)
    )
    h.submit("w", priority=125, tenant="dev")
    h.controller.apply_queues([QueueInfo("a", quota=(-1, -1, -1), access=QueueAccess(max_priority=100))])
    h.at(1).step()
    assert h.w("w").reason_code == "priority-ceiling"
    found = refusal_of(h.w("w"), h.controller.queues, closed=False)
    assert found is not None and (found["rule_queue"], found["field"]) == ("a", "access.maxPriority")
    (row,) = queue_views(h.controller.queues, h.controller.queue_status, h.controller.workloads.values())
    assert row["access"]["own"]["max_priority"] == 100
    assert row["access"]["effective"]["max_priority_from"] == "a"
    h.controller.cancel("w")
    assert refusal_of(h.w("w"), h.controller.queues, closed=False) is None  # ended: nothing to explain
