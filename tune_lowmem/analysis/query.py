"""The Pareto query behind `tune-lowmem pareto` and `status`: seed-averaged configurations of a
store, their non-dominated front on the sweeps' validation objectives, or the best one within a
memory budget and a time per update (`slowdown`); every row traceable to its trials and ready to
run, as a table, JSON or CSV, with its memory and seconds beside."""

from __future__ import annotations

import functools
import json
import math
import shlex
import sys
from dataclasses import dataclass
from typing import Any

import pandas as pd
import yaml

from .. import pareto
from ..config import ConfigError
from ..outcome import (
    MAXIMIZE,
    MEASURED_STEP_EVAL_PEAK,
    MEASURED_TIMES,
    MEASURED_TOTAL,
    MEMORY,
    MEMORY_OBJECTIVE,
    METRIC,
    MINIMIZE,
    PREDICTED_RUN_PEAK,
    PREDICTED_UPDATE_S,
    Direction,
    is_outcome,
)
from . import counted, slowdown, terminal
from . import objectives as chosen
from .points import (
    NoResult,
    completed,
    configurations,
    load_trials,
    metric_name,
    parse_objectives,
    trial_config,
)
from .terminal import aligned, ids, interval, named

PREDICTED, MEASURED = MEMORY_OBJECTIVE, MEASURED_TOTAL


@dataclass
class Selection:
    """What a choice is made from: the completed trials, the objectives (store column ->
    direction), the seed-averaged configurations (`points.configurations`, the accuracy floor
    applied) and the columns reported beside them."""

    done: pd.DataFrame
    goals: dict[str, str]
    groups: pd.DataFrame
    beside: list[str]


def select(
    root: str,
    sweep: str | None = None,
    task: str | None = None,
    objectives: list[str] | None = None,
    min_accuracy: float | None = None,
) -> Selection:
    """The seed-averaged configurations a front or a best choice is taken from."""
    trials = load_trials(root, sweep, task)
    done = completed(trials)
    given = parse_objectives(objectives, done) if objectives else None
    goals = chosen.choose(root, trials, given, "--objectives")
    for column in (c for c in goals if c.startswith(METRIC)):
        chosen.require_values(done, column)
    groups = configurations(done)
    if min_accuracy is not None:
        score = _objective(goals, MAXIMIZE, "--min-accuracy")
        values = groups[f"{score}.mean"]
        groups = groups[values >= min_accuracy]
        if groups.empty:
            raise NoResult(
                f"no configuration has {score} >= {min_accuracy:g}; "
                f"the best found is {values.max():.4g}"
            )
    return Selection(done, goals, groups, _beside(goals, done))


def front(selection: Selection) -> pd.DataFrame:
    """The configurations non-dominated on the objectives' seed means."""
    ways = {f"{col}.mean": way for col, way in selection.goals.items()}
    rows = pareto.pareto_front(selection.groups, ways)
    if rows.empty:
        raise NoResult(f"no completed trial reports all of {', '.join(selection.goals)}")
    return rows


def best(
    selection: Selection,
    max_memory_mb: float | None = None,
    max_slowdown: float | None = None,
    max_update_s: float | None = None,
) -> pd.Series:
    """The configuration with the best seed-mean score whose seed-mean memory is within the
    budget (the objectives' first maximised and first minimised, memory first) and whose time
    per update is within ``max_update_s`` seconds and ``max_slowdown`` times the baseline's
    (`slowdown`: measured, else predicted); None: no such limit."""
    limits = {
        "--max-memory-mb": max_memory_mb,
        "--max-slowdown": max_slowdown,
        "--max-update-s": max_update_s,
    }
    flag = next((name for name, value in limits.items() if value is not None), "--max-memory-mb")
    score = _objective(selection.goals, MAXIMIZE, flag)
    memory = _objective(selection.goals, MINIMIZE, flag)
    max_memory_mb, max_slowdown, max_update_s = (
        slowdown.positive(value, name) for name, value in limits.items()
    )
    if (max_memory_mb, max_slowdown, max_update_s) == (None, None, None):
        raise ConfigError("--max-memory-mb", "a budget or a time limit is required")
    groups = selection.groups
    budget = sys.float_info.max if max_memory_mb is None else max_memory_mb
    fast = slowdown.within(groups, selection.done, max_slowdown, max_update_s)
    found = pareto.best_under_budget(fast, f"{memory}.mean", budget, f"{score}.mean")
    if found is not None:
        return found
    memories = groups[f"{memory}.mean"]
    small = groups[memories <= budget]
    if small.empty:
        smallest = memories.min()
        why = (
            "no trial reports it"
            if math.isnan(smallest)
            else f"the smallest found is {smallest:.4g} MB"
        )
        raise NoResult(f"no configuration within {budget:g} MB of {memory}; {why}")
    limits = _limits(max_memory_mb, max_slowdown, max_update_s)
    raise NoResult(f"no configuration {limits}; {_fastest(small, selection.done, max_memory_mb)}")


def _limits(max_memory_mb: float | None, max_slowdown: float | None, max_update_s: float | None):
    """The limits an answer was asked for, in words."""
    said = [
        *([f"{max_memory_mb:g} MB"] if max_memory_mb is not None else []),
        *([f"{max_slowdown:g}x the baseline's time per update"] if max_slowdown else []),
        *([f"{max_update_s:g} s per update"] if max_update_s is not None else []),
    ]
    return "within " + " and ".join(said)


def _fastest(groups: pd.DataFrame, done: pd.DataFrame, max_memory_mb: float | None) -> str:
    """The fastest of ``groups`` (those within the memory budget), for a refusal to name."""
    timed = [(slowdown.seconds(row), row) for _, row in groups.iterrows()]
    timed = [(value, row) for (value, _), row in timed if not math.isnan(value)]
    where = f" within {max_memory_mb:g} MB" if max_memory_mb is not None else ""
    if not timed:
        return f"none{where} has a time per update"
    value, row = min(timed, key=lambda pair: pair[0])
    times, kind = slowdown.ratio(row, slowdown.baseline(done))
    against = f", {times:.3g}x the baseline's ({kind})" if kind else ""
    return f"the fastest{where} takes {value:.3g} s per update{against}"


def answer(
    root: str,
    sweep: str | None = None,
    task: str | None = None,
    objectives: list[str] | None = None,
    max_memory_mb: float | None = None,
    min_accuracy: float | None = None,
    form: str = "table",
    width: int | None = None,
    store: str | None = None,
    max_slowdown: float | None = None,
    max_update_s: float | None = None,
) -> str:
    """The front (or, given ``max_memory_mb``, ``max_slowdown`` or ``max_update_s``, the best
    configuration within them: `best`) as text: a table at most `width` characters wide
    (`terminal.narrow`; None: the full table), JSON or CSV. `store` is how the narrow table's
    train lines name the store (default: `root`)."""
    chosen_from = select(root, sweep, task, objectives, min_accuracy)
    done, goals, beside = chosen_from.done, chosen_from.goals, chosen_from.beside
    limits = (max_memory_mb, max_slowdown, max_update_s)
    if limits == (None, None, None):
        rows = front(chosen_from)
        if form == "table" and width is not None:
            kept, sparse = _kept(rows, goals, beside)
            legend = counted.note(rows, [*goals, *beside], sparse, ".mean")
            return terminal.narrow(rows, goals, kept, legend, store or root, width)
        return render(rows, done, goals, beside, form)
    found = best(chosen_from, *limits)
    if form != "table":
        return render(chosen_from.groups.loc[[found.name]], done, goals, beside, form, single=True)
    where = f"store {root}" + (f", sweep {sweep}" if sweep else "")
    return _yaml(found, done, goals, beside, f"{_limits(*limits)} ({where})", width)


def _beside(goals: dict[str, str], done: pd.DataFrame) -> list[str]:
    """Reported next to each chosen row, never used to choose: memory predicted and measured
    (the run's peak, the measured step-and-evaluation peak, a training step's total and each
    accounted total's stored figure), the seconds predicted per update, those measured per
    update, evaluation and epoch,
    and the test metric of each validation objective; the peaks and seconds where the store has
    figures for them (stores written before them have none)."""
    tests = [chosen.test_of(c, done) for c in goals if c.startswith(chosen.VALIDATION)]
    totals = [
        *(c for c in goals if c.startswith(MEMORY)),
        PREDICTED_RUN_PEAK,
        MEASURED_STEP_EVAL_PEAK,
        PREDICTED,
        MEASURED,
    ]
    memory = [m for c in totals for m in (c, *counted.stored_beside([c]))]
    times = (PREDICTED_UPDATE_S, *MEASURED_TIMES)
    extra = [*dict.fromkeys(memory), *times, *(t for t in tests if t)]
    newer = (PREDICTED_RUN_PEAK, MEASURED_STEP_EVAL_PEAK, *times)
    empty = {c for c in newer if c in done and done[c].isna().all()}
    return [c for c in extra if c not in goals and c in done.columns and c not in empty]


def _kept(rows: pd.DataFrame, goals: dict[str, str], beside: list[str]) -> tuple[list[str], bool]:
    """The beside columns a table shows, and whether any row is sparse: a stored total only
    where some row's differs from its accounted one, else the legend says once they are equal."""
    sparse = {c for c in [*goals, *beside] if counted.differing(rows, c, ".mean").any()}
    hidden = {held for total, held in counted.STORED_TOTALS.items() if total not in sparse}
    return [c for c in beside if c not in hidden], bool(sparse)


def _objective(objectives: dict[str, str], direction: Direction, flag: str) -> str:
    """The first objective with ``direction`` (a memory column first, when minimising)."""
    names = [col for col, way in objectives.items() if way == direction]
    if direction == MINIMIZE:
        names.sort(key=lambda col: not col.startswith(MEMORY))
    if not names:
        raise ConfigError(
            flag, f"needs a {direction}d objective among --objectives {', '.join(objectives)}"
        )
    return names[0]


def render(
    rows: pd.DataFrame,
    done: pd.DataFrame,
    goals: dict[str, str],
    beside: list[str],
    form: str,
    single: bool = False,
) -> str:
    """Rows as an aligned table with a command line to train each, as JSON, or as CSV."""
    if form == "table":
        table = pd.DataFrame({"point": [ids(p) for p in rows["points"]]})
        table["configuration"] = rows["configuration"].to_numpy()
        kept, sparse = _kept(rows, goals, beside)
        for col, way in goals.items():
            header = counted.labelled(col, Direction(way).short)
            table[header] = [interval(row, col) for _, row in rows.iterrows()]
        table["seeds"] = rows["n"].to_numpy()
        for col in kept:
            table[_short(col)] = [interval(row, col) for _, row in rows.iterrows()]
        if rows["other_settings"].astype(bool).any():
            table["other settings"] = rows["other_settings"].to_numpy()
        runs = [
            f"  point {ids(row['points'])} (trials {', '.join(row['trial_ids'])}): "
            + run_line(trial_config(done, row["seed_group"]))
            for _, row in rows.iterrows()
        ]
        legend = counted.note(rows, [*goals, *beside], sparse, ".mean")
        outcome = [c for c in [*goals, *kept] if is_outcome(c)]
        said = "".join(f"  {col}: {named(col)}; {counted.how(col)}\n" for col in outcome)
        return (
            aligned(table)
            + legend
            + "\nThe memory and time columns:\n"
            + said
            + "To train a row:\n"
            + "\n".join(runs)
            + "\n"
        )
    records = [_record(row, done, goals, beside) for _, row in rows.iterrows()]
    if form == "json":
        return json.dumps(records[0] if single else records, indent=2) + "\n"
    flat = [
        {
            **{
                key: json.dumps(value) if isinstance(value, list) else value
                for key, value in record.items()
                if key not in ("objectives", "reported", "config")
            },
            **{
                f"{col}.{stat}": v
                for part in ("objectives", "reported")
                for col, stats in record[part].items()
                for stat, v in stats.items()
            },
            **{f"config.{key}": _cell(value) for key, value in record["config"].items()},
        }
        for record in records
    ]
    return pd.DataFrame(flat, dtype=object).to_csv(index=False)  # ints stay ints beside nulls


def run_line(config: dict[str, Any]) -> str:
    """``tune-lowmem train --set ...`` with every field the trial set: its whole config (the
    task's defaults would need the task, and so torch, imported)."""
    changed = {k: v for k, v in config.items() if k != "data.root"}
    sets = " ".join(
        f"--set {shlex.quote(f'{key}={yaml_value(value)}')}" for key, value in changed.items()
    )
    return f"tune-lowmem train {sets}"


def yaml_value(value) -> str:
    """A config value as YAML text that reads back as it (``--set``'s values, MLflow's params)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and not _reads_back(value):  # "true", "1e-3", "null"
        return json.dumps(value)
    return json.dumps(list(value)) if isinstance(value, (list, tuple)) else str(value)


@functools.lru_cache(maxsize=1024)
def _reads_back(text: str) -> bool:
    """Whether YAML reads ``text`` back as that string (a pure function: rows repeat values)."""
    return yaml.safe_load(text) == text


def _short(col: str) -> str:
    """A beside column's header: a test metric says it was not used to choose, memory how it
    counts."""
    return (
        f"{metric_name(col)} (not used to choose)"
        if col.startswith(chosen.TEST)
        else counted.labelled(col)
    )


def _obtained(col: str) -> str:
    """Where a figure comes from, the column it is kept in last: "from the config's shapes,
    before training; accounted; memory.predicted_total_mb"."""
    return f"{counted.how(col)}; {col}" if is_outcome(col) else col


def _stats(row: pd.Series, col: str) -> dict:
    how = counted.counted(col)
    return {
        **{stat: _number(row[f"{col}.{stat}"]) for stat in ("mean", "ci95", "std")},
        "count": int(row[f"{col}.count"]),
        **({"counted": how} if how else {}),
    }


def _record(row: pd.Series, done: pd.DataFrame, goals: dict[str, str], beside: list[str]) -> dict:
    return {
        "seed_group": row["seed_group"],
        "points": list(row["points"]),
        "trial_ids": list(row["trial_ids"]),
        "configuration": row["configuration"],
        "techniques": row["techniques"],
        "seeds": int(row["n"]),
        "objectives": {col: {"direction": goals[col], **_stats(row, col)} for col in goals},
        "reported": {col: _stats(row, col) for col in beside},
        "config": trial_config(done, row["seed_group"]),
    }


def _cell(value):
    """A CSV cell: lists as JSON text, as the store keeps them."""
    return json.dumps(value) if isinstance(value, list) else value


def _seeds(count: int) -> str:
    return f"{count} seed" if count == 1 else f"{count} seeds"


def _number(value) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def _yaml(
    best: pd.Series,
    done: pd.DataFrame,
    goals: dict[str, str],
    beside: list[str],
    where: str,
    width: int | None = None,
) -> str:
    """The config as YAML, after comment lines that say what it is, where it comes from and how
    well it did (each wrapped to `width` characters, when given)."""
    config = trial_config(done, best["seed_group"])
    kept, sparse = _kept(best.to_frame().T, goals, beside)
    other = f"; {best['other_settings']}" if best["other_settings"] else ""
    lines = [
        f"# The best configuration on validation data {where}:",
        f"#   {best['configuration']}{other}",
        f"#   point {ids(best['points'])}, trials {', '.join(best['trial_ids'])}",
        *(
            f"#   {named(col)}: {interval(best, col)} "
            f"({_seeds(int(best[f'{col}.count']))}; {_obtained(col)})"
            for col in goals
        ),
        *(
            f"#   {named(col)}: {interval(best, col)} ({_obtained(col)})"
            if is_outcome(col)
            else f"#   {_short(col)}: {interval(best, col)}"
            for col in kept
        ),
        *([f"#   {time}"] if (time := slowdown.told(best, done)) else []),
        f"#   {counted.note(best.to_frame().T, [*goals, *beside], sparse, '.mean')}",
        "# Check it: tune-lowmem profile THIS.yaml; train it: tune-lowmem train THIS.yaml",
    ]
    if width is not None:
        lines = [
            terminal.wrapped(line.removeprefix("#   "), width, "#   ").rstrip("\n")
            if line.startswith("#   ")
            else line
            for line in lines
        ]
    return "\n".join(lines) + "\n" + yaml.safe_dump(config, sort_keys=False, width=width or 80)
