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


def style(i: int) -> tuple[str, str]:
    """The i-th series' colour and marker: no two of the first hundred series look alike."""
    return COLORS[i % len(COLORS)], MARKERS[(i + i // len(COLORS)) % len(MARKERS)]


def new_figure(width: float = 7.5, height: float = 4.8) -> tuple[Figure, object]:
    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, figure.add_subplot()


def save(figure: Figure, out: Path, name: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    figure.savefig(path, dpi=DPI)
    return path


def errorbars(ax, part: pd.DataFrame, points: Points, x: str, i: int, label: str, **kwargs) -> str:
    """Each configuration's mean score against ``x`` with its 95% CI, in the i-th style; returns
    the colour used."""
    color, marker = style(i)
    ax.errorbar(
        part[x],
        part[f"{points.score}.mean"] * points.scale,
        yerr=np.nan_to_num(part[f"{points.score}.ci95"].to_numpy(float)) * points.scale,
        fmt=marker,
        color=color,
        capsize=3,
        label=label,
        **kwargs,
    )
    return color


def series(ax, frame: pd.DataFrame, points: Points, x: str, by: str, legend_title: str) -> None:
    """One colour per value of ``by``: each configuration's mean score with its CI, and a line
    through the best configuration at each ``x`` (a joint sweep varies other knobs as well)."""
    y = f"{points.score}.mean"
    for i, (name, part) in enumerate(frame.groupby(by, sort=True)):
        color = errorbars(ax, part, points, x, i, str(name), alpha=0.75, markersize=6)
        best = part.groupby(x)[y].max().sort_index()
        ax.plot(best.index, best.to_numpy() * points.scale, color=color, linewidth=1.5)
    ax.set_ylabel(points.score_label)
    ax.grid(True, alpha=0.3)
    ax.legend(title=legend_title, fontsize="small")


def value_axis(ax, values: Sequence[float], log: bool, percent: bool = False) -> None:
    """Ticks at the values the store holds; a log scale when they span a decade or more."""
    values = sorted({float(v) for v in values})
    if log and values[0] > 0 and values[-1] / values[0] >= 10:
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_locator(FixedLocator(_thin(values)))
    ax.set_xticklabels([f"{v:.3g}%" if percent else f"{v:.4g}" for v in _thin(values)])


def memory_axis(ax, values: Sequence[float]) -> None:
    """A log scale when memory spans a decade or more, ticked at 1, 2, 5 x 10^k in plain numbers."""
    values = np.asarray(values, dtype=float)
    if values.max() / values.min() >= 10:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


def _thin(values: list[float], most: int = 12) -> list[float]:
    """At most ``most`` tick values, the first and last kept, so labels never overlap."""
    if len(values) <= most:
        return values
    picks = np.unique(np.linspace(0, len(values) - 1, most).round().astype(int))
    return [values[i] for i in picks]
