"""A tenants file (Ray): who may call the scheduler, known by the sha256 hash of a token
of its own, with labels for queues' `tenantSelector`; and the admins, who may change
queues and tenants and cancel anyone's work.

    apiVersion: kai-ray.io/v1
    kind: Tenants
    tenants:
    - name: team-a
      tokenHash: sha256:<64 hex digits>
      labels: {team: a}
    admins:
    - name: ops
      tokenHash: sha256:<64 hex digits>

The file holds hashes, never tokens: `kai-ray tenant token` prints a fresh token and the
`tokenHash:` line to write here. The check of a token against these hashes is
kai_ray.control.tenants'; docs/ray.md ("Tenants") says it for users.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, model_validator

from kai_ray.config.access import TenantName
from kai_ray.config.base import Labels, StrictModel, read_yaml
from kai_ray.config.errors import ConfigError, describe_location, from_validation_error
from kai_ray.config.queues import KAI_RAY_API_VERSION

__all__ = [
    "TENANTS_KIND",
    "AdminSpec",
    "TenantSpec",
    "TenantsFile",
    "load_tenants",
    "parse_tenants",
]

TENANTS_KIND = "Tenants"
HASH_PREFIX = "sha256:"
_HASH = re.compile(r"sha256:[0-9a-fA-F]{64}")
_NOUNS = {"tenants": "tenant", "admins": "admin"}
_FIX_HASH = (
    "write the `tokenHash:` line that `kai-ray tenant token` printed (the token itself never goes here)"
)


def _token_hash(value: object) -> object:
    # The value is not quoted back: a token pasted here by mistake must not reach logs.
    if not isinstance(value, str) or not _HASH.fullmatch(value.strip()):
        raise ValueError(f"is not of the form sha256:<64 hex digits>; {_FIX_HASH}")
    return value.strip().lower()


TokenHash = Annotated[str, BeforeValidator(_token_hash)]


class AdminSpec(StrictModel):
    """An admin: applies queues and tenants, cancels any workload; no tenant rule binds
    its workloads."""

    name: TenantName
    token_hash: TokenHash


class TenantSpec(AdminSpec):
    """A tenant: its workloads are its own, and queues' access rules bind them."""

    labels: Labels = Field(default_factory=dict)


class TenantsFile(StrictModel):
    api_version: str = KAI_RAY_API_VERSION
    kind: str = TENANTS_KIND
    tenants: list[TenantSpec] = Field(default_factory=list)
    admins: list[AdminSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _header(self) -> TenantsFile:
        if self.api_version != KAI_RAY_API_VERSION:
            raise ValueError(f"apiVersion {self.api_version!r} is not supported; use {KAI_RAY_API_VERSION}")
        if self.kind != TENANTS_KIND:
            raise ValueError(f"kind {self.kind!r} is not a tenants file; use kind: {TENANTS_KIND}")
        return self

    def document(self) -> dict[str, Any]:
        """The file as a plain document (camelCase keys): what the client sends and the
        scheduler stores; parse_tenants reads it back unchanged."""
        return self.model_dump(by_alias=True)

    def entries(self) -> list[tuple[str, AdminSpec]]:
        """("tenants" or "admins", entry), in file order."""
        return [("tenants", t) for t in self.tenants] + [("admins", a) for a in self.admins]


def parse_tenants(data: Any, *, path: str | Path | None = None) -> TenantsFile:
    """A tenants document (as read from YAML); ConfigError naming the entry, the field
    and the fix."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"expected a map with apiVersion: {KAI_RAY_API_VERSION}, kind: {TENANTS_KIND}, "
            "tenants: [...] and admins: [...]",
            path=path,
        )
    try:
        parsed = TenantsFile.model_validate(data)
        _check_unique(parsed)
    except ValidationError as e:
        raise _located(e, data, path) from None
    except ConfigError as e:
        raise (e.at(path) if path is not None else e) from None
    return parsed


def load_tenants(path: str | Path) -> TenantsFile:
    return parse_tenants(read_yaml(path), path=path)


def _check_unique(parsed: TenantsFile) -> None:
    """Each name and each token hash once; at least one admin (without one, no one
    could change queues or tenants while tokens are checked)."""
    names: dict[str, str] = {}
    hashes: dict[str, str] = {}
    counts = {"tenants": 0, "admins": 0}
    for collection, entry in parsed.entries():
        who = f"{_NOUNS[collection]} {entry.name!r} ({collection}[{counts[collection]}])"
        counts[collection] += 1
        if entry.name in names:
            raise ConfigError(
                f"{names[entry.name]} has this name already; give each tenant and admin its own name",
                field=f"{who}: name",
            )
        if entry.token_hash in hashes:
            raise ConfigError(
                f"{hashes[entry.token_hash]} has this hash already, so one token would name both; "
                "make a token of its own with `kai-ray tenant token`",
                field=f"{who}: tokenHash",
            )
        names[entry.name], hashes[entry.token_hash] = who, who
    if not parsed.admins:
        raise ConfigError(
            "names no admin; add one (a name and the tokenHash of a token of its own from "
            "`kai-ray tenant token`): without one, no one could change queues or tenants",
            field="admins",
        )


def _located(error: ValidationError, raw: Mapping[str, Any], path: str | Path | None) -> ConfigError:
    """pydantic's first problem, naming the entry by its name ("tenant 'team-a':
    tokenHash") where it has one."""
    inner = from_validation_error(error, raw, path=path)
    loc = error.errors()[0]["loc"]
    if len(loc) >= 2 and loc[0] in _NOUNS and isinstance(loc[1], int):
        entries = raw.get(str(loc[0]))
        entry = entries[loc[1]] if isinstance(entries, list) and loc[1] < len(entries) else None
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name:
            rest = describe_location(loc[2:], None)
            field = f"{_NOUNS[str(loc[0])]} {name!r}" + (f": {rest}" if rest else "")
            return ConfigError(inner.message, path=path, field=field)
    return inner
