"""A real headless Chromium for the web UI tests: Debian's `chromium` (installed here
when missing, as root, as ./dev.sh test does), driven by Playwright's Python package
with `executable_path` (Playwright's own browser download does not work here).
Screenshots go to build/test-artifacts/ (KAI_RAY_ARTIFACTS overrides)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("KAI_RAY_ARTIFACTS", REPO / "build" / "test-artifacts"))


def chromium() -> str:
    path = os.environ.get("KAI_RAY_CHROMIUM") or shutil.which("chromium")
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=False, capture_output=True)
        path = shutil.which("chromium")
    if path is None:
        pytest.fail("no chromium: install Debian's (apt-get install chromium) or set KAI_RAY_CHROMIUM")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        yield b
        b.close()


def shot(page: Any, name: str) -> Path:
    """Keep a screenshot of the page as a test artifact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    return path


def open_page(page: Any, url: str, name: str) -> None:
    """Go to one of the dashboard's pages and wait until it has drawn."""
    page.goto(f"{url}#/{name}")
    page.wait_for_selector(f"body[data-rendered='{name}']", timeout=30_000)
