"""A dashboard server on an event loop of its own, in a thread: for a process whose main
thread is not an event loop (the benchmark, a script serving a saved Board)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from kai_ray.dashboard.server import DashboardServer

__all__ = ["ServerThread"]


class ServerThread:
    def __init__(self, server: DashboardServer) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="kai-ray-dashboard", daemon=True)

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(timeout=30)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the server's loop (where the feed lives) and return its result."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        return self.server.url
