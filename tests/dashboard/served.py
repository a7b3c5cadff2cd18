"""A dashboard served from a controller test harness's controller, its API read, and its
Workloads page's detail panel opened."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kai_ray.dashboard import DashboardServer, Feed, ServerThread, board_from_controller

from ..control.harness import Harness


@contextmanager
def served(h: Harness) -> Iterator[ServerThread]:
    """The real dashboard server on a free port, its board read off `h`'s controller at
    `h`'s clock."""
    feed = Feed(lambda: board_from_controller(h.controller, h.clock.now()))
    with ServerThread(DashboardServer(feed, port=0)) as thread:
        yield thread


def show_detail(page: Any, wid: str) -> None:
    """Click the workload's row on the Workloads page and wait for its detail panel."""
    page.click(f"tr[data-workload='{wid}']")
    page.wait_for_selector("#detail:not([hidden]) h3")


def api(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())
