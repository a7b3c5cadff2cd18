"""kai_ray's structure as the README draws it: no import circle anywhere (imports under
TYPE_CHECKING and inside functions count: each is an arrow someone must read past), and
the core's files short enough to read. The core's layers are import-linter's contract
(pyproject.toml), run by ./dev.sh test."""

from __future__ import annotations

from tests.architecture.graph import ROOT, circles, graph, longest_chain

MAX_LINES = 500


def test_no_import_circle_in_kai_ray() -> None:
    found = circles(graph())
    assert not found, "import circles (each group imports itself round):\n" + "\n".join(
        "  " + " -> ".join(group) for group in found
    )


def test_a_circle_is_found_and_named() -> None:
    """The check itself: a made-up graph with a circle drawn through a TYPE_CHECKING-like
    back arrow is caught, and its members named."""
    arrows = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(arrows) == [["a", "b", "c"]]
    assert longest_chain({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}) == ["d", "a", "b", "c"]


def test_the_graph_reads_imports_inside_functions_and_type_checking() -> None:
    """What the circle test relies on: arrows of every kind of import are read (here,
    the cycle's function-local imports would be missed by a top-level reading)."""
    arrows = graph()
    assert "kai_ray.core.cycle" in arrows["kai_ray.core"]
    assert arrows["kai_ray.core.actions.allocate"] >= {
        "kai_ray.core.session.allocateline",
        "kai_ray.core.session.context",
    }


def test_no_file_of_the_core_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "kai_ray" / "core").rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files of kai_ray/core over {MAX_LINES} lines (split them by role): {long}"
