"""Building blocks of the user-facing models: strict models, quantity fields, YAML reading."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from kai_ray.config.errors import ConfigError
from kai_ray.core.model.quantity import parse_duration, parse_quantity

__all__ = [
    "Duration",
    "Labels",
    "Quantity",
    "StrictModel",
    "read_yaml",
    "read_yaml_documents",
]


class StrictModel(BaseModel):
    """camelCase keys as users write them; an unknown key is an error that lists the known ones.

    Attributes are snake_case; input, from files and from code alike, uses the camelCase
    keys (`model_validate({"gpuMemory": ...})`), so there is one spelling to check.
    """

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_keys(cls, data: Any) -> Any:
        # Checked here rather than by extra="forbid" so the message can say what is allowed.
        if isinstance(data, dict):
            known = [f.alias or name for name, f in cls.model_fields.items()]
            for key in data:
                if key not in known:
                    raise ValueError(_unknown_key(str(key), known))
        return data


def _unknown_key(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key!r}; {hint}known keys: {', '.join(known)}"


def _duration(value: object) -> float:
    return parse_duration(value)


def _labels(value: object) -> object:
    # YAML reads `rack: 1` as an int; a label value is always text.
    if isinstance(value, dict):
        return {str(k): _label_value(v) for k, v in value.items()}
    return value


def _label_value(value: object) -> object:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int | float) else value


# Kubernetes notation (`500m`, `16Gi`) or a plain number; QuantityError is a ValueError,
# so pydantic reports its message (which says what is accepted) at the field's location.
Quantity = Annotated[float, BeforeValidator(parse_quantity)]
Duration = Annotated[float, BeforeValidator(_duration)]
Labels = Annotated[dict[str, str], BeforeValidator(_labels)]


def read_yaml_documents(path: str | Path) -> list[Any]:
    """Every non-empty YAML document of a file; unreadable files and bad YAML are ConfigErrors."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such file; check the path", path=file) from None
    except OSError as e:
        raise ConfigError(f"cannot read the file ({e.strerror})", path=file) from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_problem(e), path=file) from None
    return [d for d in docs if d is not None]


def read_yaml(path: str | Path) -> Any:
    """The single YAML document of a file (None when empty)."""
    docs = read_yaml_documents(path)
    if len(docs) > 1:
        raise ConfigError(f"holds {len(docs)} YAML documents; this file takes exactly one", path=path)
    return docs[0] if docs else None


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}not valid YAML ({problem}); fix the syntax there"
