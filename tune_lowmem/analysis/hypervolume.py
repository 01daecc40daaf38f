"""Hypervolume of the memory-score front against the number of trials, one line per sweep and its
sampler: how fast each search finds the tradeoff."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .. import pareto
from ..outcome import MAXIMIZE, MINIMIZE
from ..plugins import SAMPLERS
from .plotting import Drawn, new_figure, outside_legend, save, style
from .points import Points

NAME = "hypervolume"
TITLE = "Hypervolume against number of trials, per sampler"


def draw(points: Points, out: Path) -> Drawn:
    trials = sampled(points.trials)
    done = trials["status"] == "completed"
    values = trials[[points.score, points.memory]].to_numpy(dtype=float, na_value=np.nan, copy=True)
    values[~done.to_numpy()] = (
        np.nan
    )  # failed, infeasible and pruned trials cost a trial, add nothing
    valid = ~np.isnan(values).any(axis=1)
    if not valid.any():
        return Drawn.skipped(
            NAME, TITLE, f"no completed trial has both {points.score} and {points.memory}"
        )
    reference = reference_point(values[valid])
    # Divided by the box from the ideal point (best score, least memory) to the reference: 1 would
    # be one trial best in both objectives, so sweeps of any units read alike.
    box = (values[valid, 0].max() - reference[0]) * (reference[1] - values[valid, 1].min())
    figure, ax = new_figure()
    named = []
    for i, (sweep, part) in enumerate(trials.groupby("sweep", sort=True)):
        order = trials.index.get_indexer(
            part.sort_values(["started_at", "trial_id"], na_position="last").index
        )
        history = pareto.hypervolume_history(values[order], (MAXIMIZE, MINIMIZE), reference)
        sampler, from_store = sampler_of(part, sweep)
        named.append(from_store)
        color, marker = style(i)
        ax.plot(
            np.arange(1, len(history) + 1),
            history / box,
            marker=marker,
            color=color,
            drawstyle="steps-post",
            label=f"{sweep} ({sampler})",
        )
    ax.set_xlabel("trials, in the order they started")
    ax.set_ylabel("hypervolume (fraction of the ideal box)")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Hypervolume of {points.score_name} (max) and memory (min)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3)
    outside_legend(ax, "sweep (sampler)")
    caption = (
        "Area dominated by the sampler's trials so far (a sweep's baseline left out), up to the "
        f"reference point ({points.score} {reference[0]:.4g}, {points.memory} "
        f"{reference[1]:.4g} MB) just beyond the worst values in the store, as a fraction of the box from the ideal point (best score, "
        "least memory in the store) to it; failed and infeasible trials count as trials and add "
        "nothing."
    )
    if not all(named):
        caption += " The store has no sampler column: samplers are read from the sweep names."
    return Drawn(NAME, TITLE, caption, path=save(figure, out, NAME))


def sampled(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials a sampler proposed: a sweep's baseline (a row without a point, in a store
    whose rows have points) is no trial of its search."""
    if "point" not in trials or trials["point"].isna().all():  # a store older than points
        return trials
    return trials[trials["point"].notna()]


def reference_point(values: np.ndarray) -> tuple[float, float]:
    """(score, memory) just worse than the worst of each, so every stored point counts."""
    score, memory = values[:, 0], values[:, 1]
    return float(score.min() - _margin(score)), float(memory.max() + _margin(memory))


def _margin(column: np.ndarray) -> float:
    """5% of the column's spread (of its value when all are equal)."""
    return 0.05 * float(np.ptp(column) or abs(column[0]) or 1.0)


def sampler_of(trials: pd.DataFrame, sweep: str) -> tuple[str, bool]:
    """The sweep's sampler and whether the store said so (else it is read from the sweep's name)."""
    if "sampler" in trials.columns and trials["sampler"].notna().any():
        return str(trials["sampler"].dropna().iloc[0]), True
    words = re.split(r"[-_.]", sweep.lower())
    return next((s for s in SAMPLERS.names() if s in words), "sampler unknown"), False
