"""The paper's published figures beside the store's own, for reproduction sweeps.

The figures are data (``paper_table3.yaml``, with their source); a row of the paper is compared
with the store's configuration that has every field the row names. Several such configurations
(other learning rates, say) are narrowed to the best on validation data, as every choice is;
the paper's figures are test figures, so the store's test metric is what stands beside them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import yaml

from .points import Points, metric_scale

DATA = Path(__file__).with_name("paper_table3.yaml")


@functools.cache
def published() -> dict:
    """The paper's rows and their source, as kept in the project."""
    return yaml.safe_load(DATA.read_text())


def comparison(points: Points) -> pd.DataFrame:
    """One line per published figure of each paper row: paper, this store, difference; empty
    when no paper configuration is in the store (not a reproduction sweep)."""
    tasks = set(points.groups["config.task"])
    rows = [row for row in published()["rows"] if row["match"].get("task") in tasks]
    matches = {row["label"]: _match(points, row["match"]) for row in rows}
    if not rows or all(m is None for m in matches.values()):
        return pd.DataFrame()
    lines = []
    for row in rows:
        group = matches[row["label"]]
        base = _store_baseline(points, row, rows, matches)
        ours = _ours(points, group, base)
        for figure, paper in _figures(row):
            value = ours.get(figure, math.nan)
            lines.append(
                {
                    "configuration": row["label"],
                    "figure": figure,
                    "paper": paper,
                    "this store": value,
                    "difference": value - paper,
                    "source": row["where"],
                    "store trials": ", ".join(group["trial_ids"]) if group is not None else "",
                }
            )
    return pd.DataFrame(lines)


def _figures(row: Mapping) -> list[tuple[str, float]]:
    names = {
        "memory_mb": "memory (MB)",
        "reduction": "reduction (x)",
        "score": "test score",
        "change": "change vs baseline",
    }
    return [(label, float(row[key])) for key, label in names.items() if row.get(key) is not None]


def _match(points: Points, match: Mapping) -> pd.Series | None:
    """The store's configuration with every field of ``match`` (the best on validation data)."""
    groups = points.scored()
    keep = pd.Series(True, index=groups.index)
    for key, wanted in match.items():
        col = f"config.{key}"
        if col not in groups:
            return None
        values = groups[col]
        if wanted is None:
            keep &= values.isna()
        elif isinstance(wanted, (int, float)):
            keep &= (values.astype(float) - float(wanted)).abs() < 1e-9
        else:
            keep &= values.astype(str) == str(wanted)
    found = groups[keep.fillna(False).astype(bool)]
    if found.empty:
        return None
    return points.top(found)


def _store_baseline(points: Points, row: Mapping, rows: list, matches: dict) -> pd.Series | None:
    """The store's match of the paper's baseline of the same task (the row with reduction 1)."""
    task = row["match"].get("task")
    for other in rows:
        if other["match"].get("task") == task and other.get("reduction") == 1.0:
            return matches[other["label"]]
    return None


def _ours(points: Points, group: pd.Series | None, base: pd.Series | None) -> dict[str, float]:
    if group is None:
        return {}
    memory = group[f"{points.memory}.mean"]
    ours = {"memory (MB)": memory}
    if points.test is not None:
        ours["test score"] = group[f"{points.test}.mean"] * metric_scale(points.test)
    if base is not None:
        ours["reduction (x)"] = base[f"{points.memory}.mean"] / memory
        if points.test is not None:
            ours["change vs baseline"] = (
                group[f"{points.test}.mean"] - base[f"{points.test}.mean"]
            ) * metric_scale(points.test)
    return ours
