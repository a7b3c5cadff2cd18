"""`kai-ray bench k8s --shape`: each of KAI's scale-test shapes, small, end to end on the
real kube-apiserver with kai-ray's operator as a process of its own; and `--kai-bin`: its
checks before anything starts, and the comparison's plumbing with stand-in binaries (no
KAI binary is built or held here: the real comparison needs the user's own)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.bench.k8sschedulers import KAI_BINARIES, KAI_CRDS, KaiBinError
from kai_ray.bench.k8sshapes import plan_shape, run_shape
from kai_ray.cli import main

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(180)]


def test_topology_job_lands_whole_in_the_one_zone_that_fits() -> None:
    out = run_shape("topology-512", pods=16)
    assert out["zone_that_fits"] == ["zone-c"]
    ours = out["kai_ray"]
    assert (ours["bound"], ours["bound_before_last_created"]) == (16, 0)
    assert ours["zones_used"] == {"zone-c": 16}
    assert ours["seconds"] > 0


def test_reclaim_evicts_filler_pods_and_binds_the_whole_gang() -> None:
    out = run_shape("reclaim-250", pods=2)
    assert (out["nodes"], out["fill_pods"]) == (4, 32)
    ours = out["kai_ray"]
    assert (ours["bound"], ours["bound_before_last_created"], ours["gang_nodes"]) == (2, 0, 2)
    assert ours["evicted"] >= 2 * 8  # two whole nodes of one-GPU filler pods
    assert 0 < ours["first_eviction_s"] <= ours["seconds"]


def test_each_unschedulable_pod_is_told_why() -> None:
    out = run_shape("unschedulable-1000", pods=12, nodes=2)
    ours = out["kai_ray"]
    assert (ours["told"], ours["bound"]) == (12, 0)
    assert ours["reasons"] == {"too-big": {"Unschedulable": 6}, "no-node": {"Unschedulable": 6}}
    assert "cannot fit" in ours["messages"]["too-big/Unschedulable"]
    assert "nodeSelector bench.kai-ray.io/pool=none" in ours["messages"]["no-node/Unschedulable"]


def test_gangs_of_each_size_bound_whole() -> None:
    out = run_shape("gangs", gangs=(2, 4, 8), nodes=2)
    ours = out["kai_ray"]
    for size in (2, 4, 8):
        assert (ours[f"gang{size}"]["bound"], ours[f"gang{size}"]["bound_before_last_created"]) == (size, 0)


def test_sizes_that_do_not_make_the_shape_are_refused() -> None:
    with pytest.raises(ValueError, match="give --pods, not --nodes"):
        plan_shape("reclaim-250", nodes=10)
    with pytest.raises(ValueError, match="give more --nodes"):
        plan_shape("gangs", gangs=(64,), nodes=2)
    layout = plan_shape("topology-512")
    assert (len(layout.nodes), layout.zones) == (
        512,
        {"zone-a": 112, "zone-b": 112, "zone-c": 176, "zone-d": 112},
    )


# ---------------------------------------------------------------- --kai-bin


def _crds(folder: Path) -> None:
    """Schemaless CRDs under KAI's names (the checks read only their names)."""
    (folder / "crds").mkdir()
    for name in KAI_CRDS:
        plural, group = name.split(".", 1)
        kind = {"queues": "Queue", "podgroups": "PodGroup", "bindrequests": "BindRequest"}.get(
            plural, "Topology"
        )
        version = {"queues": "v2", "podgroups": "v2alpha2", "bindrequests": "v1alpha2"}.get(
            plural, "v1alpha1"
        )
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": group,
                "scope": "Cluster" if plural in ("queues", "topologies") else "Namespaced",
                "names": {
                    "kind": kind,
                    "plural": plural,
                    "singular": kind.lower(),
                    "listKind": f"{kind}List",
                },
                "versions": [
                    {
                        "name": version,
                        "served": True,
                        "storage": True,
                        "subresources": {"status": {}},
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
        (folder / "crds" / f"{name}.yaml").write_text(yaml.safe_dump(crd))


def _binary(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda d: None, "scheduler not found: put KAI-Scheduler's `scheduler` binary there"),
        (lambda d: [(d / b).write_text("") for b in KAI_BINARIES], "scheduler is not executable: chmod +x"),
        (
            lambda d: [_binary(d / b, "#!/bin/sh\n") for b in KAI_BINARIES],
            "crds holds no CRD queues.scheduling.run.ai, podgroups.scheduling.run.ai",
        ),
    ],
    ids=["no binary", "not executable", "no CRDs"],
)
def test_kai_bin_names_what_is_missing_before_anything_starts(tmp_path: Path, make: Any, words: str) -> None:
    make(tmp_path)
    with pytest.raises(KaiBinError, match=re.escape(words)):
        run_shape("gangs", gangs=(2,), nodes=1, kai_bin=tmp_path)


def test_kai_bin_error_is_the_commands_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "k8s", "--shape", "gangs", "--kai-bin", str(tmp_path / "none")])
    assert "--kai-bin" in str(exit_.value) and "no such folder" in str(exit_.value)
    with pytest.raises(SystemExit, match="--kai-bin runs with --shape NAME"):
        main(["bench", "k8s", "--kai-bin", str(tmp_path)])


# A stand-in for KAI's scheduler, to test the comparison's plumbing only (KUBECONFIG, the
# flags, the figures and the ratio): it binds every pod of the bench namespace it sees.
STAND_IN = """#!{python}
import asyncio, os
from kai_ray.k8s.client import Kube, load_kubeconfig

async def main():
    async with Kube(load_kubeconfig(os.environ["KUBECONFIG"])) as kube:
        while True:
            for pod in (await kube.get("/api/v1/namespaces/bench/pods"))["items"]:
                if not pod["spec"].get("nodeName"):
                    await kube.bind("bench", pod["metadata"]["name"], "node-0000")
            await asyncio.sleep(0.05)

asyncio.run(main())
"""


def test_kai_bin_runs_the_binaries_and_prints_both_figures_and_their_ratio(tmp_path: Path) -> None:
    _crds(tmp_path)
    _binary(tmp_path / "scheduler", STAND_IN.format(python=sys.executable))
    for name in ("binder", "podgrouper"):
        _binary(tmp_path / name, "#!/bin/sh\nexec sleep 600\n")
    out = run_shape("gangs", gangs=(2, 4), nodes=2, kai_bin=tmp_path)
    assert out["kai"]["gang4"]["bound"] == 4
    assert set(out["kai_over_kai_ray"]) == {"gang2", "gang4"}
    assert any(f.startswith("--listen-address=127.0.0.1:") for f in out["kai"]["flags"]["scheduler"])


def test_a_kai_binary_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    _crds(tmp_path)
    for name in KAI_BINARIES:
        _binary(tmp_path / name, "#!/bin/sh\nexec sleep 600\n")
    _binary(tmp_path / "binder", "#!/bin/sh\necho 'unknown flag: --qps' >&2\nexit 3\n")
    with pytest.raises(RuntimeError, match=r"(?s)kai binder exited \(3\).*unknown flag: --qps"):
        run_shape("gangs", gangs=(2,), nodes=1, kai_bin=tmp_path)
