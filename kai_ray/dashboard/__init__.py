"""The kai-ray dashboard: a read-only web UI and JSON API over the scheduler's state,
served by the scheduler itself (the Ray scheduler actor, the Kubernetes operator).

    feed = Feed(lambda: board_of(loop, time.time(), backend="ray"))
    url = await DashboardServer(feed, access_for(host, token), host, port).start()
    SchedulingLoop(..., listener=feed)   # the loop tells the feed of each cycle
    feed.follow(loop)                    # ...whose refusals it counts for GET /metrics

Backend-neutral: a backend builds a Board from its own state and reports its cycles.
"""

from kai_ray.dashboard.access import Access, DashboardAccessError, access_for, is_loopback
from kai_ray.dashboard.board import (
    Board,
    DeviceShare,
    board_from_controller,
    board_of,
    device_layout,
    queue_rows,
)
from kai_ray.dashboard.feed import Feed
from kai_ray.dashboard.server import DEFAULT_PORT, DashboardServer
from kai_ray.dashboard.thread import ServerThread
from kai_ray.dashboard.timeline import Timeline

__all__ = [
    "DEFAULT_PORT",
    "Access",
    "Board",
    "DashboardAccessError",
    "DashboardServer",
    "DeviceShare",
    "Feed",
    "ServerThread",
    "Timeline",
    "access_for",
    "board_from_controller",
    "board_of",
    "device_layout",
    "is_loopback",
    "queue_rows",
]
