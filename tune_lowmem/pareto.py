"""Pareto fronts, hypervolume and seed averages: small pure functions over arrays and frames.

Every objective is turned into a loss (maximised ones negated) before anything is compared, so
one dominance rule serves all directions: ``a`` dominates ``b`` when it is no worse in every
objective and strictly better in one. Equal points do not dominate each other, so ties are all
on the front; a point with a NaN objective is never on it (nor dominates anything).

Optuna offers the front only through a `Study` (`Study.best_trials`) and its hypervolume only
privately, so the arrays here get their own: the exact 2-D sweep and WFG (While et al. 2012,
"A Fast Way of Calculating Exact Hypervolumes") for three or more objectives.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .config import ConfigError
from .outcome import MINIMIZE, Direction

Z_95 = 1.96  # the paper's 95% interval: 1.96 standard errors (Appendix A.1)
_EARLY_FRONT = 64  # final-front points `hypervolume_history` screens later points with


def as_losses(values: object, directions: Sequence[str]) -> np.ndarray:
    """Values as a float (points x objectives) array in which lower is better everywhere."""
    loss = np.asarray(values, dtype=float)
    if loss.ndim != 2:
        raise ConfigError(
            "values", f"shape {loss.shape} is not allowed; (points, objectives) is required"
        )
    if len(directions) != loss.shape[1]:
        raise ConfigError(
            "directions",
            f"{len(directions)} given for {loss.shape[1]} objectives; one per objective is required",
        )
    signs = np.array([Direction.of(direction, "directions").sign for direction in directions])
    return loss * -signs


def _reference(reference_point: Sequence[float], directions: Sequence[str]) -> np.ndarray:
    reference = as_losses(np.asarray(reference_point, dtype=float)[None, :], directions)[0]
    if not np.all(np.isfinite(reference)):
        raise ConfigError(
            "reference_point",
            f"{list(reference_point)!r} is not allowed; finite numbers are required",
        )
    return reference


def _front(loss: np.ndarray) -> np.ndarray:
    """The non-dominated rows of a NaN-free loss array (duplicates all kept).

    Among unique rows in lexicographic order only an earlier row can dominate a later one, so
    the first row left is always on the front and removes every row it dominates.
    """
    if len(loss) == 0:
        return np.zeros(0, dtype=bool)
    unique, inverse = np.unique(loss, axis=0, return_inverse=True)
    on_front = np.zeros(len(unique), dtype=bool)
    remaining = np.arange(len(unique))
    while remaining.size:
        top = remaining[0]
        on_front[top] = True
        remaining = remaining[np.any(unique[remaining] < unique[top], axis=1)]
    return on_front[inverse.reshape(-1)]


def non_dominated_mask(values: object, directions: Sequence[str]) -> np.ndarray:
    """True for the points no other point dominates; NaN rows are False."""
    loss = as_losses(values, directions)
    valid = ~np.isnan(loss).any(axis=1)
    mask = np.zeros(len(loss), dtype=bool)
    mask[valid] = _front(loss[valid])
    return mask


def non_dominated_sort(values: object, directions: Sequence[str]) -> np.ndarray:
    """Front rank of each point (0: the Pareto front, 1: the front once 0 is removed, ...).

    NaN rows are ranked last, one rank behind every valid point.
    """
    loss = as_losses(values, directions)
    ranks = np.zeros(len(loss), dtype=int)
    remaining = np.flatnonzero(~np.isnan(loss).any(axis=1))
    rank = 0
    while remaining.size:
        on_front = _front(loss[remaining])
        ranks[remaining[on_front]] = rank
        remaining = remaining[~on_front]
        rank += 1
    ranks[np.isnan(loss).any(axis=1)] = rank
    return ranks


def _hypervolume(loss: np.ndarray, reference: np.ndarray) -> float:
    """Volume dominated by ``loss`` rows and bounded by ``reference``; rows are NaN-free."""
    inside = loss[np.all(loss < reference, axis=1)]
    if len(inside) == 0:
        return 0.0
    front = np.unique(inside[_front(inside)], axis=0)
    return _hv_2d(front, reference) if loss.shape[1] == 2 else _hv_wfg(front, reference)


def _hv_2d(points: np.ndarray, reference: np.ndarray) -> float:
    """Exact 2-D hypervolume: sweep along the first objective, one rectangle per new best."""
    volume, best = 0.0, reference[1]
    for x, y in points[np.argsort(points[:, 0], kind="stable")]:
        if y < best:
            volume += (reference[0] - x) * (best - y)
            best = y
    return float(volume)


def _hv_wfg(points: np.ndarray, reference: np.ndarray) -> float:
    """WFG: the sum over points of each one's volume not covered by the points after it."""
    total = 0.0
    for i, point in enumerate(points):
        limited = np.unique(np.maximum(points[i + 1 :], point), axis=0)
        total += float(np.prod(reference - point)) - _hv_wfg(limited[_front(limited)], reference)
    return total


def hypervolume(
    values: object, directions: Sequence[str], reference_point: Sequence[float]
) -> float:
    """The volume the points dominate up to the reference point (in the objectives' own units).

    Points that do not strictly dominate the reference contribute nothing; NaN rows are ignored.
    """
    loss = as_losses(values, directions)
    reference = _reference(reference_point, directions)
    return _hypervolume(loss[~np.isnan(loss).any(axis=1)], reference)


def hypervolume_history(
    values_in_trial_order: object, directions: Sequence[str], reference_point: Sequence[float]
) -> np.ndarray:
    """Hypervolume of the first i trials, for i = 1..n: how a search improved over time.

    Only a point no earlier point dominates adds volume. Most points of a long search are
    dominated by an earlier point of the final front: those are found in a few array operations
    (any subset of that front gives the same answer), and only the rest are stepped through."""
    loss = as_losses(values_in_trial_order, directions)
    reference = _reference(reference_point, directions)
    useful = ~np.isnan(loss).any(axis=1)
    useful[useful] = np.all(loss[useful] < reference, axis=1)
    candidates = np.flatnonzero(useful)
    for j in candidates[_front(loss[candidates])][:_EARLY_FRONT]:
        later = candidates[candidates > j]
        candidates = np.concatenate(
            [candidates[candidates <= j], later[~np.all(loss[j] <= loss[later], axis=1)]]
        )
    history = np.zeros(len(loss))
    front = np.empty((0, loss.shape[1]))
    for i in candidates:
        point = loss[i]
        if not np.any(np.all(front <= point, axis=1)):  # it adds volume
            front = np.vstack([front[~np.all(point <= front, axis=1)], point])
            history[i:] = _hypervolume(front, reference)
    return history


def aggregate_seeds(
    df: pd.DataFrame,
    group_col: str,
    metric_cols: Sequence[str],
    sample_col: str | None = None,
) -> pd.DataFrame:
    """Per group (the same point run with several seeds): mean, std, count and 95% CI half-width.

    Columns ``<metric>.mean``, ``.std`` (sample, ddof 1), ``.count`` (non-missing values) and
    ``.ci95`` = 1.96 * std / sqrt(count); a group with one value has a NaN half-width, not 0.
    With `sample_col` (the seed), a group's rows that share its value are one sample, their mean:
    a configuration trained twice with the same seed (two sweeps of one store) is one seed.
    """
    _require_columns(df, [group_col, *([sample_col] if sample_col else [])], "group_col")
    _require_columns(df, metric_cols, "metric_cols")
    numbers = pd.DataFrame(
        {col: df[col].to_numpy(dtype=float, na_value=np.nan) for col in metric_cols}, index=df.index
    )
    groups = df[group_col]
    if sample_col is not None:  # each (group, seed) once: the mean of its runs
        keys = [df[group_col].rename("__group"), df[sample_col].rename("__sample")]
        numbers = numbers.groupby(keys, sort=True, dropna=False).mean()
        groups = numbers.index.get_level_values("__group").to_series(index=numbers.index)
    grouped = numbers.groupby(groups.rename(group_col), sort=True)
    mean, std, count = grouped.mean(), grouped.std(ddof=1), grouped.count()
    columns = {}
    for col in metric_cols:
        columns[f"{col}.mean"] = mean[col]
        columns[f"{col}.std"] = std[col]
        columns[f"{col}.count"] = count[col]
        columns[f"{col}.ci95"] = Z_95 * std[col] / np.sqrt(count[col])
    return pd.DataFrame(columns).reset_index()


def pareto_front(df: pd.DataFrame, objectives: Mapping[str, str]) -> pd.DataFrame:
    """The non-dominated rows on ``objectives`` (column -> direction), sorted by the first minimised
    objective (by the first objective, best first, when none is minimised)."""
    if not objectives:
        raise ConfigError("objectives", "at least one column -> direction is required")
    columns = list(objectives)
    _require_columns(df, columns, "objectives")
    directions = [objectives[col] for col in columns]
    for col, direction in objectives.items():
        Direction.of(direction, f"objectives.{col}")
    values = df[columns].to_numpy(dtype=float, na_value=np.nan)
    front = df[non_dominated_mask(values, directions)]
    key = next((col for col in columns if objectives[col] == MINIMIZE), columns[0])
    return front.sort_values(key, ascending=objectives[key] == MINIMIZE, kind="stable")


def best_under_budget(
    df: pd.DataFrame, memory_col: str, budget: float, accuracy_col: str
) -> pd.Series | None:
    """The most accurate row whose memory is within ``budget`` (ties: less memory), or None."""
    _require_columns(df, [memory_col, accuracy_col], "columns")
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not np.isfinite(budget):
        raise ConfigError("budget", f"{budget!r} is not allowed; a finite number is required")
    memory = df[memory_col].to_numpy(dtype=float, na_value=np.nan)
    accuracy = df[accuracy_col].to_numpy(dtype=float, na_value=np.nan)
    candidates = np.flatnonzero((memory <= budget) & ~np.isnan(accuracy))
    if candidates.size == 0:
        return None
    order = np.lexsort((memory[candidates], -accuracy[candidates]))  # last key sorts first
    return df.iloc[candidates[order[0]]]


def _require_columns(df: pd.DataFrame, columns: Sequence[str], field_name: str) -> None:
    present = [str(col) for col in df.columns]
    for col in columns:
        if col not in df.columns:
            close = difflib.get_close_matches(str(col), present, n=3)
            hint = (
                f"did you mean {', '.join(close)}?"
                if close
                else f"present: {', '.join(present[:8])}"
            )
            raise ConfigError(field_name, f"column {col!r} is not in the table; {hint}")
