"""GPU types on the dashboard, in headless Chromium against the real server and a real
controller on in-memory ports: each queue's figures per type it names (the API's rows
and the Queues page), each node's type (the API and the Nodes page), and the types a
workload accepts (the API and the Workloads page's detail panel)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kai_ray.control import Controller, WorkloadSpec
from kai_ray.control.memory import ManualClock, MemoryExecutor, MemoryNodes, MemoryStore
from kai_ray.core import HOSTNAME_LABEL, GpuTypeShare, NodeInfo, QueueInfo
from kai_ray.dashboard import ServerThread

from ..browser import browser, open_page  # noqa: F401
from ..control.harness import Harness
from .served import api, served, show_detail

pytestmark = pytest.mark.timeout(120)


def _node(name: str, gpu_type: str) -> NodeInfo:
    return NodeInfo(name, gpus=4, cpu=8, memory=64 * 2**30, labels={HOSTNAME_LABEL: name}, gpu_type=gpu_type)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    """An H100 node and an A100 node; queue a names 4 H100s of quota (limit 4) and holds
    them with `h`; `more`, H100 only, waits on the queue's H100 limit."""
    queues = [QueueInfo("a", quota=(8, -1, -1), gpu_types=(GpuTypeShare("H100", 4.0, 4.0),))]
    cluster = MemoryNodes([_node("h0", "H100"), _node("a0", "A100")])
    executor, store, clock = MemoryExecutor(), MemoryStore(), ManualClock()
    controller = Controller(cluster, executor, store, clock, queues)
    h = Harness(controller, cluster, executor, store, clock)
    for wid in ("h", "more"):
        spec = WorkloadSpec(queue="a", resources_per_worker={"GPU": 4, "CPU": 1}, accelerator_type=["H100"])
        controller.submit(wid, spec)
    h.at(0).step().step()
    with served(h) as thread:
        yield thread


def test_the_api_gives_the_figures_per_type_and_each_nodes_type(server: ServerThread) -> None:
    (queue,) = api(server.url + "api/v1/queues")["items"]
    assert queue["gpu_types"]["H100"] == {"quota": 4.0, "limit": 4.0, "fair_share": 4.0, "allocated": 4.0}
    nodes = {n["id"]: n for n in api(server.url + "api/v1/nodes")["items"]}
    assert (nodes["h0"]["gpu_type"], nodes["a0"]["gpu_type"]) == ("H100", "A100")
    rows = {w["id"]: w for w in api(server.url + "api/v1/workloads")["items"]}
    assert rows["more"]["reason_code"] == "queue-limit"
    assert rows["more"]["reason"].startswith("queue a is at its H100 limit of 4 (holds 4)")
    assert rows["more"]["gpu_types"] == ["H100"]  # the types it accepts


def test_the_pages_show_the_types(server: ServerThread, browser: Any) -> None:  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    open_page(page, server.url, "queues")
    line = page.inner_text("tr[data-queue='a'] .by-type[data-gpu-type='H100']")
    assert line == "H100: 4 / 4 / 4 / 4", line
    open_page(page, server.url, "nodes")
    assert "H100" in page.inner_text(".node[data-gpu-type='H100'] .nm")
    assert "A100" in page.inner_text(".node[data-gpu-type='A100'] .nm")
    open_page(page, server.url, "workloads")
    show_detail(page, "more")
    assert "GPU types\nH100 (in this order)" in page.inner_text("#detail dl")
    page.close()
