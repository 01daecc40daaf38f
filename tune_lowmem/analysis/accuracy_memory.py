"""Score against training memory, one colour per technique combination, the Pareto front marked
(the paper's Figures 7 and 10)."""

from __future__ import annotations

from pathlib import Path

from . import counted
from .plotting import (
    ERRORBAR_NOTE,
    SPREAD_NOTE,
    Drawn,
    errorbars,
    memory_axis,
    new_figure,
    outside_legend,
    save,
    spread,
    wants_log,
)
from .points import Points

NAME = "accuracy_vs_memory"
TITLE = (
    "Accuracy against training memory per technique combination, Pareto front marked "
    "(paper Figures 7 and 10)"
)


def draw(points: Points, out: Path) -> Drawn:
    frame = points.scored()
    if len(frame) < 2:
        return Drawn.skipped(
            NAME,
            TITLE,
            f"it needs two configurations or more with both a score and {points.memory}",
        )
    x, y = f"{points.memory}.mean", f"{points.score}.mean"
    figure, ax = new_figure(8.5, 5.2)
    shown = spread(frame[x], frame[y] * points.scale, wants_log(frame[x]))
    size = 7 if len(frame) <= 200 else 4  # thousands of points: smaller markers, less overlap
    for i, (name, part) in enumerate(frame.groupby("techniques", sort=True)):
        where = frame.index.get_indexer(part.index)
        errorbars(
            ax, part, points, shown[where], i, name, alpha=0.7, markersize=size, linestyle="none"
        )
    front = points.front()
    ax.step(
        front[x],
        front[y] * points.scale,
        where="post",
        color="black",
        linewidth=1.2,
        linestyle="--",
        zorder=2.5,  # over the points: the front stays visible in a crowd
    )
    ax.plot(
        front[x],
        front[y] * points.scale,
        "o",
        markersize=13,
        markerfacecolor="none",
        markeredgecolor="black",
        markeredgewidth=1.2,
        label="Pareto front",
        zorder=3,
    )
    memory_axis(ax, frame[x])
    ax.set_xlabel(f"{counted.words(points.memory)}, {counted.counted(points.memory)}")
    ax.set_ylabel(points.score_label)
    ax.set_title(f"{points.score_name} against training memory")
    ax.grid(True, which="both", alpha=0.3)
    outside_legend(ax, "techniques")
    caption = (
        f"Each point is one configuration (mean over seeds); circled points are non-dominated "
        f"on validation data (no other is both smaller and better); the dashed line is the best score "
        f"reachable within each memory; {SPREAD_NOTE}. {ERRORBAR_NOTE}. "
        f"Memory {counted.LEGEND.removeprefix('memory')}."
    )
    return Drawn(NAME, TITLE, caption, path=save(figure, out, NAME))
