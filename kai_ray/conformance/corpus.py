"""The corpus on disk: three files per state (docs/conformance.md).

- `NAME.yaml`: the state in kai-ray's scenario format;
- `NAME.kai-snapshot.json`: the same state as KAI-Scheduler reads it (`kaiwrite`);
- `NAME.kai.json`: what KAI decided, per job and task in the scenario's order.

A state's name says how it was drawn, so anyone can draw it again:
`SET-sSEED-INDEX` for one session (SET a feature, or `mix` for two or three of them),
`multi-sSEED-INDEX-tK` for session K of a cluster followed over several sessions,
`bigFEATURE-sSEED-INDEX` for a state of that feature 100 times the size (timed beside
KAI: `kai-ray bench cycle --scenario`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kai_ray.conformance.generate import FEATURES, State, draw_state, state_rng
from kai_ray.conformance.kaiwrite import kai_snapshot
from kai_ray.conformance.sessions import GAP_S, Decision, advance

__all__ = [
    "FIRST_NOW",
    "StateName",
    "decision_of",
    "first_state",
    "in_flight_of",
    "next_state",
    "now_of",
    "parse_name",
    "read_state",
    "record",
    "write_state",
]

# The clock of every first session (2026-11-27T00:00:00Z): a fixed time, so a state
# written again is the same file.
FIRST_NOW = 1_795_737_600.0
BIG = 100  # how much bigger a big state is
_NAME = re.compile(r"^(?P<set>[a-z]+)-s(?P<seed>\d+)-(?P<index>\d+)(?:-t(?P<session>\d+))?$")


class StateName:
    def __init__(self, set_name: str, seed: int, index: int, session: int | None = None) -> None:
        self.set, self.seed, self.index, self.session = set_name, seed, index, session

    def __str__(self) -> str:
        base = f"{self.set}-s{self.seed}-{self.index}"
        return base if self.session is None else f"{base}-t{self.session}"

    @property
    def key(self) -> str:
        return f"{self.set}/{self.seed}/{self.index}"

    @property
    def scale(self) -> int:
        return BIG if self.set.startswith("big") else 1

    @property
    def features(self) -> frozenset[str]:
        """One feature for a feature's set (big ones too); two or three, drawn, for `mix`
        and `multi`."""
        if self.set in FEATURES:
            return frozenset({self.set})
        if self.set.startswith("big") and self.set[3:] in FEATURES:
            return frozenset({self.set[3:]})
        if self.set not in ("mix", "multi"):
            raise ValueError(f"state set {self.set!r}: use one of {', '.join(FEATURES)}, mix or multi")
        rng = random.Random(f"{self.key}/features")
        return frozenset(
            rng.sample(FEATURES, rng.choice((2, 2, 3)) if self.set == "mix" else rng.choice((1, 2)))
        )


def parse_name(name: str) -> StateName:
    match = _NAME.match(name)
    if match is None:
        raise ValueError(f"state name {name!r}: expected SET-sSEED-INDEX or multi-sSEED-INDEX-tK")
    session = match["session"]
    return StateName(match["set"], int(match["seed"]), int(match["index"]), int(session) if session else None)


def first_state(name: StateName) -> State:
    first = StateName(name.set, name.seed, name.index, 1 if name.set == "multi" else None)
    return draw_state(state_rng(name.set, name.seed, name.index), str(first), name.features, name.scale)


def now_of(name: StateName) -> float:
    return FIRST_NOW + GAP_S * ((name.session or 1) - 1)


def write_state(folder: Path, state: State) -> StateName:
    name = parse_name(state.doc["name"])
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(state.doc, sort_keys=False))
    snapshot = kai_snapshot(state.doc, now=now_of(name), in_flight=sorted(state.in_flight))
    (folder / f"{name}.kai-snapshot.json").write_text(json.dumps(snapshot))
    return name


# libyaml's loader where the wheel has it: a corpus is a thousand files (the same documents).
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


def in_flight_of(snapshot: Mapping[str, Any]) -> set[str]:
    """The tasks KAI saw bound through a BindRequest still in flight."""
    return {b["spec"]["podName"] for b in snapshot["rawObjects"].get("bindRequests") or []}


def read_state(folder: Path, name: str) -> State:
    doc = _load_yaml((folder / f"{name}.yaml").read_text())
    snapshot = json.loads((folder / f"{name}.kai-snapshot.json").read_text())
    return State(doc, in_flight_of(snapshot))


def decision_of(folder: Path, name: str) -> Decision:
    jobs: Decision = json.loads((folder / f"{name}.kai.json").read_text())["jobs"]
    return jobs


def next_state(folder: Path, name: str) -> State:
    """Session K+1 of a followed cluster, from session K's state and KAI's decision."""
    parsed = parse_name(name)
    if parsed.session is None:
        raise ValueError(f"{name} is a one-session state: only multi-sSEED-INDEX-tK states go on")
    return advance(
        read_state(folder, name),
        decision_of(folder, name),
        key=parsed.key,
        session=parsed.session,
        features=parsed.features,
    )


def record(folder: Path, name: str, pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """NAME.kai.json from the statuses of KAI's pods after one session ({name, status,
    node, gpuGroup} each): per job, its tasks in the scenario's order."""
    by_name = {p["name"]: p for p in pods}
    doc = _load_yaml((folder / f"{name}.yaml").read_text())
    jobs: dict[str, list[dict[str, Any]]] = {}
    for job in doc["jobs"]:
        tasks = []
        for i in range(len(job["tasks"])):
            task = f"{job['name']}-{i}"
            if task not in by_name:
                raise ValueError(f"{name}: KAI's result has no pod {task}")
            pod = by_name[task]
            tasks.append(
                {
                    "name": task,
                    "status": pod["status"],
                    "node": pod.get("node"),
                    "gpuGroup": pod.get("gpuGroup"),
                }
            )
        jobs[job["name"]] = tasks
    out = {"name": name, "rounds": 1, "jobs": jobs}
    (folder / f"{name}.kai.json").write_text(json.dumps(out, indent=1))
    return out
