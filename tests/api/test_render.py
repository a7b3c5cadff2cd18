"""`kai-ray explain` on Ray (kai_ray.api.render.explain_text): a workload its queue's
access rule refuses is explained with the rule named, from what the scheduler actor's
`explain` answers (its view, its queue's row, and views.refusal_of), built here over a
real controller on in-memory ports."""

from __future__ import annotations

from typing import Any

from kai_ray.api.render import explain_text
from kai_ray.control.views import queue_views, refusal_of
from kai_ray.core import QueueAccess, QueueInfo

from ..control.harness import Harness, make

ORG = QueueInfo("org", access=QueueAccess(tenants=("prod",), max_priority=100, max_priority_class="build"))
TEAM = QueueInfo("team", parent="org", quota=(-1, -1, -1))


def _explained(h: Harness, wid: str) -> dict[str, Any]:
    """What SchedulerActor.explain answers (kai_ray/ray/actor.py), without Ray."""
    c = h.controller
    info = c.info(wid)
    rows = {q["name"]: q for q in queue_views(c.queues, c.queue_status, c.workloads.values())}
    info["queue_status"] = rows.get(info["queue"])
    info["access_rule"] = refusal_of(c.workloads[wid], c.queues, c.config.closed_queues)
    return info


def _ruled_after_submission(access: QueueAccess, **submitted: Any) -> Harness:
    """The workloads queue under open queues, then the rule is applied (a submission the
    rule refuses is refused at the door instead), and a cycle runs."""
    h = make(nodes=1, queues=[QueueInfo("org"), TEAM])
    h.submit("w", queue="team", **submitted)
    h.controller.apply_queues([QueueInfo("org", access=access), TEAM])
    h.at(1).step()
    return h


def test_a_tenant_refused_by_a_parents_rule_is_told_the_rule() -> None:
    h = _ruled_after_submission(QueueAccess(tenants=("prod",)), tenant="dev")
    text = explain_text(_explained(h, "w"))
    assert "state Queued: queue 'team''s parent 'org' admits tenant prod, not tenant 'dev'" in text
    assert (
        "  stopped by the access rule (queue-tenant): access.tenants of queue 'org' "
        "(a parent of 'team': its rule holds below it)\n"
        "    it allows tenant prod\n"
        "    fix: submit to a queue that admits tenant 'dev', "
        "or an admin adds it to access.tenants of queue 'org'"
    ) in text


def test_a_priority_over_the_ceiling_is_told_max_priority() -> None:
    h = _ruled_after_submission(ORG.access or QueueAccess(), tenant="prod", priority=125)
    text = explain_text(_explained(h, "w"))
    assert "access.maxPriority of queue 'org' (a parent of 'team'" in text
    assert "it allows priorities up to 100 (build)" in text
    assert "fix: use a priority class of at most 100" in text


def test_running_work_a_new_rule_refuses_is_told_it_keeps_running() -> None:
    h = make(nodes=1, queues=[QueueInfo("org"), TEAM])
    h.submit("w", queue="team", tenant="dev")
    h.at(1).step().at(2).step()
    h.controller.apply_queues([ORG, TEAM])
    h.at(3).step()
    info = _explained(h, "w")
    assert info["state"] == "Running"
    assert "runs, but its queue no longer admits it: the access rule (queue-tenant)" in explain_text(info)


def test_a_workload_its_queue_takes_says_nothing_of_access() -> None:
    h = _ruled_after_submission(QueueAccess(tenants=("prod",)), tenant="prod")
    info = _explained(h, "w")
    assert info["access_rule"] is None and "access rule" not in explain_text(info)
    del info["access_rule"]  # a scheduler from before access rules
    assert "access rule" not in explain_text(info)
