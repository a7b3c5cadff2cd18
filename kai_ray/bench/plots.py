"""`kai-ray bench plot`: one SVG per comparison on BENCHMARKS.md's first page, drawn from
the figures kept in `benchmarks/summary.json`.

The file holds `comparisons`, each an `id` (the SVG is `bench-ID.svg`), a `title` and its
`figures`: one per row of the page's table. A figure has a `label` (the row's first
cell), `values` (one per column compared: `series`, the `text` the page shows and, where
it was measured, `low` and `high`, its lowest and highest run in the figure's `unit`),
optional `cells` (the row's other cells, text only), and the `command`, `machine`, `date`
and `source` it was measured with. Each comparison is drawn as bars, one panel per
unit: a bar reaches the lowest run, a whisker the highest, and the figure's text stands
above it; a panel whose figures differ by 20x or more is drawn on a log scale.

matplotlib is the optional extra `sim`, imported only when drawing.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kai_ray.api.cliutil import CommandFailed
from kai_ray.config.errors import ConfigError

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["SUMMARY", "Comparison", "Figure", "Value", "load_summary", "plot_comparison", "write_plots"]

SUMMARY = Path(__file__).resolve().parents[2] / "benchmarks" / "summary.json"
LOG_RATIO = 20.0  # a panel whose highest figure is this many times its lowest is drawn on a log scale
FIGURE_FIELDS = ("command", "machine", "date", "source")  # every figure says how it was measured
_PANEL_HEIGHT_IN = 2.4
_WIDTH_IN = 8.5
_MAX_BAR = 0.3  # of the space between two figures
_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")


@dataclass(frozen=True)
class Value:
    """One column of a figure: the page's text and, where measured, the runs' range."""

    series: str
    text: str
    low: float | None = None
    high: float | None = None

    @property
    def measured(self) -> bool:
        return self.low is not None and self.high is not None


@dataclass(frozen=True)
class Figure:
    label: str
    plot_label: str
    unit: str
    values: tuple[Value, ...]
    cells: dict[str, str]
    command: str
    machine: str
    date: str
    source: str

    @property
    def plotted(self) -> tuple[Value, ...]:
        return tuple(v for v in self.values if v.measured)


@dataclass(frozen=True)
class Comparison:
    id: str
    title: str
    figures: tuple[Figure, ...]

    @property
    def svg_name(self) -> str:
        return f"bench-{self.id}.svg"

    def panels(self) -> dict[str, list[Figure]]:
        """The drawn figures by unit, in the order the page lists them."""
        panels: dict[str, list[Figure]] = {}
        for figure in self.figures:
            if figure.plotted:
                panels.setdefault(figure.unit, []).append(figure)
        return panels

    def series(self) -> list[str]:
        """Every series drawn, in order of first appearance (one colour each)."""
        seen: dict[str, None] = {}
        for figure in self.figures:
            for value in figure.plotted:
                seen.setdefault(value.series, None)
        return list(seen)


def load_summary(path: Path) -> list[Comparison]:
    """The comparisons of a summary file; a ConfigError names the entry and field at fault."""
    if not path.is_file():
        raise ConfigError(
            "no such file; give --summary FILE (benchmarks/summary.json in a checkout of kai-ray)",
            path=path,
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"not valid JSON ({e})", path=path) from None
    comparisons = _field(raw, "comparisons", list, path, "the file")
    if not comparisons:
        raise ConfigError("comparisons: the list is empty; add at least one comparison", path=path)
    parsed = [_comparison(entry, i, path) for i, entry in enumerate(comparisons)]
    ids = [c.id for c in parsed]
    for name in ids:
        if ids.count(name) > 1:
            raise ConfigError(f"comparison {name!r}: id: used twice; each SVG needs its own id", path=path)
    return parsed


def write_plots(summary: Path, out: Path) -> list[Path]:
    """One SVG per comparison of `summary` into `out`; returns their paths."""
    comparisons = load_summary(summary)
    out.mkdir(parents=True, exist_ok=True)
    return [plot_comparison(c, out) for c in comparisons]


def plot_comparison(comparison: Comparison, out: Path) -> Path:
    """Draw one comparison as `out/bench-ID.svg`: text kept as text, no date, so the
    same figures give the same file."""
    mpl = _matplotlib()
    from matplotlib.figure import Figure as MplFigure

    panels = comparison.panels()
    if not panels:
        raise ConfigError(f"comparison {comparison.id!r}: figures: none has a measured value (low and high)")
    colours = {name: _COLOURS[i % len(_COLOURS)] for i, name in enumerate(comparison.series())}
    settings = {"svg.fonttype": "none", "svg.hashsalt": comparison.id, "font.size": 8.0}
    with mpl.rc_context(settings):
        fig = MplFigure(figsize=(_WIDTH_IN, 0.5 + _PANEL_HEIGHT_IN * len(panels)), layout="constrained")
        axes = fig.subplots(len(panels), 1, squeeze=False)
        for row, (unit, figures) in enumerate(panels.items()):
            _panel(axes[row][0], unit, figures, colours)
        fig.suptitle(comparison.title, fontsize=10)
        path = out / comparison.svg_name
        fig.savefig(path, format="svg", metadata={"Date": None})
    return path


def _panel(ax: Axes, unit: str, figures: list[Figure], colours: dict[str, str]) -> None:
    names = [name for name in colours if any(v.series == name for f in figures for v in f.plotted)]
    lows = [v.low for f in figures for v in f.plotted if v.low is not None]
    highs = [v.high for f in figures for v in f.plotted if v.high is not None]
    log = min(lows) > 0 and max(highs) / min(lows) >= LOG_RATIO
    width = min(0.8 / len(names), _MAX_BAR)
    drawn: set[str] = set()
    for x, figure in enumerate(figures):
        present = [v for name in names for v in figure.plotted if v.series == name]
        for slot, value in enumerate(present):
            assert value.low is not None and value.high is not None  # plotted: measured
            centre = x + width * (slot - (len(present) - 1) / 2)
            label = None if value.series in drawn else value.series
            drawn.add(value.series)
            ax.bar(centre, value.low, width * 0.9, color=colours[value.series], label=label)
            if value.high > value.low:
                ax.vlines(centre, value.low, value.high, colors="black", linewidth=1.0)
            top = value.high * 1.15 if log else value.high + 0.02 * max(highs)
            ax.text(centre, top, _wrap(value.text, 18), ha="center", va="bottom", fontsize=6.5)
    if log:
        ax.set_yscale("log")
        ax.set_ylim(min(lows) / 2, max(highs) * 8)
    else:
        ax.set_ylim(0, max(highs) * 1.35 or 1.0)
    ax.set_xticks(range(len(figures)), [_wrap(f.plot_label, 22) for f in figures])
    centre, half = (len(figures) - 1) / 2, max(len(figures), 2) / 2  # one figure: bars stay narrow
    ax.set_xlim(centre - half, centre + half)
    ax.set_ylabel(unit + (" (log scale)" if log else ""))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)


def _wrap(text: str, width: int) -> str:
    """Lines broken at spaces only, so the SVG's lines joined by spaces give the text back."""
    return textwrap.fill(text, width, break_on_hyphens=False, break_long_words=False)


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise CommandFailed(
            "kai-ray bench plot draws with matplotlib, which is not installed beside this Python: "
            "pip install 'kai-ray[sim]'"
        ) from None
    return matplotlib


def _comparison(raw: object, index: int, path: Path) -> Comparison:
    where = f"comparisons[{index}]"
    ident = _field(raw, "id", str, path, where)
    where = f"comparison {ident!r}"
    title = _field(raw, "title", str, path, where)
    figures = _field(raw, "figures", list, path, where)
    if not figures:
        raise ConfigError(f"{where}: figures: the list is empty; add the page's rows", path=path)
    return Comparison(ident, title, tuple(_figure(f, i, where, path) for i, f in enumerate(figures)))


def _figure(raw: object, index: int, comparison: str, path: Path) -> Figure:
    label = _field(raw, "label", str, path, f"{comparison}, figures[{index}]")
    where = f"{comparison}, figure {label!r}"
    about = {name: _field(raw, name, str, path, where) for name in FIGURE_FIELDS}
    for name, text in about.items():
        if not text.strip():
            raise ConfigError(f"{where}: {name}: empty; say how the figure was measured", path=path)
    values = tuple(_value(v, i, where, path) for i, v in enumerate(_field(raw, "values", list, path, where)))
    assert isinstance(raw, dict)  # _field checked it
    cells = raw.get("cells", {})
    if not isinstance(cells, dict) or not all(isinstance(v, str) for v in cells.values()):
        raise ConfigError(f"{where}: cells: must map column names to text", path=path)
    measured = any(v.measured for v in values)
    unit = _field(raw, "unit", str, path, where) if measured else str(raw.get("unit", ""))
    plot_label = raw.get("plot_label", label)
    if not isinstance(plot_label, str):
        raise ConfigError(f"{where}: plot_label: must be text", path=path)
    return Figure(label, plot_label, unit, values, dict(cells), **about)


def _value(raw: object, index: int, figure: str, path: Path) -> Value:
    where = f"{figure}: values[{index}]"
    series = _field(raw, "series", str, path, where)
    text = _field(raw, "text", str, path, where)
    assert isinstance(raw, dict)
    low, high = raw.get("low"), raw.get("high")
    if low is None and high is None:
        if any(c.isdigit() for c in text):
            raise ConfigError(
                f"{where}.low: missing; {text!r} is a measured figure: give low and high", path=path
            )
        return Value(series, text)
    for name, number in (("low", low), ("high", high)):
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ConfigError(f"{where}.{name}: {number!r} is not a number", path=path)
    assert isinstance(low, int | float) and isinstance(high, int | float)
    if low < 0 or high < low:
        raise ConfigError(f"{where}: low {low} and high {high}: need 0 <= low <= high", path=path)
    return Value(series, text, float(low), float(high))


def _field(raw: object, name: str, kind: type, path: Path, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be an object with {name!r}", path=path)
    if name not in raw:
        raise ConfigError(f"{where}: {name}: missing", path=path)
    value = raw[name]
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: {name}: must be {kind.__name__}, not {value!r}", path=path)
    return value
