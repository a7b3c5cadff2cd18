"""The snapshot file: written from a controller, read back, replayed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kai_ray.cli import main
from kai_ray.control import Controller
from kai_ray.control.memory import ManualClock, MemoryExecutor, MemoryNodes, MemoryStore
from kai_ray.control.snapshotfile import (
    SNAPSHOT_VERSION,
    SnapshotFormatError,
    build_snapshot,
    read_snapshot,
    write_snapshot,
)
from kai_ray.control.workload import WorkloadSpec
from kai_ray.core import (
    ClusterSnapshot,
    Evict,
    JobInfo,
    NodeInfo,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    run_cycle,
)
from kai_ray.sim.cluster import parse_cluster
from kai_ray.sim.snapshot import decisions_json, replay


def _controller() -> Controller:
    """Queue a borrows the whole 8-GPU node; b then asks for its quota: a reclaim."""
    queues = [QueueInfo(name="a", quota=(4, 0, 0)), QueueInfo(name="b", quota=(4, 0, 0))]
    clock = ManualClock(100.0)
    ctl = Controller(MemoryNodes(parse_cluster("1x8")), MemoryExecutor(), MemoryStore(), clock, queues)
    ctl.submit("big", WorkloadSpec(queue="a", workers=2, resources_per_worker={"GPU": 4}))
    ctl.step()
    ctl.step()  # its group is ready: running
    clock.advance(10)
    ctl.submit("small", WorkloadSpec(queue="b", resources_per_worker={"GPU": 4}))
    return ctl


def _document(ctl: Controller) -> dict[str, object]:
    snap = build_snapshot(ctl.workloads.values(), ctl.nodes.values(), ctl.queues, ctl.node_label)
    return write_snapshot(snap, ctl.config, ctl.clock.now(), "test")


def test_a_snapshot_round_trips_through_json() -> None:
    ctl = _controller()
    doc = json.loads(json.dumps(_document(ctl)))
    assert doc["format"] == "kai-ray-snapshot" and doc["version"] == SNAPSHOT_VERSION
    back = read_snapshot(doc)
    original = build_snapshot(ctl.workloads.values(), ctl.nodes.values(), ctl.queues, ctl.node_label)
    assert back.snapshot == original
    assert back.config == ctl.config
    assert back.now == 110.0


def test_replay_decides_what_the_scheduler_decides() -> None:
    ctl = _controller()
    snap = read_snapshot(json.loads(json.dumps(_document(ctl))))
    live = build_snapshot(ctl.workloads.values(), ctl.nodes.values(), ctl.queues, ctl.node_label)
    expected = run_cycle(live, ctl.config, 110.0)
    assert replay(snap).decisions == expected.decisions
    assert any(isinstance(d, Evict) and d.action == "reclaim" for d in expected.decisions)


def test_replay_with_another_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ctl = _controller()
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(_document(ctl)))
    config = tmp_path / "no-reclaim.yaml"
    config.write_text("actions: [allocate]\n")
    assert main(["sim", "--snapshot", str(path), "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert [e["job"] for e in own["evict"]] == ["big", "big"]
    assert main(["sim", "--snapshot", str(path), "--config", str(config), "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "0 binds, 0 evictions" in text
    assert "small: [no-room]" in text
    written = json.loads((tmp_path / "o" / "decisions.json").read_text())
    assert written["waiting"]["small"]["code"] == "no-room"
    assert decisions_json(replay(read_snapshot(_document(ctl))))["evict"] == own["evict"]


def test_a_growing_cluster_and_its_preemption_delay_travel_with_the_snapshot() -> None:
    """Saved where an autoscaler may add nodes, replayed with the delay: the reclaim waits."""
    ctl = _controller()
    snap = build_snapshot(
        ctl.workloads.values(), ctl.nodes.values(), ctl.queues, ctl.node_label, can_grow=True
    )
    config = dataclasses.replace(ctl.config, preemption_delay_s=60.0)
    back = read_snapshot(json.loads(json.dumps(write_snapshot(snap, config, 110.0, "test"))))
    assert back.snapshot.can_grow and back.config.preemption_delay_s == 60.0
    waiting = replay(back)
    assert not waiting.decisions and waiting.waiting["small"].code == "preemption-delay"
    older = _document(ctl)
    del older["can_grow"]  # a file saved before the field existed
    assert not read_snapshot(older).snapshot.can_grow


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"can_grow": "yes"}, "can_grow: must be true or false"),
        ({"format": "something"}, "format: not a kai-ray snapshot"),
        ({"version": 99}, "version: 99 is not supported"),
        ({"nodes": [{"name": "n", "gpu": 8}]}, r"nodes\[0\].gpu: unknown field"),
        ({"now": "soon"}, "now: must be"),
    ],
)
def test_a_bad_snapshot_names_the_field(change: dict[str, object], expected: str) -> None:
    doc = {**_document(_controller()), **change}
    with pytest.raises(SnapshotFormatError, match=expected):
        read_snapshot(doc)


def test_a_bad_snapshot_file_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    path.write_text("{not json")
    assert main(["sim", "--snapshot", str(path)]) == 2
    assert f"{path}: line 1: not JSON" in capsys.readouterr().err


class _FakeScheduler:
    """Stands in for the Ray client: answers `snapshot()` as the actor does."""

    def __init__(self, document: dict[str, object]) -> None:
        self.document = document

    def snapshot(self) -> dict[str, object]:
        return self.document


def test_snapshot_save_writes_what_sim_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kai_ray.api import snapshotcommands

    document = _document(_controller())
    monkeypatch.setattr(snapshotcommands, "running_scheduler", lambda address: _FakeScheduler(document))
    path = tmp_path / "state.json"
    assert main(["snapshot", "save", str(path)]) == 0
    assert "1 nodes, 2 queues, 2 live workloads" in capsys.readouterr().out
    assert json.loads(path.read_text()) == json.loads(json.dumps(document))
    assert main(["sim", "--snapshot", str(path)]) == 0
    assert "evict    big/w0" in capsys.readouterr().out


def test_snapshot_save_names_a_missing_kubeconfig(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert (
        main(["snapshot", "save", str(tmp_path / "x.json"), "--kubeconfig", str(tmp_path / "no.yaml")]) == 2
    )
    assert "no.yaml does not exist; pass an existing file to --kubeconfig" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_the_ray_actor_answers_with_a_snapshot_sim_reads() -> None:
    """The scheduler actor's method on its controller (no Ray cluster needed to call it)."""
    import asyncio
    import types

    pytest.importorskip("ray")
    from kai_ray.ray import actor

    ctl = _controller()
    method = actor.SchedulerActor.__ray_metadata__.modified_class.snapshot  # type: ignore[attr-defined]
    document = asyncio.run(method(types.SimpleNamespace(engine=ctl)))
    back = read_snapshot(json.loads(json.dumps(document)))
    assert document["source"] == "ray"
    live = build_snapshot(ctl.workloads.values(), ctl.nodes.values(), ctl.queues, ctl.node_label)
    assert back.snapshot == live and back.config == ctl.config


def test_sim_tells_a_placement_taken_back_in_its_cycle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Allocate places j on the one free GPU; preempt takes it back, with train, for the
    inference gang that needs both: sim lists j under take_back, neither bound nor
    evicted, and j waits with the reason taken-back."""
    gpu = Request(gpu=1)
    snap = ClusterSnapshot(
        nodes=[NodeInfo("n0", gpus=2)],
        queues=[QueueInfo(name="q", quota=(2, 0, 0))],
        jobs=[
            JobInfo("train", "q", [TaskInfo("train-0", TaskStatus.RUNNING, gpu, "n0", since=-600)]),
            JobInfo(
                "serve",
                "q",
                [TaskInfo(f"serve-{i}", TaskStatus.PENDING, gpu) for i in range(2)],
                priority=125,
            ),
            JobInfo("j", "q", [TaskInfo("j-0", TaskStatus.PENDING, gpu)]),
        ],
    )
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(write_snapshot(snap, SchedulerConfig(), 0.0, "test")))
    assert main(["sim", "--snapshot", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(t["job"], t["task"], t["action"]) for t in out["take_back"]] == [("j", "j-0", "preempt")]
    assert all(d["job"] != "j" for d in out["bind"] + out["evict"] + out["pipeline"])
    assert [e["job"] for e in out["evict"]] == ["train"]
    assert out["waiting"]["j"]["code"] == "taken-back"
    assert main(["sim", "--snapshot", str(path)]) == 0
    assert (
        "take back j/j-0 from n0, never started (preempt: preempted by serve in q)" in capsys.readouterr().out
    )


def test_gpu_types_round_trip_through_a_snapshot() -> None:
    """Typed nodes, a queue's per-type figures and fungibility, and a job's accepted
    types come back as they were written (docs/gpu-types.md)."""
    from kai_ray.core import GpuTypeFungibility, GpuTypeShare

    snap = ClusterSnapshot(
        [NodeInfo("h0", gpus=8, gpu_type="H100"), NodeInfo("a0", gpus=8, gpu_type="A100")],
        [
            QueueInfo(
                "a",
                quota=(8, 0, 0),
                gpu_types=(GpuTypeShare("H100", 4.0, 8.0, 2.0),),
                gpu_type_fungibility=GpuTypeFungibility("TryNextType", "Preempt"),
            ),
            QueueInfo("b"),
        ],
        [
            JobInfo(
                "j",
                "a",
                [TaskInfo("j-0", TaskStatus.PENDING, Request(gpu=1))],
                gpu_types=("H100", "A100"),
                mixed_gpu_types=True,
            )
        ],
    )
    doc = json.loads(json.dumps(write_snapshot(snap, SchedulerConfig(), 0.0, "test")))
    assert read_snapshot(doc).snapshot == snap
    doc["queues"][0]["gpu_type_fungibility"]["when_can_prempt"] = "Preempt"
    with pytest.raises(SnapshotFormatError, match=r"queues\[0\]\.gpu_type_fungibility\.when_can_prempt"):
        read_snapshot(doc)
    del doc["queues"][0]["gpu_type_fungibility"]["when_can_prempt"]
    doc["jobs"][0]["gpu_types"] = "H100"
    with pytest.raises(SnapshotFormatError, match=r"jobs\[0\]\.gpu_types: must be a list"):
        read_snapshot(doc)
