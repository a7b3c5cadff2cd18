"""A reservation on the Workloads page, in headless Chromium against the real server and a
real controller on in-memory ports: the reserving gang's reason names the nodes it holds,
and work kept out of them says for whom (the API's rows, the table, the detail panel)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kai_ray.core import SchedulerConfig
from kai_ray.dashboard import ServerThread

from ..browser import browser, open_page, shot  # noqa: F401
from ..control.harness import make
from .served import api, served, show_detail

pytestmark = pytest.mark.timeout(120)
HELD = "room is reserved for it on 2 nodes (n0, n1) as running work ends"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    """Two nodes of 4 GPUs: `full` holds n0 for 1h, `half` 2 GPUs of n1 for 2h; `big`
    (both nodes) has waited past the 10 minutes, `slow` (no run time) waits behind it."""
    h = make(nodes=2, config=SchedulerConfig(reserve_after_s=600.0))
    h.submit("full", expected_runtime=3600)
    h.submit("half", resources_per_worker={"GPU": 2, "CPU": 1}, expected_runtime=7200)
    h.at(0).step().step()
    h.submit("big", workers=2, strategy="STRICT_SPREAD")
    h.submit("slow", resources_per_worker={"GPU": 1, "CPU": 1})
    h.at(700).step()
    with served(h) as thread:
        yield thread


def test_the_rows_say_who_holds_the_room(server: ServerThread) -> None:
    rows = {w["id"]: w for w in api(server.url + "api/v1/workloads")["items"]}
    assert rows["big"]["state"] == "Queued" and HELD in rows["big"]["reason"]
    assert rows["slow"]["reason_code"] == "reserved"
    assert "reserved for gang big" in rows["slow"]["reason"]


def test_the_table_and_the_detail_panel_show_the_reservation(
    server: ServerThread,
    browser: Any,  # noqa: F811
) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    open_page(page, server.url, "workloads")
    assert HELD in page.inner_text("tr[data-workload='big'] td.reason")
    assert "reserved for gang big" in page.inner_text("tr[data-workload='slow'] td.reason")
    show_detail(page, "big")
    assert HELD in page.inner_text("#detail")
    shot(page, "dashboard-reservation")
    page.close()
