"""`kai-ray demo --kubernetes` as a newcomer runs it: the story told in order, and every
process it started gone when it ends, by itself or on Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(360)]

STORY = [
    "components ready in",
    "applied queue team",
    "training runs: its gang holds all 8 GPUs",
    "applied RayService serve",
    "kai-ray preempted the training: RayCluster train suspended whole",
    "the service's pods are bound and Running; its application is RUNNING",
    "the service answers: POST / with 64 features -> 8 outputs",
    "deleted RayService serve",
    "the training resumed",
    "done; stopping everything",
]


def _demo(port: int, *more: str, sigint_ignored: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kai_ray.cli", "demo", "--kubernetes", "--quick", "--port", str(port), *more],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # As a non-interactive shell starts a command it runs in the background (`cmd &`):
        # with SIGINT ignored, which the process inherits.
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
    )


def _workdir(line: str) -> str | None:
    found = re.search(r"logs in (\S+)", line)
    return found.group(1) if found else None


def _left(workdir: str) -> list[str]:
    """Processes still running that were started in the demo's folder, and live Ray's
    network namespaces."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if workdir in line or " netns exec kr" in line] + [
        f"netns {line}" for line in spaces.splitlines() if line.startswith("kr")
    ]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_kubernetes_demo_tells_the_story_and_leaves_nothing_running(apiserver_built: str) -> None:
    """With live Ray in the pods (the default): the service answers a request."""
    started = time.time()
    proc = _demo(_free_port())
    out, _ = proc.communicate(timeout=280)
    print(f"demo took {time.time() - started:.1f}s")
    assert proc.returncode == 0, out
    at = [out.find(line) for line in STORY]
    assert -1 not in at and at == sorted(at), out
    assert "Traceback" not in out and "Task was destroyed" not in out, out
    workdir = next(w for w in map(_workdir, out.splitlines()) if w)
    assert _left(workdir) == [] and not Path(workdir).exists()


@pytest.mark.parametrize(
    ("at", "sigint_ignored"),
    [
        ("training runs", False),
        ("applied RayService serve", True),
        ("kai-ray preempted the training", True),
    ],
)
def test_ctrl_c_stops_everything_the_demo_started(
    apiserver_built: str, at: str, sigint_ignored: bool
) -> None:
    """Without live Ray (--no-ray), as fast as it goes; interrupted at a point of its story,
    also when started the way a background job is, with SIGINT ignored."""
    proc = _demo(_free_port(), "--no-ray", sigint_ignored=sigint_ignored)
    assert proc.stdout is not None
    workdir = None
    for line in proc.stdout:
        workdir = workdir or _workdir(line)
        if at in line:
            break
    assert workdir is not None and _left(workdir)  # the components run
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, rest
    assert "interrupted: everything this demo started is stopped" in rest
    assert _left(workdir) == [] and not Path(workdir).exists()
