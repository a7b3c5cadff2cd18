"""A KAI-Scheduler snapshot as a scenario: what `load_scenario` gives for a scenario file
(the cluster, the scheduler's configuration, the clock; one round, no expectations), from
the zip KAI's scheduler serves or the JSON inside it (kai_ray.control.kaisnapshot reads
it), with the warnings for what it holds that kai-ray does not follow."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kai_ray.config.errors import ConfigError
from kai_ray.control.kaisnapshot import KaiSnapshot, KaiSnapshotError, read_kai_bytes
from kai_ray.scenario.loader import Scenario
from kai_ray.scenario.symbols import GpuSymbols

__all__ = ["KaiScenario", "kai_scenario", "load_kai_scenario"]


@dataclass(frozen=True, slots=True)
class KaiScenario:
    scenario: Scenario
    warnings: tuple[str, ...]


def load_kai_scenario(path: str | Path) -> KaiScenario:
    """The scenario of a KAI snapshot file; ConfigError naming the file otherwise."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the snapshot: {e.strerror}", path=path) from None
    try:
        kai = read_kai_bytes(raw)
    except KaiSnapshotError as e:
        raise ConfigError(str(e), path=path) from None
    return kai_scenario(kai, str(path))


def kai_scenario(kai: KaiSnapshot, file: str = "") -> KaiScenario:
    symbols = GpuSymbols()
    for node, devices in kai.devices.items():
        for symbol, _index in sorted(devices.items(), key=lambda item: item[1]):
            symbols.assign(node, symbol)  # in index order: each symbol gets its own device
    scenario = Scenario(
        file=file,
        name=Path(file).name if file else "KAI snapshot",
        source="a KAI-Scheduler snapshot",
        snapshot=kai.snapshot,
        config=kai.config,
        rounds=1,
        now=kai.now,
        expectations={},
        symbols=symbols,
    )
    return KaiScenario(scenario, kai.warnings)
