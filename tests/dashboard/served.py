"""A dashboard served from a controller test harness's controller, and its API read."""

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


def api(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())
