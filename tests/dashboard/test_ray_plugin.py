"""`kai-ray dashboard install-plugin`: on a real Ray head started after the install, Ray's
own dashboard serves kai-ray's page and API under /kai-ray/, on its port and behind its
auth; `uninstall-plugin` removes it. (Here, not in tests/ray: it needs a head of its own,
started once the plugin is in place, before the shared cluster of tests/ray starts.)"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from ..browser import browser, open_page, shot  # noqa: F401

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_auth_headers() -> dict[str, str]:
    from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled

    return dict(get_auth_headers_if_auth_enabled({}))


def fetch(url: str, headers: dict[str, str], method: str = "GET") -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, headers=headers, data=b"{}" if method != "GET" else None)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@contextlib.contextmanager
def ray_token_auth() -> Iterator[str]:
    """Ray's token auth on for the clusters started inside (RAY_AUTH_MODE=token, the token
    in RAY_AUTH_TOKEN), and off again after, for the tests that follow."""
    from ray._private.authentication_test_utils import reset_auth_token_state

    token = secrets.token_hex(16)
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    reset_auth_token_state()
    try:
        yield token
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_auth_token_state()


@pytest.fixture(scope="module")
def ray_head_with_plugin() -> Iterator[str]:
    from ray.cluster_utils import Cluster

    from kai_ray.ray.dashboard_plugin import plugin_dir

    cli = [sys.executable, "-m", "kai_ray.cli", "dashboard"]
    done = subprocess.run([*cli, "install-plugin"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert plugin_dir().is_dir()
    port = free_port()
    with ray_token_auth():
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 2, "num_gpus": 2, "include_dashboard": True, "dashboard_port": port},
        )
        try:
            ray.init(address=cluster.address)
            yield f"http://127.0.0.1:{port}"
        finally:
            import kai_ray

            kai_ray.shutdown_scheduler()
            ray.shutdown()
            cluster.shutdown()
    done = subprocess.run([*cli, "uninstall-plugin"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not plugin_dir().exists()


def test_rays_dashboard_serves_the_kai_ray_page_and_api(ray_head_with_plugin: str, browser: Any) -> None:  # noqa: F811
    import kai_ray

    base = ray_head_with_plugin
    kai_ray.init(queues=[{"name": "ml", "resources": {"gpu": {"quota": 2}}}])
    headers = ray_auth_headers()
    assert headers, "Ray's token auth should be on in this cluster"
    status, body = fetch(f"{base}/kai-ray/api/v1/queues", headers)
    assert status == 200, body
    assert [q["name"] for q in json.loads(body)["items"]] == ["ml"]
    assert fetch(f"{base}/kai-ray/api/v1/queues", {})[0] == 401  # Ray's auth, before kai-ray's page
    assert fetch(f"{base}/kai-ray/api/v1/queues", headers, method="POST")[0] in (403, 405)

    context = browser.new_context()
    token = headers.get("Authorization", headers.get("authorization", "")).removeprefix("Bearer ")
    # The cookie Ray's own dashboard sets once a person has given the token.
    context.add_cookies([{"name": "ray-authentication-token", "value": token, "url": base}])
    page = context.new_page()
    open_page(page, f"{base}/kai-ray/", "queues")
    assert page.locator("tr[data-queue='ml']").count() == 1
    page.wait_for_selector("#live.on", timeout=15_000)  # the live stream, through Ray's dashboard
    shot(page, "ray-dashboard-plugin")
    context.close()


def test_the_schedulers_own_dashboard_takes_rays_token_when_listening_wider(
    ray_head_with_plugin: str,
) -> None:
    import kai_ray

    sched = kai_ray.init()
    info = sched.serve_dashboard("0.0.0.0", 0)  # no token of its own: Ray's is required
    assert info["token_required"]
    url = f"http://127.0.0.1:{info['port']}/api/v1/summary"
    assert fetch(url, {})[0] == 401
    assert fetch(url, {"Authorization": "Bearer not-rays"})[0] == 401
    assert fetch(url, ray_auth_headers())[0] == 200
    sched.serve_dashboard("127.0.0.1", 0)


def test_uninstall_refuses_a_folder_it_did_not_write(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from kai_ray.ray import dashboard_plugin

    foreign = tmp_path / "kai_ray_plugin"
    foreign.mkdir()
    (foreign / "__init__.py").write_text("# someone else's\n")
    monkeypatch.setattr(dashboard_plugin, "plugin_dir", lambda: foreign)
    with pytest.raises(FileExistsError, match="was not written by"):
        dashboard_plugin.uninstall_plugin()
    assert foreign.exists()
    monkeypatch.setattr(dashboard_plugin, "plugin_dir", lambda: tmp_path / "absent")
    assert dashboard_plugin.uninstall_plugin() is False
