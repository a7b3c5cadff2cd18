"""Priority classes: a name -> (value, preemptible), and resolving a workload's priority
and preemptibility. The one statement of these rules for every front end: Ray's
submissions (kai_ray.workload, `kai-ray job submit`), scenario files, and Kubernetes'
labels (kai_ray.k8s.gangs, with the cluster's PriorityClass objects as the classes)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from kai_ray.config.base import StrictModel, read_yaml
from kai_ray.config.errors import from_validation_error

__all__ = [
    "DEFAULT_PRIORITY_CLASSES",
    "NON_PREEMPTIBLE_FROM",
    "PriorityClassSpec",
    "PriorityClasses",
    "ResolvedPriority",
    "UnknownPriorityClassError",
    "load_priority_classes",
    "parse_priority_classes",
    "preemptible_at",
    "read_preemptibility",
]

# KAI's rule when a class or job does not say: values below 100 are preemptible.
NON_PREEMPTIBLE_FROM = 100


class PriorityClassSpec(StrictModel):
    value: int
    preemptible: bool | None = None  # None: value < 100


@dataclass(frozen=True, slots=True)
class ResolvedPriority:
    value: int
    preemptible: bool


DEFAULT_PRIORITY_CLASSES: Mapping[str, ResolvedPriority] = {
    "train": ResolvedPriority(50, True),
    "build-preemptible": ResolvedPriority(75, True),
    "build": ResolvedPriority(100, False),
    "inference": ResolvedPriority(125, False),
}


class UnknownPriorityClassError(ValueError):
    """A class name that is not defined; the message lists the known ones."""


class PriorityClasses:
    """The four KAI defaults, with user classes added or overriding them by name.
    `how_to_add`: the fix for an unknown name, in the front end's words."""

    def __init__(
        self,
        overrides: Mapping[str, PriorityClassSpec] | None = None,
        *,
        how_to_add: str = "define it under priorityClasses",
    ) -> None:
        classes = dict(DEFAULT_PRIORITY_CLASSES)
        for name, spec in (overrides or {}).items():
            classes[name] = ResolvedPriority(spec.value, preemptible_at(spec.value, spec.preemptible))
        self._classes = classes
        self.how_to_add = how_to_add

    @classmethod
    def of_cluster(cls, values: Mapping[str, int]) -> PriorityClasses:
        """A Kubernetes cluster's PriorityClass objects (name -> value) over the defaults."""
        specs = {name: PriorityClassSpec(value=value) for name, value in values.items()}
        return cls(specs, how_to_add="create the PriorityClass")

    @property
    def names(self) -> list[str]:
        return sorted(self._classes)

    def __getitem__(self, name: str) -> ResolvedPriority:
        return self._classes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def resolve(
        self, priority: str | int, preemptible: bool | None = None, *, numbers: bool = True
    ) -> ResolvedPriority:
        """A class name (or, with `numbers`, an integer) -> value and preemptibility.

        An explicit `preemptible` wins; otherwise the class says, or for an integer the
        value does (below 100: preemptible). Kubernetes names classes only (no numbers).
        """
        if isinstance(priority, bool):
            raise UnknownPriorityClassError(self._unknown(str(priority), numbers))
        if isinstance(priority, int) and numbers:
            return ResolvedPriority(priority, preemptible_at(priority, preemptible))
        if priority in self._classes:
            cls = self._classes[str(priority)]
            return cls if preemptible is None else ResolvedPriority(cls.value, preemptible)
        number = _as_int(str(priority)) if numbers else None
        if number is not None:
            return ResolvedPriority(number, preemptible_at(number, preemptible))
        raise UnknownPriorityClassError(self._unknown(str(priority), numbers))

    def _unknown(self, name: str, numbers: bool) -> str:
        close = difflib.get_close_matches(name, self.names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        numbered = " or an integer" if numbers else ""
        return (
            f"priority class {name!r} does not exist; {hint}use one of "
            f"{', '.join(self.names)}{numbered}, or {self.how_to_add}"
        )


def preemptible_at(value: int, preemptible: bool | None = None) -> bool:
    """Whether a workload of priority `value` may be preempted: as said (`preemptible`),
    else KAI's rule, below NON_PREEMPTIBLE_FROM (build-and-below). Ray's submissions and
    Kubernetes' labels both decide it here."""
    return value < NON_PREEMPTIBLE_FROM if preemptible is None else preemptible


PREEMPTIBILITY = {"preemptible": True, "non-preemptible": False}


def read_preemptibility(text: str) -> bool:
    """A written preemptibility (`preemptible` / `non-preemptible`, as KAI's label says it).
    ValueError, saying the words and what leaving it out means, for anything else."""
    if text in PREEMPTIBILITY:
        return PREEMPTIBILITY[text]
    raise ValueError(
        f"is {text!r}: use 'preemptible' or 'non-preemptible', or leave it out "
        f"(then a priority below {NON_PREEMPTIBLE_FROM} is preemptible)"
    )


def _as_int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


_CLASSES = TypeAdapter(dict[str, PriorityClassSpec])


def parse_priority_classes(data: Any, *, path: str | Path | None = None) -> PriorityClasses:
    """A YAML map `name: {value, preemptible}` (None: the defaults only)."""
    if data is None:
        return PriorityClasses()
    try:
        specs = _CLASSES.validate_python(data)
    except ValidationError as e:
        raise from_validation_error(e, data, path=path, top="priorityClasses") from None
    return PriorityClasses(specs)


def load_priority_classes(path: str | Path) -> PriorityClasses:
    return parse_priority_classes(read_yaml(path), path=path)
