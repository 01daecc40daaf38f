"""Score against training memory, one colour per technique combination, the Pareto front marked
(the paper's Figures 7 and 10)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .plotting import ERRORBAR_NOTE, Drawn, memory_axis, new_figure, save, style
from .points import Points

NAME = "accuracy_vs_memory"
TITLE = (
    "Accuracy against training memory per technique combination, Pareto front marked "
    "(paper Figures 7 and 10)"
)


def draw(points: Points, out: Path) -> Drawn:
    frame = points.scored()
    if len(frame) < 2:
        return Drawn(
            NAME,
            TITLE,
            "",
            note="skipped: it needs two configurations or more with both a "
            f"score and {points.memory}",
        )
    x, y, ci = f"{points.memory}.mean", f"{points.score}.mean", f"{points.score}.ci95"
    figure, ax = new_figure(8.5, 5.2)
    for i, (name, part) in enumerate(frame.groupby("techniques", sort=True)):
        color, marker = style(i)
        ax.errorbar(
            part[x],
            part[y] * points.scale,
            yerr=np.nan_to_num(part[ci].to_numpy(float)) * points.scale,
            fmt=marker,
            color=color,
            alpha=0.8,
            capsize=3,
            markersize=7,
            linestyle="none",
            label=name,
        )
    front = points.front()
    ax.step(
        front[x],
        front[y] * points.scale,
        where="post",
        color="black",
        linewidth=1.2,
        linestyle="--",
        zorder=1,
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
    ax.set_xlabel("predicted training memory (MB)")
    ax.set_ylabel(points.score_label)
    ax.set_title(f"{points.score_name} against training memory")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="techniques", fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    caption = (
        f"Each point is one configuration (mean over seeds); circled points are non-dominated "
        f"(no other is both smaller and more accurate); the dashed line is the best score "
        f"reachable within each memory. {ERRORBAR_NOTE}."
    )
    return Drawn(NAME, TITLE, caption, path=save(figure, out, NAME))
