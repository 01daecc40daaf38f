"""What every figure shares: a drawn-or-skipped result, a PNG writer and the points-with-CI series.

Figures are built with matplotlib's object API (`matplotlib.figure.Figure`, rendered by Agg on
save), so drawing needs no display and changes no global pyplot state of the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

from .points import Points

DPI = 130
COLORS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
ERRORBAR_NOTE = (
    "Error bars: 95% CI over seeds (1.96 standard errors), where a point has two or more"
)
SPREAD_NOTE = "points that would hide each other are moved sideways by up to 2% of the axis"


@dataclass(frozen=True)
class Drawn:
    """One figure of the report: written to ``path``, or skipped with the reason in ``note``."""

    name: str  # file stem, e.g. accuracy_vs_memory
    title: str
    caption: str
    path: Path | None = None
    note: str | None = None

    @classmethod
    def skipped(cls, name: str, title: str, reason: str) -> Drawn:
        """A figure the store cannot draw, with the reason the report shows in its place."""
        return cls(name, title, "", note=f"skipped: {reason}")

    @classmethod
    def unless_varied(cls, frame, column: str, name: str, title: str, reason: str) -> Drawn | None:
        """Skipped for `reason` when every row has the same `column` (a curve over it needs two
        values or more); None when it varies."""
        return cls.skipped(name, title, reason) if frame[column].nunique() < 2 else None


def style(i: int) -> tuple[str, str]:
    """The i-th series' colour and marker: no two of the first hundred series look alike."""
    return COLORS[i % len(COLORS)], MARKERS[(i + i // len(COLORS)) % len(MARKERS)]


def new_figure(width: float = 7.5, height: float = 4.8) -> tuple[Figure, object]:
    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, figure.add_subplot()


def save(figure: Figure, out: Path, name: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    figure.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 1})  # zlib: 1 is far faster than 6
    return path


def spread(x: Sequence[float], y: Sequence[float], log: bool) -> np.ndarray:
    """``x`` moved sideways where markers would hide each other: points within 2% of both axes'
    ranges (on a log x axis, of its decades) are fanned out across that width, centred on their
    true x. Crowds of more than eight are left alone: there transparency shows the density."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    u = np.log10(x) if log else x.copy()
    width = 0.02 * ((np.nanmax(u) - np.nanmin(u)) or 1.0)
    height = 0.02 * ((np.nanmax(y) - np.nanmin(y)) or 1.0)
    cells: dict[tuple[float, float], list[int]] = {}
    for i, key in enumerate(zip(np.floor(u / width), np.floor(y / height), strict=True)):
        cells.setdefault(key, []).append(i)
    for members in cells.values():
        if 1 < len(members) <= 8:
            order = np.asarray(members)[np.argsort(y[members], kind="stable")]
            u[order] += (np.arange(len(order)) - (len(order) - 1) / 2) * width
    return 10**u if log else u


def wants_log(values: Sequence[float]) -> bool:
    """A log scale when positive values span a decade or more."""
    values = np.asarray(values, dtype=float)
    return bool(np.nanmin(values) > 0 and np.nanmax(values) / np.nanmin(values) >= 10)


def errorbars(
    ax, part: pd.DataFrame, points: Points, x: np.ndarray, i: int, label: str, **kwargs
) -> str:
    """Each configuration's mean score at ``x`` (already spread) with its 95% CI, in the i-th
    style, half transparent with a dark edge so overlaps show; returns the colour used."""
    color, marker = style(i)
    y = part[f"{points.score}.mean"] * points.scale
    error = np.nan_to_num(part[f"{points.score}.ci95"].to_numpy(float)) * points.scale
    edge = {"markeredgecolor": "black", "markeredgewidth": 0.6}
    if error.any():
        ax.errorbar(
            x, y, yerr=error, fmt=marker, color=color, capsize=3, label=label, **edge, **kwargs
        )
    else:  # single seeds: no bars to draw, and thousands of points draw fast as one line
        kwargs.pop("linestyle", None)
        ax.plot(x, y, marker, color=color, label=label, **edge, **kwargs)
    return color


def series(ax, frame: pd.DataFrame, points: Points, x: str, by: str, legend_title: str) -> None:
    """One colour per value of ``by``: each configuration's mean score with its CI, and a line
    through the best configuration at each ``x`` on validation data (a joint sweep varies other
    knobs as well)."""
    shown = spread(frame[x], frame[f"{points.score}.mean"] * points.scale, wants_log(frame[x]))
    for i, (name, part) in enumerate(frame.groupby(by, sort=True)):
        where = frame.index.get_indexer(part.index)
        color = errorbars(ax, part, points, shown[where], i, str(name), alpha=0.7, markersize=7)
        best = points.best(part, x)
        ax.plot(best.index, best.to_numpy() * points.scale, color=color, linewidth=1.5)
    ax.set_ylabel(points.score_label)
    ax.grid(True, alpha=0.3)
    outside_legend(ax, legend_title)


def outside_legend(ax, title: str | None = None) -> None:
    """The legend right of the axes, where it never covers data."""
    ax.legend(title=title, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


def value_axis(ax, values: Sequence[float], log: bool, percent: bool = False) -> None:
    """Ticks at the values the store holds; a log scale when they span a decade or more."""
    values = sorted({float(v) for v in values})
    if log and wants_log(values):
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_locator(FixedLocator(thin(values)))
    ax.set_xticklabels([f"{v:.3g}%" if percent else f"{v:.4g}" for v in thin(values)])


def memory_axis(ax, values: Sequence[float]) -> None:
    """A log scale when memory spans a decade or more, ticked at 1, 2, 5 x 10^k in plain numbers."""
    if wants_log(values):
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


def thin(values: list, most: int = 12) -> list:
    """At most ``most`` of ``values``, evenly spaced, the first and last kept: tick labels that
    never overlap, a few budgets out of many."""
    if len(values) <= most:
        return values
    picks = np.unique(np.linspace(0, len(values) - 1, most).round().astype(int))
    return [values[i] for i in picks]
