"""`kai-ray bench dashboard`: how long each page takes to show in a real browser, on a
scheduler with many queues and workloads (1,000 and 10,000 by default).

The state is real: a Controller on in-memory ports with the real core decides one cycle
over the synthetic queues and workloads (so positions, reasons and fair shares are the
scheduler's own), and six hours of timeline are recorded. The dashboard serves it from a
thread; headless Chromium (Debian's, driven by Playwright) opens each page and the time
from navigation to the page's `data-rendered` mark is taken, several rounds, median.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from kai_ray.control import Controller, WorkloadSpec
from kai_ray.control.memory import ManualClock, MemoryExecutor, MemoryNodes, MemoryStore
from kai_ray.core import HOSTNAME_LABEL, NodeInfo, QueueInfo, SchedulerConfig, Topology
from kai_ray.dashboard import Access, DashboardServer, Feed, ServerThread, board_from_controller

__all__ = ["PAGES", "big_controller", "chromium_path", "measure_pages", "run_dashboard_bench"]

PAGES = ("queues", "workloads", "nodes", "timeline")
GIB = 2**30


def chromium_path() -> str:
    """Debian's chromium (Playwright's own browser download does not work on these
    machines); KAI_RAY_CHROMIUM overrides."""
    import os

    path = os.environ.get("KAI_RAY_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RuntimeError(
            "no chromium found: install Debian's (apt-get install chromium) or set KAI_RAY_CHROMIUM"
        )
    return path


def big_controller(
    queues: int = 1000, workloads: int = 10_000, nodes: int = 1250, seed: int = 0
) -> Controller:
    """A controller after one cycle over `queues` queues (departments of 20) and
    `workloads` workloads of 1 to 8 GPUs on `nodes` nodes of 8 GPUs in racks of 16."""
    rng = random.Random(seed)
    departments = max(1, queues // 20)
    infos = [QueueInfo(f"dept-{d}", quota=(nodes * 8 / departments, -1, -1)) for d in range(departments)]
    leaves = []
    for i in range(queues - departments):
        name = f"team-{i}"
        leaves.append(name)
        infos.append(
            QueueInfo(name, parent=f"dept-{i % departments}", quota=(rng.choice([0, 4, 8, 16]), -1, -1))
        )
    cluster = MemoryNodes(
        [
            NodeInfo(
                f"node-{n}",
                gpus=8,
                cpu=64,
                memory=512 * GIB,
                labels={HOSTNAME_LABEL: f"node-{n}", "rack": f"rack-{n // 16}", "zone": f"zone-{n // 320}"},
                gpu_model="H100",
            )
            for n in range(nodes)
        ]
    )
    config = SchedulerConfig(topologies={"dc": Topology("dc", ("zone", "rack"))})
    ctl = Controller(cluster, MemoryExecutor(), MemoryStore(), ManualClock(1000.0), infos, config)
    for i in range(workloads):
        gpus = rng.choice([0.5, 1, 1, 2, 4, 8])
        workers = rng.choice([1, 1, 2, 4])
        ctl.submit(
            f"wl-{i}",
            WorkloadSpec(
                queue=rng.choice(leaves),
                priority=rng.choice([50, 50, 75, 100, 125]),
                workers=workers,
                resources_per_worker={"GPU": gpus, "CPU": 1},
                name=f"job-{i}",
            ),
        )
    ctl.step()
    return ctl


def _timeline(feed: Feed, ctl: Controller, hours: float = 6.0, seed: int = 0) -> None:
    rng = random.Random(seed)
    end = ctl.clock.now()
    level = {q: st.allocated[0] for q, st in ctl.queue_status.items()}
    step = feed.timeline.step_s
    for k in range(int(hours * 3600 / step), 0, -1):
        level = {q: max(0.0, v + rng.choice((-1, 0, 0, 1))) for q, v in level.items()}
        feed.timeline.record(end - k * step, level)


def measure_pages(url: str, rounds: int = 3, screenshots: Path | None = None) -> dict[str, Any]:
    """Per page: the median seconds from navigation to rendered, and the page's own
    fetch-and-draw time, over `rounds` fresh loads in headless Chromium."""
    from playwright.sync_api import sync_playwright

    out: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for name in PAGES:
            loads, draws = [], []
            for _ in range(rounds):
                page.goto("about:blank")
                start = time.perf_counter()
                page.goto(f"{url}#/{name}")
                page.wait_for_selector(f"body[data-rendered='{name}']", timeout=60_000)
                loads.append(time.perf_counter() - start)
                draws.append(page.evaluate("window.kaiRayRender.ms") / 1000)
            out[name] = {
                "load_s": round(statistics.median(loads), 4),
                "draw_s": round(statistics.median(draws), 4),
            }
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshots / f"{name}.png"))
        browser.close()
    return out


def run_dashboard_bench(
    queues: int = 1000,
    workloads: int = 10_000,
    nodes: int = 1250,
    rounds: int = 3,
    screenshots: Path | None = None,
) -> dict[str, Any]:
    started = time.perf_counter()
    ctl = big_controller(queues, workloads, nodes)
    built = time.perf_counter() - started
    feed = Feed(lambda: board_from_controller(ctl, ctl.clock.now(), backend="memory"))
    _timeline(feed, ctl)
    t = time.perf_counter()
    board = feed.board()
    board_s = time.perf_counter() - t
    with ServerThread(DashboardServer(feed, Access(), port=0)) as server:
        pages = measure_pages(server.url, rounds, screenshots)
    return {
        "bench": "dashboard",
        "queues": len(board.queues),
        "workloads": len(board.workloads),
        "nodes": len(board.nodes),
        "gpus": sum(n["gpus"] for n in board.nodes),
        "state_build_s": round(built, 2),
        "board_build_s": round(board_s, 4),
        "pages": pages,
        "slowest_page_s": max(p["load_s"] for p in pages.values()),
        "target_s": 1.0,
    }
