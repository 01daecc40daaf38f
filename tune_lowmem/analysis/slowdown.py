"""Time per update as an answer weighs it: a configuration's seconds per update and their ratio
to the sweep's baseline's (its slowdown), for `pareto --max-slowdown`/``--max-update-s``, the
answer's comments and the report's tables.

A configuration's seconds are the mean over its seeds of what its trials measured; where none
measured any (a trial that stopped before its steady state, a store written before trials
measured time) the profiler's prediction stands in, and a slowdown is then predicted over
predicted, never one kind of figure over the other. The baseline is the sweep's own (rows
without a ``point``: `search.baseline`), its seconds the median over its seeds, so that one slow
seed does not move every ratio. A configuration with neither figure has no time: no time
constraint keeps it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from ..config import ConfigError
from ..outcome import MEASURED_UPDATE_S, PREDICTED_UPDATE_S

KINDS = {"measured": MEASURED_UPDATE_S, "predicted": PREDICTED_UPDATE_S}  # first: preferred


@dataclass(frozen=True)
class Baseline:
    """The sweep's baseline: its seconds per update by kind (NaN: none), over how many seeds."""

    seconds: dict[str, float]
    seeds: int

    def said(self, kind: str) -> str:
        """Its figure of one kind as an answer says it: measured, the median of its 3 seeds:
        0.12 s."""
        seeds = f"{self.seeds} seed" + "s" * (self.seeds != 1)
        return f"{kind}, the median of its {seeds}: {self.seconds[kind]:.3g} s"


def told(row: Mapping, done: pd.DataFrame) -> str | None:
    """A configuration's time per update in words, predicted and measured, and its ratio to the
    baseline's: what an answer's comment says (None: the store has no time for it)."""
    figures = [
        f"{kind} {value:.3g} s"
        for kind, col in KINDS.items()
        if not math.isnan(value := float(row.get(f"{col}.mean", math.nan)))
    ]
    if not figures:
        return None
    base = baseline(done)
    times, kind = ratio(row, base)
    if kind is not None:
        against = f"{times:.3g}x the baseline's ({base.said(kind)})"
    elif base is None:
        against = "no baseline trained to compare with"
    else:
        against = "the baseline has no time of the same kind to compare with"
    return f"time per update: {', '.join(reversed(figures))}; {against}"


def positive(value: float | None, flag: str) -> float | None:
    """A limit as the API takes it: None, or a finite number above zero."""
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not 0 < value < math.inf:
        raise ConfigError(flag, f"{value!r} is not allowed; a number > 0 is required")
    return float(value)


def baseline_rows(done: pd.DataFrame) -> pd.DataFrame:
    """The completed rows of a sweep's baseline: those without a point, in a store whose rows
    have points (a store older than points has no baseline rows)."""
    if "point" not in done or done["point"].isna().all():
        return done.iloc[:0]
    return done[done["point"].isna()]


def baseline(done: pd.DataFrame, flag: str | None = None) -> Baseline | None:
    """The baseline of the chosen trials (None: none trained). Sweeps of several bases train
    several: refused naming `flag` when one is needed, else None (no ratio is shown)."""
    rows = baseline_rows(done)
    groups = rows["seed_group"].unique()
    if len(groups) > 1 and flag is not None:
        raise ConfigError(
            flag,
            f"the chosen trials hold {len(groups)} baselines (of different bases); "
            "choose one sweep with --sweep",
        )
    return of_rows(rows) if len(groups) == 1 else None


def of_rows(rows: pd.DataFrame) -> Baseline:
    """A baseline from its completed trial rows (non-empty, one seed group): per kind, the
    median over its seeds of each seed's mean."""
    per_seed = rows.groupby("config.seed")
    seconds = {
        kind: float(per_seed[col].mean().median()) if col in rows else math.nan
        for kind, col in KINDS.items()
    }
    return Baseline(seconds, int(rows["config.seed"].nunique()))


def seconds(row: Mapping) -> tuple[float, str | None]:
    """A configuration's seed-mean seconds per update and their kind (measured, else predicted;
    NaN and None: neither)."""
    for kind, col in KINDS.items():
        value = float(row.get(f"{col}.mean", math.nan))
        if not math.isnan(value):
            return value, kind
    return math.nan, None


def ratio(row: Mapping, base: Baseline | None) -> tuple[float, str | None]:
    """A configuration's seconds per update over the baseline's, of the same kind (measured,
    else predicted), and that kind; NaN and None where no kind has both figures."""
    if base is not None:
        for kind, col in KINDS.items():
            mine = float(row.get(f"{col}.mean", math.nan))
            if not math.isnan(mine) and not math.isnan(base.seconds[kind]):
                return mine / base.seconds[kind], kind
    return math.nan, None


def has_time(done: pd.DataFrame) -> bool:
    """Whether any trial has a time per update, measured or predicted."""
    return any(col in done and done[col].notna().any() for col in KINDS.values())


def within(
    groups: pd.DataFrame,
    done: pd.DataFrame,
    max_slowdown: float | None,
    max_update_s: float | None,
) -> pd.DataFrame:
    """The configurations within both limits (None: no limit); refused, naming the flag, when
    the store has no time figure (or, for a slowdown, no baseline with one)."""
    flags = {"--max-slowdown": max_slowdown, "--max-update-s": max_update_s}
    for flag, value in flags.items():
        if value is not None and not has_time(done):
            raise ConfigError(
                flag,
                "the store has no time per update (measured or predicted); trials written "
                "before trials timed themselves have none",
            )
    base = None
    if max_slowdown is not None:
        base = baseline(done, "--max-slowdown")
        if base is None or all(math.isnan(v) for v in base.seconds.values()):
            why = "trained no baseline" if base is None else "has no time for its baseline"
            raise ConfigError(
                "--max-slowdown",
                f"the store {why} (rows without a point: a space's `baseline: true`); "
                "--max-update-s limits the seconds themselves",
            )
    keep = [
        (max_update_s is None or seconds(row)[0] <= max_update_s)
        and (base is None or ratio(row, base)[0] <= max_slowdown)
        for _, row in groups.iterrows()
    ]
    return groups[pd.Series(keep, index=groups.index, dtype=bool)]
