"""The Pareto query behind `tune-lowmem pareto`: seed-averaged configurations of a store, their
non-dominated front by memory, or the most accurate one within a memory budget as TrialConfig
YAML; rendered as a table, JSON or CSV."""

from __future__ import annotations

import json
import math

import pandas as pd

from .. import pareto
from ..config import ConfigError, TrialConfig
from .points import (
    MEMORY,
    NoResult,
    completed,
    configurations,
    load_trials,
    parse_objectives,
    score_column,
    trial_config,
)


def answer(
    root: str,
    sweep: str | None = None,
    task: str | None = None,
    objectives: list[str] | None = None,
    max_memory_mb: float | None = None,
    min_accuracy: float | None = None,
    form: str = "table",
) -> str:
    """The front (or, given ``max_memory_mb``, the best configuration within it) as text."""
    done = completed(load_trials(root, sweep, task))
    if objectives:
        chosen = parse_objectives(objectives, done)
    else:
        chosen = {score_column(done, prefer="val"): "maximize", MEMORY: "minimize"}
    names = list(chosen)
    groups = configurations(done)
    if min_accuracy is not None:
        score = _objective(chosen, "maximize", "--min-accuracy")
        values = groups[f"{score}.mean"]
        groups = groups[values >= min_accuracy]
        if groups.empty:
            raise NoResult(
                f"no configuration has {score} >= {min_accuracy:g}; "
                f"the best found is {values.max():.4g}"
            )
    if max_memory_mb is None:
        front = pareto.pareto_front(groups, {f"{col}.mean": way for col, way in chosen.items()})
        if front.empty:
            raise NoResult(f"no completed trial reports all of {', '.join(names)}")
        return _render(front, done, names, form)
    score = _objective(chosen, "maximize", "--max-memory-mb")
    memory = _objective(chosen, "minimize", "--max-memory-mb")
    best = pareto.best_under_budget(groups, f"{memory}.mean", max_memory_mb, f"{score}.mean")
    if best is None:
        smallest = groups[f"{memory}.mean"].min()
        found = (
            "no trial reports it"
            if math.isnan(smallest)
            else f"the smallest found is {smallest:.4g} MB"
        )
        raise NoResult(f"no configuration within {max_memory_mb:g} MB of {memory}; {found}")
    if form != "table":
        return _render(groups.loc[[best.name]], done, names, form, single=True)
    where = f"store {root}" + (f", sweep {sweep}" if sweep else "")
    return _yaml(best, done, names, f"within {max_memory_mb:g} MB ({where})")


def _objective(objectives: dict[str, str], direction: str, flag: str) -> str:
    """The first objective with ``direction`` (a memory column first, when minimising)."""
    names = [col for col, way in objectives.items() if way == direction]
    if direction == "minimize":
        names.sort(key=lambda col: not col.startswith("memory."))
    if not names:
        raise ConfigError(
            flag, f"needs a {direction}d objective among --objectives {', '.join(objectives)}"
        )
    return names[0]


def _interval(row: pd.Series, col: str) -> str:
    mean, ci = row[f"{col}.mean"], row[f"{col}.ci95"]
    return f"{mean:.4g}" if math.isnan(ci) or ci == 0 else f"{mean:.4g} ± {ci:.2g}"


def _render(
    rows: pd.DataFrame, done: pd.DataFrame, objectives: list[str], form: str, single: bool = False
) -> str:
    if form == "table":
        table = pd.DataFrame({"configuration": rows["configuration"]})
        for col in objectives:
            table[col] = [_interval(row, col) for _, row in rows.iterrows()]
        table["seeds"] = rows["n"]
        table["seed_group"] = rows["seed_group"]
        if rows["other_settings"].astype(bool).any():
            table["other settings"] = rows["other_settings"]
        return _aligned(table)
    records = [_record(row, done, objectives) for _, row in rows.iterrows()]
    if form == "json":
        return json.dumps(records[0] if single else records, indent=2) + "\n"
    flat = [
        {
            **{key: value for key, value in record.items() if key not in ("objectives", "config")},
            **{
                f"{col}.{stat}": v
                for col, stats in record["objectives"].items()
                for stat, v in stats.items()
            },
            **{
                f"config.{key}": _cell(value)
                for key, value in TrialConfig.from_dict(record["config"]).to_flat().items()
            },
        }
        for record in records
    ]
    return pd.DataFrame(flat, dtype=object).to_csv(index=False)  # ints stay ints beside nulls


def _aligned(table: pd.DataFrame) -> str:
    """Left-aligned columns two spaces apart: long configuration names stay readable."""
    cells = [list(map(str, table.columns))] + [
        list(map(str, row)) for row in table.itertuples(index=False)
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(table.columns))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() + "\n" for line in cells
    )


def _record(row: pd.Series, done: pd.DataFrame, objectives: list[str]) -> dict:
    stats = {
        col: {
            **{stat: _number(row[f"{col}.{stat}"]) for stat in ("mean", "ci95", "std")},
            "count": int(row[f"{col}.count"]),
        }
        for col in objectives
    }
    return {
        "seed_group": row["seed_group"],
        "configuration": row["configuration"],
        "techniques": row["techniques"],
        "seeds": int(row["n"]),
        "objectives": stats,
        "config": trial_config(done, row["seed_group"]).to_dict(),
    }


def _cell(value):
    """A CSV cell: lists as JSON text, as the store keeps them."""
    return json.dumps(value) if isinstance(value, list) else value


def _seeds(count: int) -> str:
    return f"{count} seed" if count == 1 else f"{count} seeds"


def _number(value) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def _yaml(best: pd.Series, done: pd.DataFrame, objectives: list[str], where: str) -> str:
    """The config as YAML, after comment lines that say what it is and how well it did."""
    config = trial_config(done, best["seed_group"])
    other = f"; {best['other_settings']}" if best["other_settings"] else ""
    lines = [
        f"# The most accurate configuration {where}:",
        f"#   {best['configuration']}{other}",
        *(
            f"#   {col}: {_interval(best, col)} ({_seeds(int(best[f'{col}.count']))})"
            for col in objectives
        ),
        "# Check it: tune-lowmem profile THIS.yaml; train it: tune-lowmem train THIS.yaml",
    ]
    return "\n".join(lines) + "\n" + config.to_yaml()
