"""The dashboard of the Ray scheduler actor: served on the actor's own event loop from
its Controller, accepting Ray's token where Ray runs with token auth, and published in
Ray's GCS key-value store (its URL and an internal token) so that `kai-ray dashboard`
and Ray's dashboard plugin find it.

Where it listens is kept in a key of its own, so a restarted scheduler listens
the same way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kai_ray.control import Controller
from kai_ray.dashboard import DEFAULT_PORT, DashboardServer, Feed, access_for, board_from_controller
from kai_ray.dashboard.grafana import FILE_NAME, grafana_dashboard
from kai_ray.ray.translate import NODE_ID_LABEL, short_node_ids

__all__ = [
    "KV_KEY",
    "KV_NAMESPACE",
    "RayDashboard",
    "grafana_folder",
    "published",
    "ray_token_check",
    "write_grafana_dashboard",
]

log = logging.getLogger(__name__)
KV_NAMESPACE = b"kai-ray"
KV_KEY = b"dashboard"
SETTINGS_KEY = b"dashboard-settings"  # where it was told to listen (kept across restarts)


def ray_token_check() -> Callable[[str], bool] | None:
    """Ray's own token check, where Ray runs with token auth (RAY_AUTH_MODE=token)."""
    try:
        from ray._private.authentication import authentication_utils as auth
    except ImportError:  # a Ray without token auth
        return None
    if not auth.is_token_auth_enabled():
        return None
    return lambda token: bool(auth.validate_request_token(f"Bearer {token}"))


def published() -> dict[str, Any] | None:
    """What the scheduler published of its dashboard ({"url", "internal", ...})."""
    return _kv_get(KV_KEY)


def _kv_get(key: bytes) -> dict[str, Any] | None:
    from ray.experimental import internal_kv

    raw = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
    return json.loads(raw) if raw else None


def _kv_put(key: bytes, value: dict[str, Any]) -> None:
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(key, json.dumps(value), overwrite=True, namespace=KV_NAMESPACE)


def grafana_folder() -> Path | None:
    """Where Ray keeps this session's Grafana dashboards (it points the Grafana behind its
    Metrics tab there); None outside a Ray worker on the head."""
    try:
        import ray

        session = ray._private.worker.global_worker.node.get_session_dir_path()
    except Exception:  # not inside a Ray worker
        return None
    return Path(session) / "metrics" / "grafana" / "dashboards"


def write_grafana_dashboard() -> Path | None:
    """kai-ray's Grafana dashboard beside Ray's own (best effort: a read-only session
    folder only costs the file; `kai-ray dashboard grafana` prints it anyway)."""
    folder = grafana_folder()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / FILE_NAME
        path.write_text(json.dumps(grafana_dashboard(), indent=2) + "\n")
    except OSError as exc:
        log.warning("could not write the Grafana dashboard into %s: %s", folder, exc)
        return None
    return path


def _short(text: str) -> str:
    return str(short_node_ids({"reason": text, "history": []})["reason"])


class RayDashboard:
    def __init__(self, engine: Controller) -> None:
        self.engine = engine
        self.feed = Feed(self._board)
        self.server: DashboardServer | None = None
        saved = _kv_get(SETTINGS_KEY)
        self.settings: dict[str, Any] = saved or {"host": "127.0.0.1", "port": DEFAULT_PORT, "token": None}

    def _board(self) -> Any:
        return board_from_controller(
            self.engine,
            time.time(),
            backend="ray",
            display=lambda node_id: node_id[:12],
            hidden_labels=(NODE_ID_LABEL,),
            text=_short,
        )

    async def start(self) -> str:
        """Listen as the settings say; a setting that cannot be honoured (a wide listen
        whose token went away) falls back to 127.0.0.1, said in the log."""
        write_grafana_dashboard()
        try:
            return await self.listen(self.settings["host"], self.settings["port"], self.settings["token"])
        except (ValueError, OSError) as exc:
            log.warning("dashboard: %s; listening on 127.0.0.1 instead", exc)
            return await self.listen("127.0.0.1", DEFAULT_PORT, None)

    async def listen(self, host: str, port: int, token: str | None) -> str:
        """(Re)start the server on host:port. Raises DashboardAccessError (a ValueError)
        for a wide listen without a token, OSError for a port that is taken; the server
        that ran before keeps running then."""
        access = access_for(host, token, ray_token_check())
        old = self.server
        same_port = old is not None and (old.host, old.port) == (host, port)
        if old is not None and same_port:
            await old.stop()  # the new one needs its port
        server = DashboardServer(self.feed, access, host, port)
        try:
            url = await server.start()
        except OSError:
            if old is not None and same_port:
                await old.start()
            raise
        if old is not None and not same_port:
            await old.stop()
        self.server = server
        self.settings = {"host": host, "port": port, "token": token}
        _kv_put(SETTINGS_KEY, self.settings)
        self._publish()
        log.info("kai-ray dashboard: %s", url)
        return url

    def _publish(self) -> None:
        assert self.server is not None
        _kv_put(KV_KEY, {**self.info(), "internal": self.server.access.internal})

    def info(self) -> dict[str, Any]:
        if self.server is None:
            return {"url": None}
        return {
            "url": self.server.url,
            "host": self.server.host,
            "port": self.server.port,
            "token_required": self.server.access.required,
            "rays_token_accepted": self.server.access.also is not None,  # Ray runs with token auth
        }
