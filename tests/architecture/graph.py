"""kai_ray's import graph as the code writes it: every import, at the top of a module,
under TYPE_CHECKING or inside a function, read from the source (nothing is imported).

A name imported from a package is an arrow to its submodule when it is one, else to the
package's __init__. Used by test_imports.py, and by hand:
`python -m tests.architecture.graph` prints the circles, the longest chain, and the
modules each action imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "kai_ray"


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of kai_ray by dotted name (a package by its own name)."""
    out: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            keep = len(parts) - node.level + (1 if is_package else 0)
            base = ".".join(parts[:keep] + ([base] if base else []))
        for alias in node.names:
            yield f"{base}.{alias.name}"
            yield base


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the kai_ray modules it imports (itself and its own package left out)."""
    known = modules(root)
    arrows: dict[str, set[str]] = {m: set() for m in known}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = list(_imported(node, name, is_package))
            if isinstance(node, ast.ImportFrom):
                # `from a import b`: a.b when it is a module, else a itself.
                pairs = list(zip(names[::2], names[1::2], strict=True))
                targets = [full if full in known else base for full, base in pairs]
            else:
                targets = names
            for target in targets:
                if target in known and target != name and not name.startswith(target + "."):
                    arrows[name].add(target)
    return arrows


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(arrows[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(arrows):
        if v not in index:
            visit(v)
    return found


def longest_chain(arrows: dict[str, set[str]]) -> list[str]:
    """The longest path of imports (a graph without circles)."""
    best: dict[str, list[str]] = {}

    def longest(v: str) -> list[str]:
        if v not in best:
            tails = [longest(w) for w in sorted(arrows[v])]
            best[v] = [v, *max(tails, key=len, default=[])]
        return best[v]

    return max((longest(v) for v in sorted(arrows)), key=len)


def condensed(arrows: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph with each circle drawn as one node, named by its modules in braces."""
    group_of = {m: "{" + ", ".join(g) + "}" for g in circles(arrows) for m in g}
    out: dict[str, set[str]] = {}
    for v, targets in arrows.items():
        here = group_of.get(v, v)
        out.setdefault(here, set()).update(group_of.get(w, w) for w in targets)
        out[here].discard(here)
    return out


def main() -> None:
    arrows = graph()
    found = circles(arrows)
    print(f"circles: {len(found)}")
    for group in found:
        print("  " + ", ".join(group))
    chain = longest_chain(condensed(arrows))
    print(f"longest chain: {len(chain)} modules: {' -> '.join(chain)}")
    core = {
        m: {t for t in ts if t.startswith("kai_ray.core.")}
        for m, ts in arrows.items()
        if m.startswith("kai_ray.core.")
    }
    chain = longest_chain(condensed(core))
    print(f"longest chain in kai_ray.core: {len(chain)} modules: {' -> '.join(chain)}")
    for action in ACTIONS:
        own = sorted(t for t in arrows[action] if t.startswith("kai_ray.core"))
        print(f"{action} imports {len(own)}: {', '.join(own)}")


ACTIONS = [
    "kai_ray.core.actions.allocate",
    "kai_ray.core.actions.evictions",
    "kai_ray.core.actions.consolidation",
    "kai_ray.core.actions.reclaimrules",
    "kai_ray.core.actions.solver",
]


if __name__ == "__main__":
    main()
