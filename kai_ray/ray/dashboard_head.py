"""kai-ray's page on Ray's own dashboard: a Ray dashboard head module that serves the
kai-ray pages and API under /kai-ray/ on the Ray dashboard's port, behind its auth.

Ray 2.60 loads head modules only from its own package (ray.dashboard.modules; no
plugin entry point), so `kai-ray dashboard install-plugin` puts a two-line module there
that imports this one, and `uninstall-plugin` removes it. This module forwards each GET
to the scheduler's own dashboard, found through what the scheduler published in Ray's
key-value store, with the internal token published beside it: Ray's dashboard has
already checked the caller against Ray's auth.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import ray.dashboard.optional_utils as optional_utils
import ray.dashboard.utils as dashboard_utils
from aiohttp import web

__all__ = ["PREFIX", "KaiRayHead"]

PREFIX = "/kai-ray"
_KV_NAMESPACE = b"kai-ray"  # kai_ray.ray.dashboard's, repeated: this module loads inside Ray's dashboard
_KV_KEY = b"dashboard"
_PASS_HEADERS = ("Content-Type", "Cache-Control")
routes = optional_utils.DashboardHeadRouteTable


class KaiRayHead(dashboard_utils.DashboardHeadModule):
    def __init__(self, config: dashboard_utils.DashboardHeadModuleConfig) -> None:
        super().__init__(config)
        self._session: aiohttp.ClientSession | None = None

    async def run(self) -> None:
        pass

    @staticmethod
    def is_minimal_module() -> bool:
        return False

    async def _published(self) -> dict[str, Any] | None:
        from ray.experimental import internal_kv

        self.gcs_client  # noqa: B018 - connects internal_kv to this cluster's GCS
        raw = await asyncio.get_running_loop().run_in_executor(
            None, lambda: internal_kv._internal_kv_get(_KV_KEY, namespace=_KV_NAMESPACE)
        )
        return json.loads(raw) if raw else None

    @routes.get(PREFIX)
    async def _root(self, req: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{PREFIX}/")

    @routes.get(PREFIX + "/")
    async def _page(self, req: web.Request) -> web.StreamResponse:
        return await self._forward(req, "")

    @routes.get(PREFIX + "/{tail:.+}")
    async def _rest(self, req: web.Request) -> web.StreamResponse:
        return await self._forward(req, req.match_info["tail"])

    async def _forward(self, req: web.Request, tail: str) -> web.StreamResponse:
        info = await self._published()
        if not info or not info.get("url"):
            return web.json_response(
                {
                    "error": "no kai-ray scheduler has published a dashboard on this cluster; start one "
                    "with `kai-ray start` (or kai_ray.init())"
                },
                status=503,
            )
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        url = info["url"] + tail + (f"?{req.query_string}" if req.query_string else "")
        headers = {"Authorization": f"Bearer {info['internal']}"}
        try:
            async with self._session.get(url, headers=headers) as upstream:
                out = web.StreamResponse(
                    status=upstream.status,
                    headers={h: upstream.headers[h] for h in _PASS_HEADERS if h in upstream.headers},
                )
                await out.prepare(req)
                async for chunk in upstream.content.iter_any():  # the event stream too
                    await out.write(chunk)
                await out.write_eof()
                return out
        except aiohttp.ClientError as exc:
            return web.json_response(
                {
                    "error": f"the kai-ray scheduler's dashboard at {info['url']} did not answer ({exc}); "
                    "is the scheduler running? (`kai-ray status`)"
                },
                status=502,
            )
