"""The paper's Table 3: configurations on the memory-score front against the fp32 dense baseline
with no technique (configuration, memory, reduction factor, score, score change), and, where the
store measured it, the seconds per update each took and its ratio to the baseline's.

The rows are chosen on the validation metric; the test metric stands beside them, with its own
interval and change, as the paper reports test figures. An empty cell says why it is empty.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..outcome import MEASURED_UPDATE_S
from . import baselines, counted, slowdown
from .points import (
    NO_TECHNIQUE,
    Points,
    metric_name,
    metric_scale,
)

NAME = "table3"
MEMORY = "memory (MB"  # how every memory header starts: "memory (MB, accounted)"
UPDATE_TIME = "update time (s, measured)"  # seconds per update at steady state, on its device
TIME_RATIO = "time ratio (x)"  # its update time / the baseline's
TITLE = (
    "Memory and accuracy of the Pareto-optimal configurations against the baseline (paper Table 3)"
)


def build(points: Points) -> pd.DataFrame:
    """Baseline first, then the front from most memory to least, in display units (%, MB); the
    stored memory beside the accounted where a row is sparse (`counted`)."""
    scored = points.scored()
    trained = scored[scored["techniques"] == NO_TECHNIQUE]
    if not trained.empty:
        base = points.top(trained)
        base_row = _row(points, base["configuration"] + " (baseline)", base, base)
    else:
        base, base_row = None, _predicted_baseline(points, scored)
    front = points.front().iloc[::-1]
    timed = _timed_baseline(points, base)
    rows = [{**base_row, TIME_RATIO: _ratio(base, timed)}] + [
        {
            **_row(points, group["configuration"], group, base, base_row[memory_header(points)]),
            TIME_RATIO: _ratio(group, timed),
        }
        for _, group in front.iterrows()
        if base is None or group["seed_group"] != base["seed_group"]
    ]
    table = pd.DataFrame(rows)
    if not table["other settings"].astype(bool).any():
        table = table.drop(columns="other settings")
    for column in (UPDATE_TIME, TIME_RATIO):  # a store written before trials timed themselves
        if table[column].isna().all():
            table = table.drop(columns=column)
    stored = stored_header(points)
    if stored != memory_header(points) and stored in table and not sparse(table, points):
        table = table.drop(columns=stored)  # dense rows: equal, said once by the note
    return table


def memory_header(points: Points) -> str:
    return f"{MEMORY}, {counted.counted(points.memory) or 'as stored'})"


def stored_header(points: Points) -> str:
    return f"{MEMORY}, {counted.STORED})"


def sparse(table: pd.DataFrame, points: Points) -> bool:
    """Whether a row's stored memory differs from its accounted one (a sparse configuration)."""
    stored, memory = stored_header(points), memory_header(points)
    return (
        stored != memory and stored in table and counted.differ(table[memory], table[stored]).any()
    )


def _row(
    points: Points,
    label: str,
    group: pd.Series,
    base: pd.Series | None,
    base_memory: float | None = None,
) -> dict:
    """One configuration against the baseline (``base``: a trained one; else its memory alone)."""
    memory = group[f"{points.memory}.mean"]
    if base is not None:
        base_memory = base[f"{points.memory}.mean"]
    held = f"{counted.STORED_TOTALS.get(points.memory)}.mean"
    update = group.get(f"{MEASURED_UPDATE_S}.mean", math.nan)
    row = {
        "configuration": label,
        "other settings": group["other_settings"],
        memory_header(points): memory,
        **({stored_header(points): group[held]} if held in group else {}),
        "reduction (x)": base_memory / memory,
    }
    for metric in (points.score, points.test):
        if metric is None:
            continue
        scale, split = metric_scale(metric), metric_name(metric).split()[0]
        mean = group[f"{metric}.mean"]
        row[score_label(metric)] = mean * scale
        row[f"{split} 95% CI (±)"] = group[f"{metric}.ci95"] * scale
        row[change_label(metric)] = (
            math.nan if base is None else (mean - base[f"{metric}.mean"]) * scale
        )
    row[UPDATE_TIME] = update
    row[TIME_RATIO] = math.nan  # `build` sets it against the timed baseline
    row["seeds"] = int(group["n"])
    row["trials"] = ", ".join(group["trial_ids"])
    row["seed_group"] = group["seed_group"]
    return row


def _timed_baseline(points: Points, base: pd.Series | None) -> slowdown.Baseline | None:
    """The baseline every time ratio is against: the sweep's own (rows without a point), else
    the trained no-technique configuration of the table's first row; seconds are the median
    over its seeds (`slowdown`)."""
    done = points.trials[points.trials["status"] == "completed"]
    found = slowdown.baseline(done)
    if found is None and base is not None:
        found = slowdown.of_rows(done[done["seed_group"] == base["seed_group"]])
    return found


def _ratio(group: pd.Series | dict | None, timed: slowdown.Baseline | None) -> float:
    """A configuration's seconds per update over the baseline's (`slowdown.ratio`)."""
    return math.nan if group is None or timed is None else slowdown.ratio(group, timed)[0]


def score_label(metric: str) -> str:
    """A score's header: ``validation accuracy (%)``; BLEU as it is."""
    return f"{metric_name(metric)} (%)" if metric_scale(metric) == 100 else metric_name(metric)


def change_label(metric: str) -> str:
    """A score's change against the baseline: ``validation change (pp)``."""
    unit = " (pp)" if metric_scale(metric) == 100 else ""
    return f"{metric_name(metric).split()[0]} change{unit}"


def _predicted_baseline(points: Points, scored: pd.DataFrame) -> dict:
    """No baseline trial: the profiler's memory for the best full-size point, techniques off,
    as the sweep recorded it when it ended (else predicted now, which needs torch)."""
    reference = baselines.baseline_reference(scored, points)
    label, memory = baselines.saved(points).get(reference["seed_group"]) or (
        baselines.predict_baseline(points, reference)
    )
    empty = _row(points, "", reference, None, 1.0)
    return {
        **dict.fromkeys(empty, math.nan),
        "configuration": f"{label}, dense, no technique (baseline; predicted, not trained)",
        "other settings": "",  # the baseline's memory does not depend on them
        memory_header(points): memory,
        stored_header(points): memory,  # dense: stored as accounted
        "reduction (x)": 1.0,
        "seeds": 0,
        "trials": "",
        "seed_group": "",
    }


def to_markdown(table: pd.DataFrame, points: Points) -> str:
    """The table as GitHub Markdown, numbers rounded the way the paper prints them."""
    shown = table.drop(columns="seed_group")
    lines = [
        "| " + " | ".join(shown.columns) + " |",
        "| "
        + " | ".join(
            "---:" if pd.api.types.is_numeric_dtype(shown[c]) else "---" for c in shown.columns
        )
        + " |",
    ]
    for _, row in shown.iterrows():
        cells = (format_cell(col, row[col], row) for col in shown.columns)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n\n" + note(points, table) + "\n"


def note(points: Points, table: pd.DataFrame) -> str:
    """What the table's columns mean, and the rule its rows were chosen by."""
    beside = (
        f"; {points.test} is shown beside them and was not used to choose" if points.test else ""
    )
    held = counted.note(points.front(), [points.memory], sparse(table, points), ".mean")
    return (
        f"Rows: the baseline, then the configurations non-dominated on {points.score} "
        f"({points.direction}d) and {points.memory} (minimized), by memory{beside}. Memory: "
        f"{counted.words(points.memory)}. Scores: mean over seeds; 95% CI = 1.96 standard "
        f"errors over seeds. Reduction (of the {counted.counted(points.memory) or 'stored'} "
        f"memory), change and time ratio are against the first row. "
        f"{_time_note(table)}{held[0].upper()}{held[1:]}"
    )


def _time_note(table: pd.DataFrame) -> str:
    """What the time columns hold, when the table has them."""
    said = (
        f"Update time: {counted.words(MEASURED_UPDATE_S)}, {counted.how(MEASURED_UPDATE_S)}, "
        "mean over seeds. "
        if UPDATE_TIME in table
        else ""
    )
    if TIME_RATIO in table:
        said += (
            "Time ratio: a configuration's measured seconds per update over the baseline's (the "
            "median over its seeds); predicted over predicted where a configuration measured "
            "none. "
        )
    return said


def format_cell(column: str, value, row: pd.Series) -> str:
    """A cell as the paper prints it (MB to 4 digits, reductions as 60.7×, scores to 0.01), or
    why it is empty: one seed has no interval, an untrained baseline no score."""
    if isinstance(value, str):
        return value
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        if row["seeds"] == 0:
            return "not trained"
        if column.startswith(MEMORY):
            return "not recorded"
        if column.endswith("CI (±)") and row["seeds"] == 1:
            return "n/a: 1 seed"
        if column == UPDATE_TIME:
            return "not recorded"
        if column == TIME_RATIO:
            return "n/a: no time to compare"
        if "change" in column and row["seeds"] > 0:
            return "n/a: baseline not trained"
        return "n/a"
    if column == "reduction (x)":
        return f"{value:.1f}×"
    if column == TIME_RATIO:
        return f"{value:.2f}×"
    if column == UPDATE_TIME:
        return f"{value:.3g}"
    if column.startswith(MEMORY):
        return f"{value:.4g}"
    if column == "seeds":
        return str(int(value))
    return f"{value:+.2f}" if "change" in column else f"{value:.2f}"


def write(points: Points, out: Path) -> tuple[pd.DataFrame, list[Path]]:
    table = build(points)
    out.mkdir(parents=True, exist_ok=True)
    csv, markdown = out / f"{NAME}.csv", out / f"{NAME}.md"
    table.to_csv(csv, index=False)
    markdown.write_text(f"# {TITLE}\n\n" + to_markdown(table, points))
    return table, [markdown, csv]
