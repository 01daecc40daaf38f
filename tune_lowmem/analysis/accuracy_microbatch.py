"""Score against the microbatch size, true and simulated microbatching apart (the paper's Fig 4)."""

from __future__ import annotations

from pathlib import Path

from .plotting import ERRORBAR_NOTE, SPREAD_NOTE, Drawn, new_figure, save, series, value_axis
from .points import BATCH_FIELDS, Points, batch_sizes

NAME = "accuracy_vs_microbatch"
TITLE = "Accuracy against microbatch size (paper Figure 4)"


def draw(points: Points, out: Path) -> Drawn:
    frame = points.scored().copy()
    batch = batch_sizes(frame)
    frame["microbatch"] = frame["config.microbatch.size"].fillna(batch).astype(int)
    reason = "every configuration in the store uses the same microbatch size"
    skipped = Drawn.unless_varied(
        frame, "microbatch", NAME, TITLE, f"{reason}; it needs trials at two sizes or more"
    )
    if skipped is not None:
        return skipped
    # One microbatch per minibatch is plain training, which true microbatching reduces to exactly.
    split = frame["microbatch"] < batch
    frame["mode"] = frame["config.microbatch.mode"].where(split, "true")
    figure, ax = new_figure()
    series(ax, frame, points, "microbatch", "mode", "microbatching")
    value_axis(ax, frame["microbatch"], log=True)
    fields = [c for c in BATCH_FIELDS if c in frame and frame[c].notna().any()]
    unit = " or ".join(BATCH_FIELDS[c] for c in fields)
    ax.set_xlabel(f"microbatch size ({unit}; the largest is the whole minibatch)")
    ax.set_title(f"{points.score_name} against microbatch size")
    caption = (
        "true: microbatches run one after another, gradients accumulated; simulated: batch-norm "
        "statistics over microbatch-sized groups of the full batch. Lines join the best "
        f"configuration at each size on validation data; {SPREAD_NOTE}. {ERRORBAR_NOTE}."
    )
    return Drawn(NAME, TITLE, caption, path=save(figure, out, NAME))
