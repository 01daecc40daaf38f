"""The training setup a report summarises, read from the store's own columns: what was fixed
(task, model, epochs, data sizes, device), what was searched and over which values, the seeds,
the samplers and the trials by status; a reviewer reads the setup without the code."""

from __future__ import annotations

import pandas as pd

from .. import store
from .points import Points, hashable, plain, value_codes

_LEFT_OUT = ("config.seed", "config.data.root", "config.data.num_workers")
_MOST_VALUES = 8


def rows(points: Points) -> list[tuple[str, str]]:
    """(what, value) lines: the store's trials, then every config field fixed or searched."""
    trials = points.trials
    counts = trials["status"].value_counts()
    samplers = trials["sampler"].dropna().unique() if "sampler" in trials else []
    seeds = trials["config.seed"].dropna().astype(int)
    per_config = points.groups["n"].value_counts().sort_index()
    lines = [
        ("sweeps", ", ".join(sorted(trials["sweep"].unique()))),
        (
            "trials by status",
            f"{len(trials)}: " + ", ".join(f"{int(counts.get(s, 0))} {s}" for s in store.STATUSES),
        ),
        ("sampler", ", ".join(sorted(map(str, samplers))) or "not recorded in the store"),
        ("objectives", ", ".join(f"{c} ({way})" for c, way in points.objectives.items())),
        ("seeds per configuration", seeds_per_configuration(points.groups["n"], seeds)),
        (
            "completed configurations",
            f"{len(points.groups)}; "
            + ", ".join(f"{n} with {k} seed{'s' * (k > 1)}" for k, n in per_config.items()),
        ),
    ]
    config = [c for c in trials.columns if c.startswith("config.") and c not in _LEFT_OUT]
    fixed, searched = [], []
    for col in config:
        values = trials[col].dropna()
        if values.empty:
            continue
        unset = " (or null)" if values.size < len(trials) else ""
        target = fixed if value_codes(values).max() == 0 and not unset else searched
        target.append((col.removeprefix("config."), _values(values) + unset))
    return (
        lines
        + [(f"fixed: {k}", v) for k, v in fixed]
        + [(f"searched: {k}", v) for k, v in searched]
    )


def seeds_per_configuration(counts: pd.Series, seeds: pd.Series) -> str:
    """``1 (seed 0)`` or ``1 to 3 (seeds 0, 1, 2)``: how many seeds each completed configuration
    has, then which seed values the trials used (a bare "0" reads as no seed at all)."""
    low, high = int(counts.min()), int(counts.max())
    many = f"{low}" if low == high else f"{low} to {high}"
    values = sorted(seeds.unique())
    return f"{many} (seed{'s' * (len(values) > 1)} {', '.join(map(str, values))})"


def _values(values: pd.Series) -> str:
    """One value as it is; several as a list, or as a range when they are many numbers."""
    distinct = sorted(hashable(values).unique(), key=str)
    if len(distinct) == 1:
        return plain(distinct[0])
    if len(distinct) > _MOST_VALUES and pd.api.types.is_numeric_dtype(values):
        return f"{len(distinct)} values from {plain(values.min())} to {plain(values.max())}"
    if pd.api.types.is_numeric_dtype(values):
        distinct = sorted(distinct)
    shown = ", ".join(plain(v) for v in distinct[:_MOST_VALUES])
    return shown + (
        f" and {len(distinct) - _MOST_VALUES} more" if len(distinct) > _MOST_VALUES else ""
    )
