"""Score against the fraction of nonzero weights, per precision (the paper's Figures 3 and 6)."""

from __future__ import annotations

from pathlib import Path

from .plotting import ERRORBAR_NOTE, SPREAD_NOTE, Drawn, new_figure, save, series, value_axis
from .points import Points

NAME = "accuracy_vs_density"
TITLE = "Accuracy against the fraction of nonzero weights, per precision (paper Figures 3 and 6)"


def draw(points: Points, out: Path) -> Drawn:
    frame = points.scored().copy()
    frame["nonzero_pct"] = frame["config.sparsity.density"] * 100
    reason = "every configuration in the store has the same fraction of nonzeros"
    skipped = Drawn.unless_varied(
        frame, "nonzero_pct", NAME, TITLE, f"{reason}; it needs trials at two densities or more"
    )
    if skipped is not None:
        return skipped
    figure, ax = new_figure()
    series(ax, frame, points, "nonzero_pct", "config.precision", "precision")
    value_axis(ax, frame["nonzero_pct"], log=True, percent=True)
    ax.set_xlabel("nonzero weights in the sparse layers (%)")
    ax.set_title(f"{points.score_name} against sparsity")
    caption = (
        f"Each point is one configuration (mean over seeds); lines join the best "
        f"configuration at each density on validation data; {SPREAD_NOTE}. {ERRORBAR_NOTE}."
    )
    return Drawn(NAME, TITLE, caption, path=save(figure, out, NAME))
