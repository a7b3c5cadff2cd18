"""The dashboard's server over HTTP (no Ray: a controller on in-memory ports): the JSON
API, read-only, access by token, the live stream; the workload query; the timeline; the
Grafana dashboard against the metrics the scheduler exports."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kai_ray.core import QueueInfo
from kai_ray.dashboard import (
    DEFAULT_PORT,
    DashboardAccessError,
    DashboardServer,
    Feed,
    ServerThread,
    Timeline,
    access_for,
    board_from_controller,
)
from kai_ray.dashboard.query import QueryError, select_workloads

from ..control.harness import Harness, make


def get(
    url: str, token: str | None = None, method: str = "GET", cookie: str | None = None
) -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method, data=b"{}" if method not in ("GET", "HEAD") else None)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if cookie:
        req.add_header("Cookie", cookie)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
            return r.status, json.loads(body) if r.headers.get_content_type() == "application/json" else body
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture
def harness() -> Harness:
    h = make(nodes=2, queues=[QueueInfo("a", quota=(-1, -1, -1)), QueueInfo("b", quota=(4, -1, -1))])
    for i in range(3):
        h.submit(f"w{i}", queue="a")
    h.submit("b0", queue="b", workers=2)
    h.at(1).step()
    h.at(2).step()  # the reservations are ready: Running
    return h


@pytest.fixture
def served(harness: Harness) -> Iterator[tuple[Harness, Feed, ServerThread]]:
    feed = Feed(lambda: board_from_controller(harness.controller, harness.clock.now()))
    with ServerThread(DashboardServer(feed, port=0)) as server:
        yield harness, feed, server


def test_api_endpoints(served: tuple[Harness, Feed, ServerThread]) -> None:
    _, _, server = served
    url = server.url
    assert get(url + "api/v1")[1]["endpoints"][0] == "/api/v1/summary"
    status, summary = get(url + "api/v1/summary")
    assert status == 200 and summary["workloads"] == {"Queued": 2, "Running": 2} and summary["gpus"] == 8
    assert [q["name"] for q in get(url + "api/v1/queues")[1]["items"]] == ["a", "b"]
    assert get(url + "api/v1/queues/b")[1]["resources"]["gpu"]["quota"] == 4
    assert get(url + "api/v1/queues/nope") == (
        404,
        {"error": "no queue 'nope'; GET /api/v1/queues lists them"},
    )
    page = get(url + "api/v1/workloads?limit=1&sort=name")[1]
    assert (
        page["total"] == 4
        and [w["id"] for w in page["items"]] == ["b0"]
        and "history" not in page["items"][0]
    )
    assert get(url + "api/v1/workloads/w2")[1]["history"][0]["why"] == "submitted"
    assert get(url + "api/v1/nodes")[1]["items"][0]["gpus"] == 4
    assert get(url + "api/v1/timeline")[1]["step_s"] == 15.0
    status, body = get(url + "api/v1/nothing")
    assert status == 404 and "GET /api/v1 lists them" in body["error"]
    status, page_html = get(url)
    assert status == 200 and b"kai-ray" in page_html


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("path", ["", "api/v1/queues", "api/v1/workloads/w0", "api/v1/anything"])
def test_every_write_is_refused(served: tuple[Harness, Feed, ServerThread], method: str, path: str) -> None:
    h, _, server = served
    before = {wid: w.state for wid, w in h.controller.workloads.items()}
    status, body = get(server.url + path, method=method)
    assert status == 405 and "read-only" in body["error"]
    assert {wid: w.state for wid, w in h.controller.workloads.items()} == before


def test_bad_query_names_the_parameter(served: tuple[Harness, Feed, ServerThread]) -> None:
    url = served[2].url
    for query, word in [
        ("state=Sleeping", "Sleeping"),
        ("sort=size", "size"),
        ("limit=-1", "limit"),
        ("colour=1", "colour"),
    ]:
        status, body = get(url + f"api/v1/workloads?{query}")
        assert status == 400 and word in body["error"], query


def test_live_stream_reports_each_change(served: tuple[Harness, Feed, ServerThread]) -> None:
    h, feed, server = served
    conn = http.client.HTTPConnection("127.0.0.1", server.server.port, timeout=10)
    conn.request("GET", "/api/v1/stream")
    response = conn.getresponse()
    assert response.getheader("Content-Type") == "text/event-stream"
    first = json.loads(response.readline().decode().removeprefix("data: "))
    response.readline()
    h.controller.cancel("w2")
    server.call(feed.touch)
    second = json.loads(response.readline().decode().removeprefix("data: "))
    assert second["revision"] == first["revision"] + 1
    conn.close()


# ---------------------------------------------------------------- access


def test_wide_listen_needs_a_token() -> None:
    with pytest.raises(DashboardAccessError, match=r"0\.0\.0\.0 \(--host\).*--token"):
        access_for("0.0.0.0", None)
    assert not access_for("127.0.0.1", None).required
    assert access_for("0.0.0.0", None, also=lambda t: t == "rays").required  # Ray's token suffices


def test_token_from_header_cookie_or_address(harness: Harness) -> None:
    feed = Feed(lambda: board_from_controller(harness.controller, 0.0))
    access = access_for("0.0.0.0", "s3cret")
    with ServerThread(DashboardServer(feed, access, host="0.0.0.0", port=0)) as server:
        url = f"http://127.0.0.1:{server.server.port}/"
        assert get(url + "api/v1/summary")[0] == 401
        assert get(url + "api/v1/summary", token="guess")[0] == 401
        assert get(url + "api/v1/summary", token="s3cret")[0] == 200
        assert get(url + "api/v1/summary", token=access.internal)[0] == 200
        assert get(url + "api/v1/summary", cookie="kai-ray-dashboard-token=s3cret")[0] == 200
        conn = http.client.HTTPConnection("127.0.0.1", server.server.port, timeout=10)
        conn.request("GET", "/?token=s3cret")
        answer = conn.getresponse()
        assert answer.status == 302 and "kai-ray-dashboard-token=s3cret" in answer.getheader("Set-Cookie")
        conn.close()


def test_busy_default_port_falls_back_and_a_chosen_one_fails(harness: Harness) -> None:
    feed = Feed(lambda: board_from_controller(harness.controller, 0.0))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        thread = ServerThread(DashboardServer(feed, port=port))
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}.*--port"):
            thread.start()
        thread.loop.call_soon_threadsafe(thread.loop.stop)
    try:
        with socket.socket() as default:
            default.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past an earlier test's TIME_WAIT
            default.bind(("127.0.0.1", DEFAULT_PORT))
            default.listen()
            with ServerThread(DashboardServer(feed)) as server:
                assert server.server.port != DEFAULT_PORT and get(server.url + "api/v1/summary")[0] == 200
    except OSError:
        pytest.skip(f"port {DEFAULT_PORT} is in use here already")


# ---------------------------------------------------------------- the workload query


ROWS = [
    {
        "id": f"w{i}",
        "name": f"job {i}",
        "queue": q,
        "state": s,
        "reason": r,
        "position": p,
        "created_at": i,
        "waiting_s": wait,
        "priority": prio,
        "gpus": g,
        "preemptions": 0,
        "history": [],
    }
    for i, (q, s, r, p, wait, prio, g) in enumerate(
        [
            ("a", "Queued", "queue a is at its limit", 2, 30.0, 50, 0),
            ("a", "Queued", "no room", 1, 10.0, 125, 0),
            ("b", "Running", "admitted", None, None, 50, 4),
            ("b", "Succeeded", "done", None, None, 50, 0),
        ]
    )
]


@pytest.mark.parametrize(
    ("name", "params", "ids"),
    [
        ("default: waiting first, in line", {}, ["w1", "w0", "w2", "w3"]),
        ("by state", {"state": "queued"}, ["w1", "w0"]),
        ("several states", {"state": "Running,Succeeded"}, ["w2", "w3"]),
        ("by queue", {"queue": "b"}, ["w2", "w3"]),
        ("search all words", {"q": "LIMIT queue"}, ["w0"]),
        ("longest waiting first", {"sort": "waiting"}, ["w0", "w1", "w2", "w3"]),
        (
            "priority, descending order reversed",
            {"sort": "priority", "order": "desc"},
            ["w3", "w2", "w0", "w1"],
        ),
        ("a page", {"offset": "1", "limit": "2"}, ["w0", "w2"]),
        ("limit 0 is all", {"limit": "0"}, ["w1", "w0", "w2", "w3"]),
    ],
)
def test_select_workloads(name: str, params: dict[str, str], ids: list[str]) -> None:
    page = select_workloads(ROWS, params)
    assert [w["id"] for w in page["items"]] == ids, name
    assert all("history" not in w for w in page["items"])


def test_select_workloads_refuses_bad_parameters() -> None:
    with pytest.raises(QueryError, match="offset='x' must be a whole number"):
        select_workloads(ROWS, {"offset": "x"})


# ---------------------------------------------------------------- the timeline


def test_timeline_holds_values_between_cycles_and_sums_the_rest() -> None:
    t = Timeline(step_s=10, keep_s=60)
    t.record(0, {"a": 2, "b": 1, "c": 1})
    t.record(35, {"a": 4, "b": 0, "c": 2})  # steps 1 and 2 were not seen: they hold step 0's
    view = t.view(hours=1, top=1)
    assert view["times"] == [0, 10, 20, 30]
    assert view["series"] == {"a": [2, 2, 2, 4], "other": [2, 2, 2, 2]}


def test_timeline_keeps_only_its_window() -> None:
    t = Timeline(step_s=10, keep_s=30)
    for k in range(10):
        t.record(k * 10, {"a": k})
    view = t.view(hours=1)
    assert view["times"] == [70, 80, 90] and view["series"]["a"] == [7, 8, 9]
    t.record(50, {"a": 100})  # the clock stepped back: ignored
    assert t.view(hours=1)["series"]["a"] == [7, 8, 9]


# ---------------------------------------------------------------- Grafana


def test_grafana_dashboard_charts_exactly_the_exported_series() -> None:
    pytest.importorskip("ray")
    from kai_ray.dashboard.grafana import FILE_NAME, grafana_dashboard, queried_series
    from kai_ray.ray.metrics import SERIES

    charted = {s.removesuffix("_bucket") for s in queried_series(grafana_dashboard())}
    assert charted == set(SERIES)
    shipped = Path(__file__).resolve().parents[2] / "kai_ray" / "dashboard" / "grafana" / FILE_NAME
    assert json.loads(shipped.read_text()) == grafana_dashboard(), (
        "regenerate: kai-ray dashboard grafana --out ..."
    )
