"""docs/tenants.md's table of rules against the scenarios that hold them: every scenario
of tests/scenarios/tenants is listed there, every file listed exists, and the reason
codes a row says are the codes its scenarios expect (so the words users read and the
decisions the suite checks cannot drift apart)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "tenants.md"
SCENARIOS = REPO / "tests" / "scenarios" / "tenants"
ROW = re.compile(r"^\| (\d+) \| (.+?) \| (.+?) \| ([a-z, -]*?) ?\|$")


def rules() -> list[tuple[int, list[str], set[str]]]:
    """(rule number, its scenario files, its codes) per row of the table."""
    out = []
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if m:
            files = re.findall(r"`([^`]+\.yaml)`", m[3])
            codes = {c.strip() for c in m[4].split(",") if c.strip()}
            out.append((int(m[1]), files, codes))
    return out


def expected_codes(path: Path) -> set[str]:
    expect = yaml.safe_load(path.read_text()).get("expect") or {}
    return {e["reason"] for e in expect.values() if isinstance(e, dict) and e.get("reason", "none") != "none"}


def test_the_table_lists_every_rule_once_in_order() -> None:
    numbers = [n for n, _, _ in rules()]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 10, numbers


def test_every_tenant_scenario_is_a_rule_of_the_doc() -> None:
    listed = {f for _, files, _ in rules() for f in files}
    present = {p.name for p in SCENARIOS.glob("*.yaml")}
    assert listed == present, (sorted(listed - present), sorted(present - listed))


def test_each_rules_codes_are_what_its_scenarios_expect() -> None:
    for number, files, codes in rules():
        for name in files:
            assert expected_codes(SCENARIOS / name) == codes, (number, name)
