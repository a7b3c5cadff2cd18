"""The operator serves the same dashboard as the Ray scheduler: KubeRay's clusters as
workloads (a preempted one with its history and reason, a waiting one with its place in
line), queues over and under their fair share, nodes with their devices; read-only."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from tests.browser import browser, open_page, shot  # noqa: F401
from tests.k8s.env import NS, K8sEnv, group, raycluster, running

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(240)]
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api(url: str, method: str = "GET") -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method, data=b"{}" if method != "GET" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except urllib.error.URLError:
        return 0, None


def rows(url: str) -> dict[str, dict[str, Any]]:
    status, body = api(url + "api/v1/workloads?limit=0")
    return {w["name"]: w for w in body["items"]} if status == 200 else {}


def test_operator_dashboard_shows_gangs_queues_and_nodes(k8s: K8sEnv, browser: Any) -> None:  # noqa: F811
    k8s.node("n0", gpus=4)
    k8s.node("n1", gpus=4)
    k8s.queue("a", gpu=2)
    k8s.queue("b", gpu=2)
    k8s.start_fakes()
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    k8s.start_operator("--dashboard", f"127.0.0.1:{port}")
    k8s.create(RC, raycluster("train", group("gpu", replicas=8, min_replicas=8), queue="a", priority="train"))
    k8s.wait_for("train on all 8 GPUs", lambda: len(running(k8s.cluster_pods("train"))) == 9)
    # Inference in the same queue preempts the training, which waits whole again.
    k8s.create(RC, raycluster("serve", group("gpu", replicas=2), queue="a", priority="inference"))
    k8s.wait_for("serve running", lambda: len(running(k8s.cluster_pods("serve"))) == 3, timeout=60)
    # Queue b takes the 6 GPUs left: more than its fair share while the training waits.
    k8s.create(RC, raycluster("big", group("gpu", replicas=6, min_replicas=6), queue="b", priority="train"))
    k8s.wait_for("big running", lambda: len(running(k8s.cluster_pods("big"))) == 7, timeout=60)

    # The dashboard shows the operator's last cycle: one cycle behind the API server at
    # most, so the settled state is waited for, not read at once.
    def settled() -> Any:
        r = rows(url)
        train, big = r.get("RayCluster/train"), r.get("RayCluster/big")
        nodes = api(url + "api/v1/nodes")[1]["items"]
        used = sum(d["used"] for n in nodes for d in n["devices"])
        if train and train["state"] == "Queued" and train["position"] and big and big["state"] == "Running":
            return (r, nodes) if used == pytest.approx(8) and train["preemptions"] else None
        return None

    r, nodes = k8s.wait_for("the dashboard to show train preempted and waiting, big running", settled)
    train = r["RayCluster/train"]
    detail = api(url + "api/v1/workloads/" + urllib.parse.quote(train["id"], safe=""))[1]
    assert train["preemptions"] == 1 and train["last_preemption"]["why"].startswith("preempt"), train
    states = [h["to"] for h in detail["history"]]
    assert states[0] == "Queued" and "Running,Preempting,Queued" in ",".join(states), states
    assert train["position"] == 1 and train["reason"]
    assert r["RayCluster/serve"]["state"] == "Running"
    queues = {q["name"]: q for q in api(url + "api/v1/queues")[1]["items"]}
    assert queues["b"]["standing"] == "over" and queues["a"]["standing"] == "under"
    assert sorted(n["name"] for n in nodes) == ["n0", "n1"]
    assert api(url + "api/v1/queues", method="POST")[0] == 405
    summary = api(url + "api/v1/summary")[1]
    assert summary["backend"] == "kubernetes" and summary["status"]["phase"] == "scheduling", summary

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    open_page(page, url, "workloads")
    row = page.locator("tr[data-workload$='/RayCluster/train']")
    assert "1 of 1" in row.inner_text() and "preempted" in row.inner_text()
    assert page.locator("#status").is_hidden()  # scheduling: no banner
    shot(page, "k8s-dashboard-workloads")
    open_page(page, url, "queues")
    assert page.get_attribute("tr[data-queue='b']", "data-standing") == "over"
    page.close()


def test_a_standby_says_on_its_dashboard_whose_lease_it_waits_for(k8s: K8sEnv, browser: Any) -> None:  # noqa: F811
    """A replica that does not schedule says why (kai_ray.k8s.progress): the summary's
    status and a banner on every page, until it takes over."""
    k8s.node("n0", gpus=4)
    leader_url, standby_url = (f"http://127.0.0.1:{free_port()}/" for _ in range(2))
    k8s.start_operator("--dashboard", leader_url[len("http://") : -1])

    def status(url: str) -> dict[str, Any]:
        return (api(url + "api/v1/summary")[1] or {}).get("status") or {}

    k8s.wait_for("the leader scheduling", lambda: status(leader_url).get("scheduling"))
    assert k8s.operator is not None
    leader = f"{socket.gethostname()}_{k8s.operator.pid}"
    standby = k8s.spawn_operator(
        "--dashboard", standby_url[len("http://") : -1], log=k8s.operator_log.with_name("standby.log")
    )
    try:
        waiting = k8s.wait_for(
            "the standby waiting", lambda: status(standby_url).get("phase") == "waiting-for-lease"
        )
        shown = status(standby_url)
        assert waiting and shown["lease"]["holder"] == leader and not shown["scheduling"], shown
        assert shown["listed"]["nodes"] == 1 and f"held by {leader}" in shown["detail"], shown
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        open_page(page, standby_url, "queues")
        banner = page.locator("#status")
        banner.wait_for(state="visible", timeout=10_000)
        assert "Not scheduling: waiting for lease" in banner.inner_text() and leader in banner.inner_text()
        shot(page, "k8s-dashboard-standby")
        k8s.stop_operator()  # a clean stop hands the lease over: the standby schedules at once
        k8s.wait_for("the standby scheduling", lambda: status(standby_url).get("scheduling"))
        banner.wait_for(state="hidden", timeout=10_000)
        page.close()
    finally:
        standby.terminate()
        standby.wait(timeout=10)


def test_snapshot_of_a_kubernetes_cluster_replays_in_the_simulator(k8s: K8sEnv, tmp_path: Any) -> None:
    import subprocess
    import sys

    k8s.node("n0", gpus=4)
    k8s.queue("a", gpu=4)
    k8s.start_fakes()
    k8s.start_operator("--dashboard", "off")
    k8s.create(RC, raycluster("one", group("gpu", replicas=3, min_replicas=3), queue="a"))
    k8s.wait_for("one running", lambda: len(running(k8s.cluster_pods("one"))) == 4)
    k8s.stop_operator()
    k8s.create(RC, raycluster("two", group("gpu", replicas=2, min_replicas=2), queue="a"))
    k8s.wait_for("two's pods made", lambda: len(k8s.cluster_pods("two")) == 3)
    path = tmp_path / "state.json"
    cli = [sys.executable, "-m", "kai_ray.cli"]
    save = subprocess.run(
        [*cli, "snapshot", "save", str(path), "--kubeconfig", k8s.api.kubeconfig],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert save.returncode == 0, save.stderr
    doc = json.loads(path.read_text())
    assert doc["source"] == "kubernetes" and [n["name"] for n in doc["nodes"]] == ["n0"]
    jobs = {j["name"].split("/")[-1]: j for j in doc["jobs"]}
    assert {t["status"] for t in jobs["one"]["tasks"]} == {"Running"}
    assert {t["status"] for t in jobs["two"]["tasks"]} == {"Pending"}
    replay = subprocess.run(
        [*cli, "sim", "--snapshot", str(path), "--json"], capture_output=True, text=True, timeout=60
    )
    assert replay.returncode == 0, replay.stderr
    waiting = json.loads(replay.stdout)["waiting"]
    (two,) = [w for job, w in waiting.items() if job.endswith("/RayCluster/two")]
    assert two["code"] == "no-room"  # 1 GPU free for a gang of 2: it waits, as the operator would say
