"""The mutating webhook's HTTPS server (the API server calls it for every pod created):
it answers with kai_ray.k8s.sharing.mutate."""

from __future__ import annotations

import ssl
from collections.abc import Collection

from aiohttp import web

from kai_ray.k8s.sharing import mutate

__all__ = ["start_webhook"]


async def start_webhook(
    port: int, cert: str, key: str, scheduler_names: Collection[str], host: str = "0.0.0.0"
) -> web.AppRunner:
    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        return web.json_response(mutate(review, scheduler_names))

    app = web.Application()
    app.router.add_post("/mutate", handle)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=context).start()
    return runner
