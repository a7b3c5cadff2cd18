"""Queue access on the dashboard, against the real server and a real controller on
in-memory ports: each queue's rule (its own and the one in effect along its path) in
`GET /api/v1/queues` and in the Queues page's Tenants and Ceiling columns (headless
Chromium); the refusals counted once per workload in `GET /metrics`."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kai_ray.control import SubmitError
from kai_ray.core import QueueAccess, QueueInfo
from kai_ray.dashboard import Access, DashboardServer, Feed, ServerThread, board_from_controller

from ..browser import browser, open_page, shot  # noqa: F401
from ..control.harness import Harness, make, spec
from .served import api

pytestmark = pytest.mark.timeout(120)

ORG_RULE = QueueAccess(tenants=("prod", "research"), max_priority=100, max_priority_class="build")
TEAM_RULE = QueueAccess(priority_classes=(("train", 50), ("build", 100)))


def _queues(ruled: bool) -> list[QueueInfo]:
    return [
        QueueInfo("org", access=ORG_RULE if ruled else None),
        QueueInfo("team", parent="org", quota=(-1, -1, -1), access=TEAM_RULE if ruled else None),
        QueueInfo("open", quota=(-1, -1, -1)),
    ]


def _ruled_board() -> tuple[Harness, Feed]:
    """`dev` and `hot` queued in team before the rules: then they wait, refused (dev's
    tenant, hot's priority); `ok` is admitted; `door` is refused at the submission."""
    h = make(nodes=1, queues=_queues(ruled=False))
    feed = Feed(lambda: board_from_controller(h.controller, h.clock.now()))
    feed.follow(h.controller.loop)
    h.controller.loop.listener = feed  # as every backend's loop tells its feed
    h.submit("dev", queue="team", tenant="dev")
    h.submit("hot", queue="team", tenant="prod", priority=125)
    h.controller.apply_queues(_queues(ruled=True))
    h.submit("ok", queue="team", tenant="prod", priority=50)
    try:
        h.controller.submit("door", spec(queue="team", tenant="outsider"))
    except SubmitError as exc:  # what the Ray actor does with a refusal at the door
        feed.refusals.at_door("team", exc.code)
    for t in range(1, 4):
        h.at(t).step()
    return h, feed


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Harness, ServerThread]]:
    h, feed = _ruled_board()
    with ServerThread(DashboardServer(feed, port=0)) as thread:
        yield h, thread


def test_each_queue_shows_its_own_rule_and_the_one_in_effect(server: tuple[Harness, ServerThread]) -> None:
    _, thread = server
    rows = {q["name"]: q for q in api(thread.url + "api/v1/queues")["items"]}
    org, team, open_ = rows["org"]["access"], rows["team"]["access"], rows["open"]["access"]
    assert org["own"]["tenants"] == ["prod", "research"] and org["own"]["max_priority_class"] == "build"
    assert team["own"]["priority_classes"] == [
        {"name": "train", "value": 50},
        {"name": "build", "value": 100},
    ]
    assert team["effective"]["tenants"] == "tenants prod, research (rule of org)"
    # The ceiling is 100 by org's maxPriority and by team's highest class: the nearest says it.
    assert (team["effective"]["max_priority"], team["effective"]["max_priority_from"]) == (100, "team")
    assert rows["org"]["access"]["effective"]["max_priority_from"] == "org"
    assert open_ == {"own": None, "effective": open_["effective"]} and open_["effective"]["open"] is True
    # Workloads refused now: the leaf's own, summed up the tree like waiting and running.
    assert (rows["team"]["refused"], rows["org"]["refused"], rows["open"]["refused"]) == (2, 2, 0)
    assert api(thread.url + "api/v1/queues/team")["access"] == team


def test_refusals_are_counted_once_per_workload_by_queue_and_rule(
    server: tuple[Harness, ServerThread],
) -> None:
    h, thread = server
    with urllib.request.urlopen(thread.url + "metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    assert "# TYPE kai_ray_queue_access_refusals_total counter" in text
    # dev and door (tenant), hot (priority): three cycles, each waiting one counted once.
    assert 'kai_ray_queue_access_refusals_total{queue="team",rule="queue-tenant"} 2' in text
    assert 'kai_ray_queue_access_refusals_total{queue="team",rule="priority-ceiling"} 1' in text
    assert h.w("ok").state.value in ("Admitting", "Running")


def test_a_workload_let_go_and_refused_again_counts_again() -> None:
    h, feed = _ruled_board()
    before = dict(feed.refusals.counts)
    h.controller.apply_queues(_queues(ruled=False))  # the rules lifted: dev and hot wait for room
    h.at(4).step()
    assert h.w("dev").reason_code not in ("queue-tenant", "priority-ceiling")
    h.controller.cancel("ok")
    h.controller.apply_queues(_queues(ruled=True))  # back before they got the room
    h.at(5).step().at(6).step()
    assert h.w("dev").reason_code == "queue-tenant" and h.w("hot").reason_code == "priority-ceiling"
    for rule in ("queue-tenant", "priority-ceiling"):  # dev and hot, once more each
        assert feed.refusals.counts[("team", rule)] == before[("team", rule)] + 1


def test_metrics_need_the_token_as_the_api_does() -> None:
    _, feed = _ruled_board()
    with ServerThread(DashboardServer(feed, Access(token="s3cret", required=True), port=0)) as thread:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(thread.url + "metrics", timeout=10)
        assert refused.value.code == 401
        req = urllib.request.Request(thread.url + "metrics", headers={"Authorization": "Bearer s3cret"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert b"kai_ray_queue_access_refusals_total{" in r.read()


def test_the_queue_table_shows_tenants_and_ceiling(
    server: tuple[Harness, ServerThread],
    browser: Any,  # noqa: F811
) -> None:
    _, thread = server
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    open_page(page, thread.url, "queues")
    headers = page.locator("#queues thead th").all_inner_texts()
    assert headers[-2:] == ["Tenants", "Ceiling"], headers
    assert page.inner_text("tr[data-queue='org'] td.tenants") == "tenants prod, research 2 refused"
    team = page.inner_text("tr[data-queue='team'] td.tenants")
    assert team.startswith("tenants prod, research from org") and "2 refused" in team, team
    ceiling = page.inner_text("tr[data-queue='team'] td.ceiling")
    assert ceiling == "≤ 100 (build)\nclasses train, build", ceiling
    assert page.inner_text("tr[data-queue='org'] td.ceiling") == "≤ 100 (build)"
    assert page.get_attribute("tr[data-queue='team'] td.ceiling", "title") == (
        "its rule: priorityClasses: train, build"
    )
    assert page.inner_text("tr[data-queue='open'] td.tenants") == "any"
    assert page.inner_text("tr[data-queue='open'] td.ceiling") == "–"
    shot(page, "queues-access")
    page.close()
