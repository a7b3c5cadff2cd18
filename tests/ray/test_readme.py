"""Every code block of the README runs, as a reader would run it: the Python and shell
blocks of the tour in order against a real multi-node Ray cluster, the YAML blocks
against the files and parsers they show, and the quick start's commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
QUICK_START = "./dev.sh"  # the block of the two commands a newcomer runs


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.lang})"


def readme_blocks() -> list[Block]:
    text = README.read_text()
    return [
        Block(m.group(1), m.group(2), text[: m.start()].count("\n") + 1)
        for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)
    ]


def test_every_block_is_one_this_file_runs() -> None:
    blocks = readme_blocks()
    assert blocks, "no code blocks found"
    assert {b.lang for b in blocks} <= {"python", "bash", "yaml"}, [str(b) for b in blocks]
    assert sum(QUICK_START in b.code for b in blocks) == 1


def _env(address: str) -> dict[str, str]:
    env = dict(os.environ, RAY_ADDRESS=address, PYTHONUNBUFFERED="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # kai-ray, python
    return env


def _run(block: Block, env: dict[str, str], timeout: float = 240) -> str:
    argv = [sys.executable, "-c", block.code] if block.lang == "python" else ["bash", "-euo", "pipefail"]
    done = subprocess.run(
        argv,
        input=None if block.lang == "python" else block.code,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"{block} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def _check_yaml(block: Block) -> None:
    first, _, rest = block.code.partition("\n")
    if first.startswith("# ") and (REPO / first[2:].strip()).is_file():  # a file, shown whole
        assert rest == (REPO / first[2:].strip()).read_text(), f"{block} differs from {first[2:]}"
        return
    from kai_ray.config import parse_queues

    assert parse_queues(list(yaml.safe_load_all(block.code))), f"{block}: no queues"


@pytest.mark.timeout(900)
def test_the_tour_runs_in_order(start_scheduler: Any, ray_cluster: Any) -> None:
    """Starting from a cluster without a scheduler, as a reader's would be."""
    env = _env(ray_cluster.address)
    outputs = []
    for block in readme_blocks():
        if QUICK_START in block.code:
            continue  # test_the_quick_start
        if block.lang == "yaml":
            _check_yaml(block)
        else:
            outputs.append(_run(block, env))
    text = "\n".join(outputs)
    assert "hello from a queued job" in text  # the queued Ray job ran and its logs were read
    assert "kai-ray scheduler already runs" in text  # the Python tour started it
    assert re.search(r"^hello: Succeeded", text, flags=re.M)  # job status
    assert "PASS" in text and "FAIL" not in text  # the scenarios
    assert '"allocate_ms"' in text or "allocate" in text  # the bench printed its JSON
    assert "/tmp/kai-ray-sim/report.html" in text  # the simulator wrote its report
    assert "expected to start in about 2h (run times: declared)" in text  # the forecast


@pytest.mark.timeout(600)
def test_the_quick_start() -> None:
    """`./dev.sh test` is what CI runs (.ci/run); `./dev.sh demo` runs here, whole."""
    (block,) = [b for b in readme_blocks() if QUICK_START in b.code]
    commands = [line.split("#")[0].strip() for line in block.code.splitlines() if line.strip()]
    assert commands == ["./dev.sh demo", "./dev.sh test"]
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^exec \./dev\.sh test$", ci, flags=re.M), "CI must run the README's test command"
    demo = subprocess.run(["bash", "-c", commands[0]], cwd=REPO, capture_output=True, text=True, timeout=540)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "done: " in demo.stdout and "preemption" in demo.stdout
