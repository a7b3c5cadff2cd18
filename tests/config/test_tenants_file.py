"""The tenants file (kai_ray.config.tenants): what it reads, and every mistake refused
naming the entry, the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kai_ray.config import ConfigError
from kai_ray.config.tenants import load_tenants, parse_tenants

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
C = "sha256:" + "c" * 64

FILE = f"""\
apiVersion: kai-ray.io/v1
kind: Tenants
tenants:
- name: team-a
  tokenHash: {A.upper().replace("SHA256", "sha256")}
  labels: {{team: a, tier: 1}}
- name: team-b
  tokenHash: {B}
admins:
- name: ops
  tokenHash: {C}
"""


def test_a_file_reads_its_tenants_labels_and_admins(tmp_path: Path) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text(FILE)
    parsed = load_tenants(path)
    assert [(t.name, t.token_hash, t.labels) for t in parsed.tenants] == [
        ("team-a", A, {"team": "a", "tier": "1"}),  # hex lower-cased, label values text
        ("team-b", B, {}),
    ]
    assert [(a.name, a.token_hash) for a in parsed.admins] == [("ops", C)]


def test_the_document_reads_back_unchanged() -> None:
    """What the client sends and the scheduler stores is the same file again."""
    parsed = parse_tenants(
        {"tenants": [{"name": "t", "tokenHash": A}], "admins": [{"name": "o", "tokenHash": B}]}
    )
    doc = parsed.document()
    assert doc["apiVersion"] == "kai-ray.io/v1" and doc["kind"] == "Tenants"
    assert parse_tenants(doc) == parsed


def test_admins_alone_are_a_file() -> None:
    assert parse_tenants({"admins": [{"name": "ops", "tokenHash": A}]}).tenants == []


def _doc(tenants: list[dict[str, Any]], admins: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"tenants": tenants, "admins": [{"name": "ops", "tokenHash": C}] if admins is None else admins}


BAD = [
    (
        _doc([{"tokenHash": A}]),
        "t.yaml: tenants[0].name: this key is required; add it",
    ),
    (
        _doc([{"name": "team-a", "tokenHash": "deadbeef"}]),
        "t.yaml: tenant 'team-a': tokenHash: is not of the form sha256:<64 hex digits>; write the "
        "`tokenHash:` line that `kai-ray tenant token` printed (the token itself never goes here)",
    ),
    (
        _doc([{"name": "team-a", "tokenHash": A}, {"name": "team-a", "tokenHash": B}]),
        "t.yaml: tenant 'team-a' (tenants[1]): name: tenant 'team-a' (tenants[0]) has this name "
        "already; give each tenant and admin its own name",
    ),
    (
        _doc([{"name": "ops", "tokenHash": A}]),
        "t.yaml: admin 'ops' (admins[0]): name: tenant 'ops' (tenants[0]) has this name already; "
        "give each tenant and admin its own name",
    ),
    (
        _doc([{"name": "team-a", "tokenHash": A}, {"name": "team-b", "tokenHash": A}]),
        "t.yaml: tenant 'team-b' (tenants[1]): tokenHash: tenant 'team-a' (tenants[0]) has this hash "
        "already, so one token would name both; make a token of its own with `kai-ray tenant token`",
    ),
    (
        _doc([{"name": "team-a", "tokenHash": A}], admins=[]),
        "t.yaml: admins: names no admin; add one (a name and the tokenHash of a token of its own "
        "from `kai-ray tenant token`): without one, no one could change queues or tenants",
    ),
    (
        _doc([{"name": "team-a", "tokenHash": A, "label": {"team": "a"}}]),
        "t.yaml: tenant 'team-a': unknown key 'label'; did you mean 'labels'? known keys: name, "
        "tokenHash, labels",
    ),
    (
        {**_doc([]), "kind": "Queue"},
        "t.yaml: kind 'Queue' is not a tenants file; use kind: Tenants",
    ),
    (
        {**_doc([]), "apiVersion": "v1"},
        "t.yaml: apiVersion 'v1' is not supported; use kai-ray.io/v1",
    ),
    (
        [{"name": "team-a"}],
        "t.yaml: expected a map with apiVersion: kai-ray.io/v1, kind: Tenants, tenants: [...] "
        "and admins: [...]",
    ),
]


@pytest.mark.parametrize(
    ("doc", "words"),
    BAD,
    ids=[
        "no-name",
        "bad-hash",
        "name-twice",
        "tenant-and-admin-one-name",
        "hash-twice",
        "no-admin",
        "unknown-key",
        "wrong-kind",
        "wrong-api-version",
        "not-a-map",
    ],
)
def test_a_mistake_names_the_entry_the_field_and_the_fix(doc: Any, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_tenants(doc, path="t.yaml")
    assert str(caught.value) == words


def test_a_token_pasted_for_its_hash_is_not_quoted_back() -> None:
    """The message names the field, never the value: a token there by mistake must not
    reach a terminal's scrollback or a log."""
    token = "Zr8kL2v0pQe1XyWm9sT4uV7bN3cD6fG5hJ0kA1sD2fG"
    with pytest.raises(ConfigError) as caught:
        parse_tenants(_doc([{"name": "team-a", "tokenHash": token}]))
    assert token not in str(caught.value) and token[:10] not in str(caught.value)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file; check the path"):
        load_tenants(tmp_path / "nope.yaml")


def test_the_line_kai_ray_tenant_token_prints_goes_in_the_file_as_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An admin's way: `kai-ray tenant token`, the second line pasted into the file, the
    first given to the tenant, whose token then hashes to what the file holds."""
    from kai_ray.cli import main
    from kai_ray.control.tenants import token_hash

    assert main(["tenant", "token"]) == 0
    token_line, hash_line = capsys.readouterr().out.splitlines()
    token = token_line.removeprefix("KAI_RAY_TOKEN=")
    entry = dict([hash_line.split(": ", 1)], name="team-a")
    parsed = parse_tenants({"tenants": [entry], "admins": [{"name": "ops", "tokenHash": C}]})
    assert parsed.tenants[0].token_hash == token_hash(token)
