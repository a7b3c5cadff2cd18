"""Whether an autoscaler manages the Ray cluster, from the status Ray's monitor publishes
(read-only on every head without an autoscaling config)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")

from ray.experimental import internal_kv

from kai_ray.ray.upkeep import autoscaler_runs


@pytest.mark.parametrize(
    ("status", "env", "runs"),
    [
        pytest.param(None, None, False, id="no-status-yet"),
        pytest.param(
            {"autoscaler_report": {"node_type_mapping": {"ab12": "node_ab12"}}}, None, False, id="read-only"
        ),
        pytest.param(
            {"autoscaler_report": {"node_type_mapping": {"ab12": "ray.head.default", "cd34": "gpu-node"}}},
            None,
            True,
            id="configured-node-types",
        ),
        pytest.param(None, "1", True, id="forced-on"),
        pytest.param(
            {"autoscaler_report": {"node_type_mapping": {"ab12": "gpu-node"}}}, "0", False, id="forced-off"
        ),
    ],
)
def test_autoscaler_detection(
    monkeypatch: pytest.MonkeyPatch, status: dict | None, env: str | None, runs: bool
) -> None:
    raw = None if status is None else json.dumps(status).encode()
    monkeypatch.setattr(internal_kv, "_internal_kv_get", lambda key, **_: raw)
    if env is None:
        monkeypatch.delenv("KAI_RAY_AUTOSCALING", raising=False)
    else:
        monkeypatch.setenv("KAI_RAY_AUTOSCALING", env)
    assert autoscaler_runs() is runs
