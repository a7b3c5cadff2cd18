"""The forecast start of waiting work on the Workloads page, in headless Chromium against
the real server and a real controller on in-memory ports: the Starts column (a short time
from now, or "unknown"), its title (the forecast's sentence, which says why when unknown),
and the detail panel's "Estimated start:" line."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest

from kai_ray.control.runtime import format_duration
from kai_ray.core import QueueInfo
from kai_ray.dashboard import ServerThread

from ..browser import browser, open_page, shot  # noqa: F401
from ..control.harness import make
from .served import api, served, show_detail

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    """Two nodes of 4 GPUs, both held: `busy` declares 1h30m of run time, `mystery` none.
    `next` waits for busy's node (its start is known); `stuck` needs both nodes at once,
    so it waits on mystery too (its start cannot be forecast)."""
    h = make(nodes=2, queues=[QueueInfo("a", quota=(-1, -1, -1)), QueueInfo("b", quota=(-1, -1, -1))])
    h.submit("busy", queue="a", expected_runtime=5400)
    h.submit("mystery", queue="b")
    h.at(0).step().step()  # both admitted, then running
    h.submit("next", queue="a")
    h.submit("stuck", queue="b", workers=2, strategy="STRICT_SPREAD")
    h.at(0).step()  # the clock stays at 0: busy ends in exactly 1h30m
    h.controller.forecaster.made_at = float("-inf")  # forecast what the steps left, not before
    with served(h) as thread:
        yield thread


def test_api_rows_carry_the_eta(server: ServerThread) -> None:
    rows = {w["id"]: w for w in api(server.url + "api/v1/workloads")["items"]}
    assert {wid: w["state"] for wid, w in rows.items()} == {
        "busy": "Running",
        "mystery": "Running",
        "next": "Queued",
        "stuck": "Queued",
    }
    known = rows["next"]["eta"]
    assert (known["at"], known["in_s"]) == (5400.0, 5400.0)
    assert "about 1h30m" in known["text"] and "declared" in known["text"]
    unknown = rows["stuck"]["eta"]
    assert unknown["at"] is None and unknown["in_s"] is None
    assert "no start time can be forecast" in unknown["text"] and "mystery" in unknown["text"]
    assert rows["busy"]["eta"] is None and rows["mystery"]["eta"] is None


def test_sorting_by_start_puts_the_soonest_first_and_the_unknown_last(server: ServerThread) -> None:
    items = api(server.url + "api/v1/workloads?sort=starts")["items"]
    assert [w["id"] for w in items][:2] == ["next", "stuck"]  # then the running, by age


def test_starts_column_shows_the_forecast_with_its_sentence_as_title(
    server: ServerThread,
    browser: Any,  # noqa: F811
) -> None:
    rows = {w["id"]: w for w in api(server.url + "api/v1/workloads")["items"]}
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    open_page(page, server.url, "workloads")
    headers = page.locator("#workloads thead th").all_inner_texts()
    cut = page.locator("#workloads thead th").evaluate_all(
        "ths => ths.filter(th => th.scrollWidth > th.clientWidth).map(th => th.innerText)"
    )
    assert cut == []  # every column's name shows whole ("Preempted" was cut to "Preempte")
    column = headers.index("Starts")
    assert headers[column - 1] == "Waiting"  # beside how long it has waited

    def cell(wid: str) -> Any:
        cells = page.locator(f"tr[data-workload='{wid}'] td")
        assert cells.count() == len(headers), wid  # the row's cells line up with the header
        return cells.nth(column)

    assert cell("next").inner_text() == "~1h30m"
    assert cell("next").get_attribute("title") == rows["next"]["eta"]["text"]
    assert cell("stuck").inner_text() == "unknown"
    assert cell("stuck").get_attribute("title") == rows["stuck"]["eta"]["text"]
    for waiting in ("next", "stuck"):  # the column is wide enough: nothing cut to "~1h3…"
        assert cell(waiting).evaluate("td => td.scrollWidth <= td.clientWidth"), waiting
    for running in ("busy", "mystery"):
        assert cell(running).inner_text() == "" and cell(running).get_attribute("title") is None
    shot(page, "dashboard-workloads-starts")
    page.close()


@pytest.mark.parametrize("wid", ["next", "stuck"])
def test_detail_panel_says_the_estimated_start(
    server: ServerThread,
    browser: Any,  # noqa: F811
    wid: str,
) -> None:
    text = api(server.url + f"api/v1/workloads/{wid}")["eta"]["text"]
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    open_page(page, server.url, "workloads")
    show_detail(page, wid)
    page.wait_for_selector("#detail:not([hidden]) #detail-eta")
    assert page.inner_text("#detail-eta") == f"Estimated start: {text}"
    shot(page, f"dashboard-detail-eta-{wid}")
    page.close()


def test_detail_panel_of_running_work_has_no_estimated_start(
    server: ServerThread,
    browser: Any,  # noqa: F811
) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    open_page(page, server.url, "workloads")
    show_detail(page, "busy")
    assert page.inner_text("#detail h3") == "busy"
    assert page.locator("#detail-eta").count() == 0 and "Estimated start" not in page.inner_text("#detail")
    page.close()


def test_short_times_read_as_the_sentences_do(browser: Any) -> None:  # noqa: F811
    """The Starts cell's "~1h30m" and the title's "about 1h30m" come from two formatters
    (the page's `span`, the scheduler's format_duration): they must agree."""
    app = resources.files("kai_ray.dashboard").joinpath("static", "app.js").read_text()
    start = app.index("  function span(s) {")
    source = app[start : app.index("\n  }\n", start) + 4]
    seconds = [0, 45, 1500, 1505, 3599, 5390, 7198, 86400, 172800, 183600, 190000]
    page = browser.new_page()
    shown = page.evaluate(f"(all) => {{ {source}; return all.map(span); }}", seconds)
    page.close()
    assert shown == [format_duration(s) for s in seconds]
