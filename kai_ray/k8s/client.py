"""A small asynchronous Kubernetes API client: what the operator needs, on one
kept-alive connection pool with many requests in flight.

Logging in (kubeconfig, exec plugins, service-account tokens) is kubernetes_asyncio's
(kai_ray.k8s.login); the requests are this module's, a fast path measured against
kubernetes_asyncio's own API client (`kai-ray bench k8s` reports both binding rates,
BENCHMARKS.md the figures). It speaks plain JSON over aiohttp: list, watch, get,
create, patch, delete, and the two subresources a scheduler writes, `pods/binding` and
`pods/eviction`. A 401 gets a fresh credential and the request is sent once more.

Every write first passes the session's `fence` when one is set: leader election
(kai_ray.k8s.leader) refuses them there once this process may no longer act.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, TypeVar

import aiohttp

from kai_ray.k8s.login import KubeConfig, Login, load_kubeconfig

try:  # pods are large: decoding a watch's events is most of an operator's CPU
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - orjson comes with the kubernetes extra
    _loads = json.loads

__all__ = ["ApiError", "Kube", "KubeConfig", "load_kubeconfig", "run_async"]

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_BUSY_RETRIES = 10  # 429 Too Many Requests: tried again this many times


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, on asyncio's own event loop; on uvloop's when KAI_RAY_UVLOOP=1 asks
    for it. uvloop's loop takes about half of asyncio's time per event, but aborts the
    whole process (libuv's assertion `loop->watchers[w->fd] == w`, uvloop issue #424)
    when hundreds of requests fail at once, as every binding in flight does when the API
    server goes away (tests/k8s/test_faults.py): an operator must outlive its server."""
    if os.environ.get("KAI_RAY_UVLOOP") != "1":
        return asyncio.run(main)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


class ApiError(RuntimeError):
    """A non-2xx answer: `status` is the HTTP code, `reason` Kubernetes' reason word."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


# A binding answers in milliseconds. One stuck longer (a server waiting on an etcd that
# restarted: its client reconnects with backoff) is given up and its pod asked instead
# (the actuator's uncertain bindings), rather than its gang's room held for the 30 s of
# an ordinary request.
BIND_TIMEOUT_S = 8.0


class Kube:
    """One session to one API server. Use `async with Kube(config) as kube:`."""

    def __init__(self, config: KubeConfig, *, connections: int = 64) -> None:
        self.config = config
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._login: Login | None = None
        # Called before every write (not a GET): raises to refuse it (leader election's fence).
        self.fence: Callable[[], None] | None = None

    async def __aenter__(self) -> Kube:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        self._login = login = await Login.open(self.config)
        connector = aiohttp.TCPConnector(limit=self._connections, ssl=login.ssl_context())
        self._session = aiohttp.ClientSession(
            base_url=login.server,
            headers={"Accept": "application/json"},
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    @property
    def login(self) -> Login:
        if self._login is None:
            raise RuntimeError("Kube is not open: use `async with Kube(config) as kube`")
        return self._login

    async def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Content-Type": content_type} if content_type else {}
        token = await self.login.authorization()
        if token:
            headers["Authorization"] = token
        return headers

    def _connection(self) -> dict[str, Any]:
        """Per-request settings of the login: the proxy and the certificate's name."""
        login, extra = self.login, {}
        if login.proxy:
            extra["proxy"] = login.proxy
        if login.server_hostname:
            extra["server_hostname"] = login.server_hostname
        return extra

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Kube is not open: use `async with Kube(config) as kube`")
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
        decode: bool = True,
        fenced: bool = True,
    ) -> dict[str, Any]:
        """One request; `fenced=False` for the lease's own writes, which the fence guards."""
        data = None if body is None else json.dumps(body)
        renewed, busy = False, 0
        while True:
            if fenced and method != "GET" and self.fence is not None:
                self.fence()  # checked again on a retry: the lease may have run out meanwhile
            headers = await self._headers(content_type if data is not None else None)
            async with self.session.request(
                method,
                path,
                data=data,
                params=params,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
                **self._connection(),
            ) as resp:
                payload = await resp.read()
                if resp.status == 401 and not renewed:
                    renewed = True  # a rotated token, an expired plugin credential: once more
                    await self.login.renew(headers.get("Authorization"))
                    continue
                if resp.status == 429 and busy < MAX_BUSY_RETRIES:
                    # The server asks to come back (a new resource's storage starting, its
                    # priority and fairness queues full): after the time it names.
                    busy += 1
                    await asyncio.sleep(_retry_after(resp.headers.get("Retry-After")))
                    continue
                if resp.status >= 300:
                    raise _error(resp.status, payload)
                if not decode:
                    return {}
                return _loads(payload) if payload else {}

    async def get(self, path: str, **params: str) -> dict[str, Any]:
        return await self.request("GET", path, params=params or None)

    async def exists(self, path: str) -> bool:
        try:
            await self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body)

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", path, body)

    async def patch(self, path: str, body: Mapping[str, Any], *, merge: bool = True) -> dict[str, Any]:
        ctype = "application/merge-patch+json" if merge else "application/strategic-merge-patch+json"
        return await self.request("PATCH", path, body, content_type=ctype)

    async def delete(self, path: str, *, grace: int | None = None) -> dict[str, Any]:
        body = (
            None
            if grace is None
            else {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace}
        )
        return await self.request("DELETE", path, body)

    async def bind(self, namespace: str, pod: str, node: str, uid: str = "") -> None:
        """Bind through the `pods/binding` subresource (spec.nodeName cannot be patched)."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # The answer is a Status saying Success: nothing to decode, a thousand times a burst.
        log.debug("binding %s/%s to %s", namespace, pod, node)
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/binding"
        await self.request("POST", path, body, decode=False, timeout=BIND_TIMEOUT_S)

    async def evict(self, namespace: str, pod: str) -> bool:
        """Evict through the Eviction API: policy/v1, or policy/v1beta1 on servers before
        1.22 (they refuse a v1 Eviction with 400). False when the pod is gone already."""
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
        meta = {"name": pod, "namespace": namespace}
        for version in ("policy/v1", "policy/v1beta1"):
            try:
                await self.request(
                    "POST", path, {"apiVersion": version, "kind": "Eviction", "metadata": meta}
                )
                return True
            except ApiError as exc:
                if exc.status == 404:
                    return False
                if exc.status != 400 or version != "policy/v1":
                    raise
        return True

    async def watch(
        self, path: str, resource_version: str, *, timeout: int = 300, **params: str
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of one watch call (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) until
        the server ends it. An ERROR event carries a Status (410: relist)."""
        async for events in self.watch_batches(path, resource_version, timeout=timeout, **params):
            for event in events:
                yield event

    async def watch_batches(
        self, path: str, resource_version: str, *, timeout: int = 300, **params: str
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """As `watch`, the events that arrived together as one list: during a burst (a
        thousand pods bound) one wake-up handles many events instead of one each."""
        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout),
            **params,
        }
        headers = await self._headers()
        async with self.session.get(
            path,
            params=query,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout + 30),
            **self._connection(),
        ) as resp:
            if resp.status == 401:  # the informer watches again, logged in afresh
                await self.login.renew(headers.get("Authorization"))
            if resp.status >= 300:
                raise _error(resp.status, await resp.read())
            rest = b""
            async for chunk in resp.content.iter_any():
                *lines, rest = (rest + chunk).split(b"\n")
                events = [_loads(line) for line in lines if line.strip()]
                if events:
                    yield events
            if rest.strip():
                yield [_loads(rest)]


def _retry_after(value: str | None) -> float:
    try:
        return min(5.0, max(0.1, float(value or 1)))
    except ValueError:
        return 1.0


def _error(status: int, payload: bytes) -> ApiError:
    try:
        data = json.loads(payload)
        return ApiError(status, str(data.get("reason", "")), str(data.get("message", "")))
    except ValueError:
        return ApiError(status, "", payload.decode(errors="replace")[:300])


async def gather_limited(coros: list[Any], limit: int) -> list[Any]:
    """Run the coroutines with at most `limit` in flight; results (or exceptions) in order."""
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> Any:
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)
