"""The pages at the size the issue names, in headless Chromium: 1,000 queues, 10,000
workloads, 10,000 GPUs, from a real controller's cycle (kai-ray bench dashboard times the
same pages; this checks that each shows all of it)."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.bench.dashboard import big_controller
from kai_ray.dashboard import Access, DashboardServer, Feed, ServerThread, board_from_controller

from ..browser import browser, open_page, shot  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_every_page_shows_a_thousand_queues_and_ten_thousand_workloads(browser: Any) -> None:  # noqa: F811
    ctl = big_controller(queues=1000, workloads=10_000, nodes=1250)
    feed = Feed(lambda: board_from_controller(ctl, ctl.clock.now()))
    feed.cycled(ctl.clock.now(), ctl.queue_status, changed=True)
    board = feed.board()
    waiting = sum(1 for w in board.workloads if w["state"] == "Queued")
    with ServerThread(DashboardServer(feed, Access(), port=0)) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        open_page(page, server.url, "queues")
        assert page.locator("#queues tbody tr").count() == 1000
        over = sum(1 for q in board.queues if q["standing"] == "over")
        assert page.locator("#queues tr[data-standing='over']").count() == over > 0
        shot(page, "big-queues")
        open_page(page, server.url, "workloads")
        assert page.inner_text("#wl-count") == "10000 workloads"
        assert page.locator("#workloads tbody tr").count() == 200
        first = page.locator("#workloads tbody tr").first
        assert first.get_attribute("data-state") == "Queued" and first.get_attribute("data-position") == "1"
        page.select_option("#wl-state", "Queued")
        page.wait_for_function(f"document.querySelector('#wl-count').textContent === '{waiting} workloads'")
        open_page(page, server.url, "nodes")
        assert page.locator(".node").count() == 1250 and page.locator(".gpu").count() == 10_000
        assert page.locator(".group").count() == len({tuple(n["domain"]) for n in board.nodes})
        open_page(page, server.url, "timeline")
        assert page.locator("polygon").count() >= 1
        page.close()
