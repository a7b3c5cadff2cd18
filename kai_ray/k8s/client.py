"""A small asynchronous Kubernetes API client: what the operator needs, on one
kept-alive connection pool with many requests in flight.

The official `kubernetes` client opens a connection per request unless its responses are
released just so, and throttles itself client-side; binding a gang's pods through it is
an order of magnitude slower than the API server allows (see docs/kubernetes.md). This
client speaks plain JSON over aiohttp: list, watch, get, create, patch, delete, and the
two subresources a scheduler writes, `pods/binding` and `pods/eviction`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml

try:  # pods are large: decoding a watch's events is most of an operator's CPU
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - orjson comes with the kubernetes extra
    _loads = json.loads

__all__ = ["ApiError", "Kube", "KubeConfig", "load_kubeconfig", "run_async"]

_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
T = TypeVar("T")


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, on uvloop's event loop where it is installed (the kubernetes extra
    brings it): an operator's time goes to many small requests and watch events, and
    uvloop's loop takes about half of asyncio's own per event."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - the kubernetes extra installs it
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


class ApiError(RuntimeError):
    """A non-2xx answer: `status` is the HTTP code, `reason` Kubernetes' reason word."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


@dataclass(frozen=True, slots=True)
class KubeConfig:
    server: str
    token: str = ""
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure: bool = False

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return False
        if self.insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


def load_kubeconfig(path: str | None = None, context: str | None = None) -> KubeConfig:
    """The kubeconfig at `path` (else $KUBECONFIG, else ~/.kube/config), or the pod's own
    service account when none exists and we run inside a cluster."""
    candidate = path or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if Path(candidate).exists():
        return _from_file(Path(candidate), context)
    if path:
        raise FileNotFoundError(f"kubeconfig {path} does not exist; pass an existing file to --kubeconfig")
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if host and port and (_SA_DIR / "token").exists():
        return KubeConfig(
            server=f"https://{host}:{port}",
            token=(_SA_DIR / "token").read_text().strip(),
            ca_file=str(_SA_DIR / "ca.crt"),
        )
    raise FileNotFoundError(
        "no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a pod"
    )


def _from_file(path: Path, context: str | None) -> KubeConfig:
    data = yaml.safe_load(path.read_text()) or {}
    ctx_name = context or data.get("current-context")
    ctx = _named(data.get("contexts", []), ctx_name, "context", path)
    cluster = _named(data.get("clusters", []), ctx.get("cluster"), "cluster", path)
    user = _named(data.get("users", []), ctx.get("user"), "user", path)
    return KubeConfig(
        server=cluster["server"].rstrip("/"),
        token=user.get("token", ""),
        ca_file=_file_or_data(cluster, "certificate-authority", path),
        cert_file=_file_or_data(user, "client-certificate", path),
        key_file=_file_or_data(user, "client-key", path),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
    )


def _named(items: list[dict[str, Any]], name: str | None, what: str, path: Path) -> dict[str, Any]:
    for item in items:
        if name is None or item.get("name") == name:
            return dict(item.get(what, {}))
    raise ValueError(f"kubeconfig {path}: no {what} named {name!r}; check its current-context")


def _file_or_data(section: Mapping[str, Any], key: str, path: Path) -> str | None:
    if section.get(key):
        return str((path.parent / section[key]).resolve())
    data = section.get(f"{key}-data")
    if not data:
        return None
    fd, name = tempfile.mkstemp(prefix="kai-ray-", suffix=".pem")
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data))
    return name


class Kube:
    """One session to one API server. Use `async with Kube(config) as kube:`."""

    def __init__(self, config: KubeConfig, *, connections: int = 64) -> None:
        self.config = config
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Kube:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        headers = {"Accept": "application/json"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        connector = aiohttp.TCPConnector(limit=self._connections, ssl=self.config.ssl_context())
        self._session = aiohttp.ClientSession(
            base_url=self.config.server,
            headers=headers,
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

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
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else None
        async with self.session.request(
            method,
            path,
            data=data,
            params=params,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            payload = await resp.read()
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
        await self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", body, decode=False)

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
        async with self.session.get(
            path, params=query, timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout + 30)
        ) as resp:
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
