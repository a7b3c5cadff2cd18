"""`kai-ray bench plot`: one SVG per comparison of benchmarks/summary.json, naming its
figures; a summary entry at fault is named with its field; and BENCHMARKS.md's first page
and the summary hold the same figures, so the page and its plots cannot drift apart."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kai_ray.bench.plots import SUMMARY, load_summary
from kai_ray.cli import main

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "BENCHMARKS.md"
HISTORY = REPO / "docs" / "benchmarks-history.md"
IMAGES = REPO / "docs" / "images"
SVG = "{http://www.w3.org/2000/svg}"


def _summary() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SUMMARY.read_text(encoding="utf-8"))
    return data


def _svg_text(path: Path) -> str:
    """Every text of the SVG in document order, joined by spaces (a wrapped label's
    lines are separate text elements)."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    assert not list(root.iter(f"{SVG}image")), f"{path.name}: embeds a raster"
    words = " ".join("".join(e.itertext()) for e in root.iter(f"{SVG}text"))
    return " ".join(words.split())


def _assert_names_its_figures(path: Path, comparison: dict[str, Any]) -> None:
    text = _svg_text(path)
    assert " ".join(comparison["title"].split()) in text, f"{path.name}: no title"
    for figure in comparison["figures"]:
        plotted = [v for v in figure["values"] if "low" in v]
        if not plotted:
            continue
        label = figure.get("plot_label", figure["label"])
        assert " ".join(label.split()) in text, f"{path.name}: no label {label!r}"
        for value in plotted:
            assert " ".join(value["text"].split()) in text, f"{path.name}: no {value['text']!r}"
            assert value["series"] in text, f"{path.name}: no series {value['series']!r}"


def test_each_comparison_yields_one_svg_naming_its_figures(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kai_ray.cli", "bench", "plot", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    comparisons = _summary()["comparisons"]
    written = sorted(Path(line).name for line in done.stdout.split())
    assert written == sorted(f"bench-{c['id']}.svg" for c in comparisons)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == written
    for comparison in comparisons:
        path = tmp_path / "out" / f"bench-{comparison['id']}.svg"
        _assert_names_its_figures(path, comparison)
        assert path.stat().st_size < 100_000, f"{path.name}: {path.stat().st_size} bytes"


def test_the_committed_plots_draw_the_summary() -> None:
    """docs/images holds each comparison's SVG as the summary has it now (regenerate with
    `kai-ray bench plot --out docs/images`)."""
    for comparison in _summary()["comparisons"]:
        _assert_names_its_figures(IMAGES / f"bench-{comparison['id']}.svg", comparison)


def _broken(tmp_path: Path, change: Any) -> tuple[Path, dict[str, Any]]:
    data = copy.deepcopy(_summary())
    change(data)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, data


def _drop(key: str) -> Any:
    return lambda data: _ray_alone(data)["figures"][1].pop(key)


def _ray_alone(data: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in data["comparisons"] if c["id"] == "ray-alone")


def _set_value(key: str, value: object) -> Any:
    def change(data: dict[str, Any]) -> None:
        _ray_alone(data)["figures"][1]["values"][0][key] = value

    return change


def _drop_numbers(data: dict[str, Any]) -> None:
    for key in ("low", "high"):
        _ray_alone(data)["figures"][1]["values"][0].pop(key)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_drop("date"), "date"),
        (_drop("command"), "command"),
        (_drop("machine"), "machine"),
        (_set_value("low", "fast"), "values[0].low"),
        (_set_value("high", 1.0), "low 1681.2 and high 1.0"),
        (_drop_numbers, "values[0].low"),
    ],
)
def test_an_entry_at_fault_is_named_with_its_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, field: str
) -> None:
    path, data = _broken(tmp_path, change)
    status = main(["bench", "plot", "--out", str(tmp_path / "out"), "--summary", str(path)])
    err = capsys.readouterr().err
    assert status == 2, err
    figure = _ray_alone(data)["figures"][1]
    assert "comparison 'ray-alone'" in err, err
    assert f"figure {figure['label']!r}" in err, err
    assert field in err, err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_comparison_without_an_id_or_a_file_not_there_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _broken(tmp_path, lambda data: data["comparisons"][1].pop("id"))
    assert main(["bench", "plot", "--out", str(tmp_path), "--summary", str(path)]) == 2
    assert "comparisons[1]: id: missing" in capsys.readouterr().err
    missing = tmp_path / "nothing.json"
    assert main(["bench", "plot", "--out", str(tmp_path), "--summary", str(missing)]) == 2
    assert f"{missing}: no such file; give --summary FILE" in capsys.readouterr().err


def test_without_matplotlib_the_error_names_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert main(["bench", "plot", "--out", str(tmp_path)]) == 2
    assert "pip install 'kai-ray[sim]'" in capsys.readouterr().err


def _page_cells() -> list[str]:
    """The body cells of every table on the first page (header and rule rows left out)."""
    cells, in_table = [], False
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if in_table and not all(set(c) <= set("-:") for c in row):
            cells.extend(row)
        in_table = True  # the first row of a table is its header
    return cells


def _summary_texts() -> set[str]:
    texts = set()
    for comparison in _summary()["comparisons"]:
        for figure in comparison["figures"]:
            texts.add(figure["label"])
            texts.update(v["text"] for v in figure["values"])
            texts.update(figure.get("cells", {}).values())
    return texts


def test_every_figure_on_the_page_is_in_the_summary() -> None:
    cells = _page_cells()
    assert len(cells) > 100
    texts = _summary_texts()
    missing = [c for c in cells if re.search(r"\d", c) and c not in texts]
    assert not missing, f"BENCHMARKS.md's tables hold figures benchmarks/summary.json lacks: {missing}"


def test_every_figure_in_the_summary_is_on_the_page() -> None:
    page, cells = PAGE.read_text(encoding="utf-8"), set(_page_cells())
    headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$", HISTORY.read_text(encoding="utf-8"), re.M)}
    for comparison in load_summary(SUMMARY):
        assert f"](docs/images/{comparison.svg_name})" in page, f"no image of {comparison.id}"
        for figure in comparison.figures:
            shown = [figure.label, *(v.text for v in figure.values), *figure.cells.values()]
            assert not [t for t in shown if t not in cells], f"{figure.label!r}: not in a table"
            if not figure.plotted:
                continue
            assert f"`{figure.command}`" in page, f"{figure.label!r}: command not on the page"
            assert figure.date in page, f"{figure.label!r}: date not on the page"
            machine = figure.machine.split(";")[0]  # the machine itself; what follows is its setup
            assert machine in page, f"{figure.label!r}: machine not on the page"
            if figure.source.startswith("docs/benchmarks-history.md#"):
                assert f"]({figure.source})" in page
                assert figure.source.split("#", 1)[1] in headings, f"no section {figure.source}"


def test_the_pages_links_into_the_log_name_its_sections() -> None:
    headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$", HISTORY.read_text(encoding="utf-8"), re.M)}
    links = re.findall(r"\]\(docs/benchmarks-history\.md#([^)]+)\)", PAGE.read_text(encoding="utf-8"))
    assert links
    assert not [link for link in links if link not in headings]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
