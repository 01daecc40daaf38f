"""The paper's Table 3: configurations on the memory-score front against the fp32 dense baseline
with no technique (configuration, memory, reduction factor, score, score change)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..memory import MB, baseline_config
from ..memory.predict import predict
from .points import (
    Points,
    describe,
    is_baseline,
    largest_model,
    techniques,
    trial_config,
)

NAME = "table3"
TITLE = (
    "Memory and accuracy of the Pareto-optimal configurations against the baseline (paper Table 3)"
)


def build(points: Points) -> pd.DataFrame:
    """Baseline first, then the front from most memory to least, in display units (%, MB)."""
    scored, largest = points.scored(), largest_model(points.groups)
    mem, score = f"{points.memory}.mean", f"{points.score}.mean"
    trained = scored[[is_baseline(row, largest) for _, row in scored.iterrows()]]
    if not trained.empty:
        base = trained.loc[trained[score].idxmax()]
        base_row = _row(
            points, base["configuration"] + " (baseline)", base, base[mem], base[mem], base[score]
        )
    else:
        base_row = _predicted_baseline(points, scored, largest)
    front = points.front().iloc[::-1]
    rows = [base_row] + [
        _row(
            points,
            group["configuration"],
            group,
            group[mem],
            base_row["memory (MB)"],
            base_row[points.score_label] / points.scale,
        )
        for _, group in front.iterrows()
        if trained.empty or group["seed_group"] != base["seed_group"]
    ]
    table = pd.DataFrame(rows)
    if not table["other settings"].astype(bool).any():
        table = table.drop(columns="other settings")
    return table


def _row(
    points: Points,
    label: str,
    group: pd.Series,
    memory: float,
    base_memory: float,
    base_score: float,
) -> dict:
    mean, ci = group[f"{points.score}.mean"], group[f"{points.score}.ci95"]
    return {
        "configuration": label,
        "other settings": group["other_settings"],
        "memory (MB)": memory,
        "reduction (x)": base_memory / memory,
        points.score_label: mean * points.scale,
        "95% CI (±)": ci * points.scale,
        _change(points): (mean - base_score) * points.scale,
        "seeds": int(group["n"]),
        "seed_group": group["seed_group"],
    }


def _predicted_baseline(points: Points, scored: pd.DataFrame, largest: dict) -> dict:
    """No baseline trial: the profiler's memory for the best full-size point, techniques off."""
    full_size = scored[
        [
            not ({"narrower", "shallower"} & set(techniques(row, largest)))
            for _, row in scored.iterrows()
        ]
    ]
    reference = full_size.loc[full_size[f"{points.score}.mean"].idxmax()]
    config = baseline_config(trial_config(points.trials, reference["seed_group"]))
    memory = predict(config).total_bytes / MB
    label = describe(
        {f"config.{key}": value for key, value in config.to_flat().items()}, with_model=True
    )
    return {
        "configuration": f"{label}, dense, no technique (baseline; predicted, not trained)",
        "other settings": "",  # the baseline's memory does not depend on them
        "memory (MB)": memory,
        "reduction (x)": 1.0,
        points.score_label: math.nan,
        "95% CI (±)": math.nan,
        _change(points): math.nan,
        "seeds": 0,
        "seed_group": "",
    }


def _change(points: Points) -> str:
    return "change (pp)" if points.scale == 100 else "change"


def to_markdown(table: pd.DataFrame, points: Points) -> str:
    """The table as GitHub Markdown, numbers rounded the way the paper prints them."""
    shown = table.drop(columns="seed_group")
    lines = [
        "| " + " | ".join(shown.columns) + " |",
        "| "
        + " | ".join(
            "---" if c in ("configuration", "other settings") else "---:" for c in shown.columns
        )
        + " |",
    ]
    for _, row in shown.iterrows():
        lines.append("| " + " | ".join(format_cell(col, row[col]) for col in shown.columns) + " |")
    note = (
        f"\nMemory: predicted total training memory. {points.score_label}: mean over seeds; "
        "95% CI = 1.96 standard errors (blank with one seed). "
        "Reduction and change are against the first row.\n"
    )
    return "\n".join(lines) + "\n" + note


def format_cell(column: str, value) -> str:
    """A cell as the paper prints it: MB to 4 digits, reductions as 60.7×, scores to 0.01."""
    if isinstance(value, str):
        return value.replace("|", "\\|")
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return ""
    if column == "reduction (x)":
        return f"{value:.1f}×"
    if column == "memory (MB)":
        return f"{value:.4g}"
    if column == "seeds":
        return str(int(value))
    return f"{value:+.2f}" if column.startswith("change") else f"{value:.2f}"


def write(points: Points, out: Path) -> tuple[pd.DataFrame, list[Path]]:
    table = build(points)
    out.mkdir(parents=True, exist_ok=True)
    csv, markdown = out / f"{NAME}.csv", out / f"{NAME}.md"
    table.to_csv(csv, index=False)
    markdown.write_text(f"# {TITLE}\n\n" + to_markdown(table, points))
    return table, [markdown, csv]
