"""What the front's memory costs in time: each front configuration's training memory against its
seconds per update, the baseline's time a line across, so a reader sees the price of each saving
beside the accuracy the front already shows."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from . import counted, slowdown
from .plotting import Drawn, memory_axis, new_figure, save
from .points import Points

NAME = "memory_vs_time"
TITLE = "Training memory against time per update, the Pareto front's configurations"


def draw(points: Points, out: Path) -> Drawn:
    timed = [(row, *slowdown.seconds(row)) for _, row in points.front().iterrows()]
    timed = [(row, value, kind) for row, value, kind in timed if kind is not None]
    if not timed:
        return Drawn.skipped(
            NAME,
            TITLE,
            "no configuration of the front has a time per update, measured or predicted",
        )
    figure, ax = new_figure(8.5, 5.0)
    memory = np.array([row[f"{points.memory}.mean"] for row, _, _ in timed], dtype=float)
    seconds = np.array([value for _, value, _ in timed])
    for kind, face in (("measured", "#1f77b4"), ("predicted", "none")):
        mine = np.array([k == kind for _, _, k in timed])
        if mine.any():
            ax.plot(
                memory[mine],
                seconds[mine],
                "o",
                markersize=9,
                markerfacecolor=face,
                markeredgecolor="#1f77b4",
                markeredgewidth=1.5,
                linestyle="none",
                label=f"{kind} seconds per update",
            )
    for (row, _, _), x, y in zip(timed, memory, seconds, strict=True):
        ax.annotate(
            row["configuration"],
            (x, y),
            xytext=(6, 4),
            textcoords="offset points",
            fontsize="small",
        )
    done = points.trials[points.trials["status"] == "completed"]
    base = slowdown.baseline(done)
    kind = next((k for k, v in (base.seconds if base else {}).items() if not math.isnan(v)), None)
    if kind is not None:
        ax.axhline(base.seconds[kind], color="#d62728", linestyle="--", linewidth=1.2)
        ax.annotate(
            f"baseline ({base.said(kind)})",
            (0.01, base.seconds[kind]),
            xycoords=("axes fraction", "data"),
            xytext=(0, 4),
            textcoords="offset points",
            color="#d62728",
            fontsize="small",
        )
    highest = max(seconds.max(), base.seconds[kind] if kind is not None else 0.0)
    ax.set_ylim(0, highest * 1.15)  # room above the highest point's label
    ax.margins(x=0.12)
    memory_axis(ax, memory)
    ax.set_xlabel(f"{counted.words(points.memory)}, {counted.counted(points.memory) or 'stored'}")
    ax.set_ylabel("seconds per update")
    ax.set_title("Training memory against time per update, the Pareto front")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2)
    caption = (
        f"Each point is one configuration of the front on {points.score} and {points.memory} "
        "(mean over seeds): filled where its trials measured their seconds per update "
        f"({counted.how(slowdown.KINDS['measured'])}), hollow where only the profiler's "
        "prediction is known. The dashed red line is the sweep's baseline (every technique off), "
        "where it was trained and timed. Times are of the device each trial ran on."
    )
    return Drawn(NAME, TITLE, caption, path=save(figure, out, NAME))
