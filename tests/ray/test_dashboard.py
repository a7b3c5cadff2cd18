"""The dashboard of a real scheduler on the multi-node Ray cluster, in headless Chromium:
each page shows the real state (a preempted workload with its reason, a queue over its
fair share marked, a waiting gang with its place in line), updates without a reload,
refuses writes, and listens wider only with a token. Its metrics reach Prometheus with
every series the Grafana dashboard charts."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import kai_ray
from kai_ray.control import WorkloadSpec
from kai_ray.dashboard.grafana import FILE_NAME, grafana_dashboard, queried_series

from ..browser import browser, open_page, shot  # noqa: F401
from .conftest import wait_until
from .test_recovery import scheduler_pid

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

QUEUES = [
    # team-a may not lose GPUs to reclaim for 10 minutes: it stays over its fair share
    # while team-b waits, which is what the pages must show.
    {"name": "team-a", "resources": {"gpu": {"quota": 4}, "cpu": {"quota": -1}}, "reclaimMinRuntime": "10m"},
    {"name": "team-b", "resources": {"gpu": {"quota": 4}, "cpu": {"quota": -1}}},
]


def hold(sched: Any, wid: str, queue: str, workers: int, priority: int = 50) -> str:
    spec = WorkloadSpec(
        queue=queue,
        priority=priority,
        preemptible=priority < 100,
        priority_class="train" if priority < 100 else "inference",
        workers=workers,
        resources_per_worker={"GPU": 4, "CPU": 1},
        kind="block",
        name=wid,
        grace_period=0.5,
    )
    return str(sched.submit(spec, wid))


def state(sched: Any, wid: str) -> str:
    return str(sched.info(wid)["state"])


def get(url: str, token: str | None = None, method: str = "GET") -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method, data=b"{}" if method != "GET" else None)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture
def busy_cluster(start_scheduler: Any) -> tuple[Any, str]:
    """12 GPUs: team-a's two trainings fill them, an inference of team-a preempts one,
    then team-b's two gangs wait (reclaim blocked by team-a's min runtime)."""
    sched = start_scheduler(QUEUES)
    hold(sched, "train-1", "team-a", 2)
    hold(sched, "train-2", "team-a", 1)
    wait_until(lambda: state(sched, "train-1") == state(sched, "train-2") == "Running", what="trainings run")
    hold(sched, "infer", "team-a", 1, priority=125)
    wait_until(lambda: state(sched, "infer") == "Running", 30, what="the inference runs")
    hold(sched, "gang-b1", "team-b", 2)
    hold(sched, "gang-b2", "team-b", 1)
    wait_until(
        lambda: sched.info("gang-b2")["position"] == 2 and sched.info("gang-b1")["reason_code"],
        what="team-b's gangs wait in line",
    )
    return sched, sched.dashboard()["url"]


def test_pages_show_the_schedulers_state(busy_cluster: tuple[Any, str], browser: Any) -> None:  # noqa: F811
    sched, url = busy_cluster
    victim = next(w for w in ("train-1", "train-2") if sched.info(w)["preemptions"])
    page = browser.new_page(viewport={"width": 1400, "height": 900})

    open_page(page, url, "queues")
    assert page.get_attribute("tr[data-queue='team-a']", "data-standing") == "over"
    assert page.get_attribute("tr[data-queue='team-b']", "data-standing") == "under"
    assert "over (gpu)" in page.inner_text("tr[data-queue='team-a']")
    shot(page, "dashboard-queues")

    open_page(page, url, "workloads")
    row = page.locator(f"tr[data-workload='{victim}']")
    assert "preempt" in row.inner_text()  # the preemption's reason, from the core
    gang = page.locator("tr[data-workload='gang-b2']")
    assert gang.get_attribute("data-position") == "2"
    assert "2 of 2" in gang.inner_text()
    assert sched.info("gang-b1")["reason"] in page.inner_text("tr[data-workload='gang-b1']")
    shot(page, "dashboard-workloads")
    row.click()
    page.wait_for_selector("#history tr.preempted")
    assert "Preempting" in page.inner_text("#history tr.preempted")
    shot(page, "dashboard-workload-detail")
    page.click("#detail-close")

    # Live: a change shows without reloading the page.
    sched.cancel("gang-b2")
    page.wait_for_selector("tr[data-workload='gang-b2'][data-state='Cancelled']", timeout=15_000)

    open_page(page, url, "nodes")
    held = [float(x) for x in page.eval_on_selector_all(".gpu", "els => els.map(e => e.dataset.used)")]
    assert len(held) == 12 and sum(held) == pytest.approx(12.0)
    assert page.locator(".node").count() == 4  # the head (no GPUs) and three GPU nodes
    shot(page, "dashboard-nodes")

    open_page(page, url, "timeline")
    assert page.locator("polygon[data-series='team-a']").count() == 1
    shot(page, "dashboard-timeline")
    page.close()


def test_api_is_read_only_and_answers_scripts(busy_cluster: tuple[Any, str]) -> None:
    sched, url = busy_cluster
    status, queues = get(url + "api/v1/queues")
    assert status == 200
    by_name = {q["name"]: q for q in queues["items"]}
    assert by_name["team-a"]["standing"] == "over"
    assert by_name["team-a"]["resources"]["gpu"]["allocated"] == pytest.approx(12)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, body = get(url + "api/v1/queues", method=method)
        assert status == 405 and "read-only" in body["error"]
    status, _ = get(url + "api/v1/workloads/gang-b1", method="DELETE")
    assert status == 405 and state(sched, "gang-b1") == "Queued"
    status, body = get(url + "api/v1/workloads?state=Queued&queue=team-b&sort=queue")
    assert [w["id"] for w in body["items"]] == ["gang-b1", "gang-b2"] and body["total"] == 2
    status, body = get(url + "api/v1/workloads?state=Sleeping")
    assert status == 400 and "Sleeping" in body["error"]
    status, body = get(url + "api/v1/nodes")
    assert sum(n["gpus"] for n in body["items"]) == 12


def test_listening_wider_takes_a_token(start_scheduler: Any) -> None:
    sched = start_scheduler(QUEUES)
    if not sched.dashboard()["rays_token_accepted"]:  # Ray without token auth: it needs our own
        with pytest.raises(ValueError, match="needs a token"):
            sched.serve_dashboard("0.0.0.0", 0)
    before = sched.dashboard()
    assert before["host"] == "127.0.0.1"
    info = sched.serve_dashboard("0.0.0.0", 0, "s3cret")
    assert info["token_required"]
    url = f"http://127.0.0.1:{info['port']}/"
    assert get(url + "api/v1/summary")[0] == 401
    assert get(url + "api/v1/summary", token="wrong")[0] == 401
    assert get(url + "api/v1/summary", token="s3cret")[0] == 200
    # A restarted scheduler (its process killed) listens the same way.
    old = scheduler_pid()
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: scheduler_pid() not in (None, old), 60, what="the scheduler restarts")
    again = sched.dashboard()
    assert again["host"] == "0.0.0.0" and again["token_required"]
    assert get(f"http://127.0.0.1:{again['port']}/api/v1/summary")[0] == 401


def test_metrics_carry_every_series_the_grafana_dashboard_charts(busy_cluster: tuple[Any, str]) -> None:
    head = next(n for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])
    url = f"http://{head['NodeManagerAddress']}:{head['MetricsExportPort']}/metrics"
    wanted = queried_series(grafana_dashboard())

    def missing() -> set[str]:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        found = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
        return wanted - found

    wait_until(lambda: not missing(), 60, what=lambda: f"series {sorted(missing())}")
    # The dashboard file sits beside Ray's own Grafana dashboards of this session.
    session = Path(ray._private.worker.global_worker.node.get_session_dir_path())
    written = session / "metrics" / "grafana" / "dashboards" / FILE_NAME
    assert json.loads(written.read_text())["uid"] == grafana_dashboard()["uid"]


def test_the_command_prints_the_url_and_refuses_a_wide_listen_without_a_token(
    start_scheduler: Any, ray_cluster: Any
) -> None:
    import subprocess
    import sys

    start_scheduler(QUEUES)
    env = dict(os.environ, RAY_ADDRESS=ray_cluster.address)
    cli = [sys.executable, "-m", "kai_ray.cli", "dashboard"]
    done = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith("http://127.0.0.1:") and get(line + "api/v1/summary")[0] == 200
    wide = subprocess.run([*cli, "--host", "0.0.0.0"], capture_output=True, text=True, env=env, timeout=60)
    if kai_ray.get_scheduler().dashboard()["rays_token_accepted"]:
        # Ray runs with token auth (a cluster started after `ray.init` made ~/.ray/auth_token
        # may): Ray's token is the token, and the dashboard asks for it.
        assert wide.returncode == 0, wide.stderr
        assert get(wide.stdout.strip() + "api/v1/summary")[0] == 401
    else:
        assert wide.returncode == 2 and "needs a token" in wide.stderr
        assert get(line + "api/v1/summary")[0] == 200  # still where it was
