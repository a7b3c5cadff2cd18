"""The dashboard's web server: the pages and the read-only JSON API under /api/v1/.

It runs on the event loop of whoever serves it (the Ray scheduler actor's, the
operator's), reading the backend's state through a Feed, so no lock is needed: a
request is answered between two pieces of scheduler work. Every method but GET and HEAD
is refused: nothing here changes the scheduler (the CLI and the Python API do).

    GET /api/v1                    the endpoints
    GET /api/v1/summary            counts, GPUs, queues over their share, the revision
    GET /api/v1/queues[/NAME]      the queue tree with quota, fair share, allocated, requested
    GET /api/v1/workloads[/ID]     filtered, sorted, paged (query.py); one with its history
    GET /api/v1/nodes              nodes with their devices and who holds what of each
    GET /api/v1/timeline           GPUs allocated per queue over the last hours
    GET /api/v1/stream             server-sent events: {"revision": N} on every change
    GET /metrics                   Prometheus' text format: access refusals per queue and rule
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
from importlib import resources
from typing import Any

from aiohttp import web

from kai_ray.dashboard.access import COOKIE, Access, token_of
from kai_ray.dashboard.feed import Feed
from kai_ray.dashboard.metrics import CONTENT_TYPE, prometheus_text
from kai_ray.dashboard.query import QueryError, select_workloads

__all__ = ["DEFAULT_PORT", "ENDPOINTS", "DashboardServer"]

log = logging.getLogger(__name__)
DEFAULT_PORT = 8267  # beside Ray's dashboard (8265) and its client server (10001)
STREAM_HEARTBEAT_S = 15.0
# At most one update a second per page: the page refetches on each, and a board of many
# workloads is built on the scheduler's own loop (once per revision, for all pages).
STREAM_MIN_GAP_S = 1.0
ENDPOINTS = ("summary", "queues", "workloads", "nodes", "timeline", "stream")
_STATIC = {"index.html": "text/html", "app.js": "text/javascript", "app.css": "text/css"}

try:  # orjson where installed (the kubernetes and test extras): 10k rows in a few ms
    import orjson

    def _dumps(data: Any) -> bytes:
        return orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY)

except ImportError:  # pragma: no cover - plain json is the fallback

    def _dumps(data: Any) -> bytes:
        return json.dumps(data, separators=(",", ":")).encode()


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


class DashboardServer:
    """`await start()` listens and returns the URL; `await stop()` closes it."""

    def __init__(
        self, feed: Feed, access: Access | None = None, host: str = "127.0.0.1", port: int = DEFAULT_PORT
    ):
        self.feed, self.access = feed, access or Access()
        self.host, self.port = host, port
        self._runner: web.AppRunner | None = None
        self._static = {name: _read_static(name) for name in _STATIC}

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{self.port}/"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._read_only, self._guard])
        app.router.add_get("/", self._page)
        app.router.add_get("/static/{name}", self._asset)
        app.router.add_get("/api/v1", self._index)
        app.router.add_get("/api/v1/", self._index)
        app.router.add_get("/api/v1/summary", self._summary)
        app.router.add_get("/api/v1/queues", self._queues)
        app.router.add_get("/api/v1/queues/{name}", self._queue)
        app.router.add_get("/api/v1/workloads", self._workloads)
        app.router.add_get("/api/v1/workloads/{id:.+}", self._workload)  # a gang id has slashes
        app.router.add_get("/api/v1/nodes", self._nodes)
        app.router.add_get("/api/v1/timeline", self._timeline)
        app.router.add_get("/api/v1/stream", self._stream)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_route("*", "/api/{tail:.*}", self._not_found)
        return app

    async def start(self) -> str:
        """Listen; a busy default port falls back to a free one (said in the log), a
        busy port asked for is an error naming it."""
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        try:
            site = web.TCPSite(self._runner, self.host, self.port)
            await site.start()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or self.port != DEFAULT_PORT:
                await self._runner.cleanup()
                raise OSError(
                    exc.errno,
                    f"dashboard: cannot listen on {self.host}:{self.port} ({exc.strerror}); "
                    "choose another --port, or 0 for any free port",
                ) from exc
            log.info("dashboard: port %d is taken; listening on a free port instead", self.port)
            site = web.TCPSite(self._runner, self.host, 0)
            await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------ middlewares

    @web.middleware
    async def _read_only(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            response = _error(
                405,
                f"the kai-ray dashboard is read-only: {request.method} {request.path} is refused; "
                "change the scheduler with the kai-ray command or the Python API",
            )
            response.headers["Allow"] = "GET, HEAD"
            return response
        result: web.StreamResponse = await handler(request)
        return result

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        token = token_of(request.headers, request.cookies, request.query)
        if not self.access.allows(token):
            return _error(
                401,
                "the kai-ray dashboard needs its token: send `Authorization: Bearer TOKEN`, "
                "or open the page once as /?token=TOKEN",
            )
        if "token" in request.query and request.path == "/" and self.access.required and token:
            # A token in the address bar: keep it in a cookie, drop it from the address.
            found = web.HTTPFound("./")
            found.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
            raise found
        result: web.StreamResponse = await handler(request)
        return result

    # ------------------------------------------------------------ pages

    async def _page(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def _asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _STATIC:
            raise web.HTTPNotFound()
        return self._file(name)

    def _file(self, name: str) -> web.Response:
        return web.Response(
            body=self._static[name], content_type=_STATIC[name], headers={"Cache-Control": "no-cache"}
        )

    # ------------------------------------------------------------ the API

    async def _index(self, request: web.Request) -> web.Response:
        return _json({"version": "v1", "endpoints": [f"/api/v1/{e}" for e in ENDPOINTS]})

    async def _summary(self, request: web.Request) -> web.Response:
        return _json({**self.feed.board().summary(), "revision": self.feed.revision})

    async def _queues(self, request: web.Request) -> web.Response:
        board = self.feed.board()
        return _json({"at": board.at, "revision": self.feed.revision, "items": board.queues})

    async def _queue(self, request: web.Request) -> web.Response:
        return _one(self.feed.board().queues, "name", request.match_info["name"], "queue")

    async def _workloads(self, request: web.Request) -> web.Response:
        board = self.feed.board()
        try:
            page = select_workloads(board.workloads, request.query)
        except QueryError as exc:
            return _error(400, str(exc))
        return _json({"at": board.at, "revision": self.feed.revision, **page})

    async def _workload(self, request: web.Request) -> web.Response:
        return _one(self.feed.board().workloads, "id", request.match_info["id"], "workload")

    async def _nodes(self, request: web.Request) -> web.Response:
        board = self.feed.board()
        return _json(
            {"at": board.at, "revision": self.feed.revision, "levels": board.levels, "items": board.nodes}
        )

    async def _timeline(self, request: web.Request) -> web.Response:
        try:
            hours = float(request.query.get("hours", "6"))
            top = int(request.query.get("top", "12"))
        except ValueError:
            return _error(
                400, "timeline: hours must be a number and top a whole number, e.g. ?hours=6&top=12"
            )
        leaves = [q["name"] for q in self.feed.board().queues if not q["children"]]
        return _json(self.feed.timeline.view(hours=hours, top=top, queues=leaves))

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        seen = -1
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while True:
                revision = await self.feed.wait_change(seen, STREAM_HEARTBEAT_S)
                if revision == seen:
                    await response.write(b": keep-alive\n\n")
                    continue
                seen = revision
                await response.write(b"data: " + _dumps({"revision": revision}) + b"\n\n")
                await asyncio.sleep(STREAM_MIN_GAP_S)
        return response

    async def _metrics(self, request: web.Request) -> web.Response:
        # No board is built: a scrape every few seconds costs the counts' lines only.
        return web.Response(
            body=prometheus_text(self.feed.refusals).encode(), headers={"Content-Type": CONTENT_TYPE}
        )

    async def _not_found(self, request: web.Request) -> web.Response:
        return _error(404, f"no endpoint {request.path}; GET /api/v1 lists them")


def _one(rows: list[dict[str, Any]], key: str, value: str, what: str) -> web.Response:
    for row in rows:
        if row[key] == value:
            return _json(row)
    return _error(404, f"no {what} {value!r}; GET /api/v1/{what}s lists them")


def _read_static(name: str) -> bytes:
    return resources.files("kai_ray.dashboard").joinpath("static", name).read_bytes()
