"""Priority classes: the four KAI defaults, overrides, and resolving a job's priority."""

from __future__ import annotations

import pytest

from kai_ray.config import (
    ConfigError,
    PriorityClasses,
    ResolvedPriority,
    UnknownPriorityClassError,
    parse_priority_classes,
)

DEFAULTS = [
    ("train", 50, True),
    ("build-preemptible", 75, True),
    ("build", 100, False),
    ("inference", 125, False),
]


@pytest.mark.parametrize(("name", "value", "preemptible"), DEFAULTS, ids=[d[0] for d in DEFAULTS])
def test_default_classes(name: str, value: int, preemptible: bool) -> None:
    assert PriorityClasses().resolve(name) == ResolvedPriority(value, preemptible)


RESOLVE = [
    ("integer below 100 is preemptible", 99, None, ResolvedPriority(99, True)),
    ("integer 100 is not", 100, None, ResolvedPriority(100, False)),
    ("a number written as text", "10", None, ResolvedPriority(10, True)),
    ("the job's own preemptible wins over the value", 150, True, ResolvedPriority(150, True)),
    ("the job's own preemptible wins over a class", "train", False, ResolvedPriority(50, False)),
]


@pytest.mark.parametrize(
    ("priority", "preemptible", "expected"), [r[1:] for r in RESOLVE], ids=[r[0] for r in RESOLVE]
)
def test_resolve(priority: str | int, preemptible: bool | None, expected: ResolvedPriority) -> None:
    assert PriorityClasses().resolve(priority, preemptible) == expected


def test_user_classes_add_to_and_override_the_defaults() -> None:
    classes = parse_priority_classes({"train": {"value": 60}, "urgent": {"value": 90, "preemptible": False}})
    assert classes.resolve("train") == ResolvedPriority(60, True)
    assert classes.resolve("urgent") == ResolvedPriority(90, False)
    assert classes.resolve("inference") == ResolvedPriority(125, False)
    assert "urgent" in classes.names


def test_unknown_class_names_it_and_lists_the_known_ones() -> None:
    with pytest.raises(UnknownPriorityClassError) as caught:
        PriorityClasses().resolve("trainn")
    message = str(caught.value)
    assert "'trainn' does not exist" in message
    assert "build, build-preemptible, inference, train" in message
    assert "did you mean 'train'" in message


def test_invalid_class_definition_names_the_class_and_field() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_priority_classes({"urgent": {"value": "high"}}, path="classes.yaml")
    assert str(caught.value).startswith("classes.yaml: priority class 'urgent': value: ")


def test_unknown_key_in_a_class() -> None:
    with pytest.raises(ConfigError, match="priority class 'x': unknown key 'preemptable'"):
        parse_priority_classes({"x": {"value": 1, "preemptable": True}})
