"""Training memory split into the paper's three parts, one stacked bar per configuration (Fig 1)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from ..outcome import MEASURED_TOTAL, MEMORY_OBJECTIVE, PREDICTED_PARTS
from . import counted
from .plotting import Drawn, new_figure, save
from .points import MEMORY_PARTS, Points

NAME = "memory_parts"
TITLE = "Training memory by part: model, optimizer, activation (paper Figure 1)"
MOST_BARS = 16
LABEL_WIDTH = 32  # characters of a bar's label a line: long names wrap rather than widen the margin
PART_COLORS = {"model": "#4c72b0", "optimizer": "#dd8452", "activation": "#55a868"}


def draw(points: Points, out: Path) -> Drawn:
    parts = [f"{PREDICTED_PARTS[part]}.mean" for part in MEMORY_PARTS]
    frame = points.groups.dropna(subset=parts)
    if frame.empty:
        return Drawn.skipped(NAME, TITLE, "no completed trial has the predicted memory parts")
    # Configurations that differ only in knobs memory does not see (a learning rate) share one
    # bar; one label with two memories is two bars, told apart by their other settings.
    frame = frame.sort_values(f"{points.memory}.mean").copy()
    frame["label"] = frame["configuration"]
    keys = frame[parts].round(6).assign(label=frame["label"])
    sharing = keys.groupby(list(keys.columns), sort=False)["label"].transform("size")
    frame = frame[~keys.duplicated()]
    sharing = sharing[frame.index]
    frame.loc[sharing > 1, "label"] += " (" + sharing.astype(str) + " configurations)"
    twice = frame["label"].duplicated(keep=False)
    frame.loc[twice, "label"] += " (" + frame.loc[twice, "other_settings"] + ")"
    shown = frame
    if len(frame) > MOST_BARS:  # evenly spread over memory, smallest and largest kept
        shown = frame.iloc[np.unique(np.linspace(0, len(frame) - 1, MOST_BARS).round().astype(int))]
    figure, ax = new_figure(8.0, 2.0 + 0.5 * len(shown))
    left = np.zeros(len(shown))
    rows = np.arange(len(shown))
    for part, col in zip(MEMORY_PARTS, parts):
        values = shown[col].to_numpy(float)
        ax.barh(rows, values, left=left, color=PART_COLORS[part], label=part, height=0.7)
        left += values
    measured = shown[f"{MEASURED_TOTAL}.mean"].to_numpy(float)
    if np.isfinite(measured).any():
        label = "measured total (accounted)"
        ax.plot(measured, rows, "k|", markersize=16, markeredgewidth=2, label=label)
    ends = np.fmax(left, measured)  # the label starts past the measured mark
    sparse = counted.differing(shown, MEMORY_OBJECTIVE, ".mean")
    if sparse.any():  # what the masked step holds, where it is not the bars' accounting
        held = shown[f"{counted.STORED_TOTALS[MEMORY_OBJECTIVE]}.mean"].to_numpy(float)
        ax.plot(held[sparse], rows[sparse], "rD", markersize=6, label="predicted total (stored)")
        ends = np.fmax(ends, np.where(sparse, held, 0))
    texts = [f"  {total:.3g} MB" for total in left]
    for row in np.flatnonzero(sparse):
        texts[row] += f" ({held[row]:.3g} stored)"
    for row, text, end in zip(rows, texts, ends):  # unclipped: the layout makes room for it
        ax.text(end, row, text, va="center", fontsize="small", clip_on=False)
    ax.set_yticks(rows, [textwrap.fill(label, LABEL_WIDTH) for label in shown["label"]])
    ax.set_xlim(0, ends.max() * 1.05)
    ax.set_xlabel("predicted training memory (MB, accounted)")
    ax.set_title("Training memory by part")
    handles, labels = ax.get_legend_handles_labels()  # below: the page shows the figure narrow
    figure.legend(handles, labels, loc="outside lower center", ncols=3, fontsize="small")
    ax.grid(True, axis="x", alpha=0.3)
    caption = (
        "Predicted from shapes by the profiler: model = parameters, optimizer = gradient buffer "
        "plus optimizer state, activation = the peak of stored activations and their gradients. "
        "Configurations that differ only in settings memory does not depend on (learning rate, "
        "rewiring) share a bar, which says how many it stands for. Bars, totals and the measured "
        f"mark are accounted; a red diamond is a sparse configuration's stored total. "
        f"Memory {counted.LEGEND.removeprefix('memory')}."
    )
    if len(shown) < len(frame):
        caption += f" {len(shown)} of {len(frame)} configurations shown, spread evenly over memory."
    return Drawn(NAME, TITLE, caption, path=save(figure, out, NAME))
