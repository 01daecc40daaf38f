"""The front as a terminal shows it: `pareto` and `status` print at most `MAX_WIDTH` characters a
line by default (fewer in a narrower terminal); ``--wide`` prints the full table, ``--format
csv`` or ``json`` every figure and the whole configuration.

The narrow table has, for each configuration, the trial that trains it again
(``tune-lowmem train --store DIR --trial ID``), the sweep's objectives, the columns `NARROW`
declares that the rows have, and the configuration's name with its other settings: last where
every name fits, else on lines of its own under its row. Below it each column is named in full (its store column, its
direction, what it is and how it was obtained), and every line of prose is wrapped to the
width; a terminal too narrow for the columns loses the last declared ones first.
"""

from __future__ import annotations

import math
import shlex
import shutil
import textwrap
from collections.abc import Sequence

import pandas as pd

from ..outcome import MEASURED_STEP_EVAL_PEAK, MEASURED_UPDATE_S, PREDICTED_UPDATE_S, is_outcome
from . import counted
from .objectives import TEST
from .points import metric_name

MAX_WIDTH = 120
TESTS = "the objectives' test metrics"
# The narrow table's columns after the trial and the sweep's objectives (each mean ± 95% interval
# over the seeds; an accounted total's stored figure beside it where the two differ), in order:
# each a store column that the query reports beside the rows (what the full table shows besides
# the objectives), or `TESTS`. A column joins the narrow table with one line here.
NARROW = (
    MEASURED_STEP_EVAL_PEAK,  # torch's allocator's peak over a real step and an evaluation batch
    MEASURED_UPDATE_S,  # seconds per update at steady state, as the trial measured them
    PREDICTED_UPDATE_S,  # seconds per update, as the profiler predicted them before training
    TESTS,  # each validation objective's test metric: beside, never chosen on
)


def width() -> int:
    """The width to print at: the terminal's (``$COLUMNS`` where set), at most `MAX_WIDTH`."""
    return min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns)


def interval(row: pd.Series, col: str) -> str:
    """A seed mean with its 95% interval (``0.82 ± 0.02``), ``-`` where unknown."""
    mean, ci = row[f"{col}.mean"], row[f"{col}.ci95"]
    if math.isnan(mean):
        return "-"
    return f"{mean:.4g}" if math.isnan(ci) or ci == 0 else f"{mean:.4g} ± {ci:.2g}"


def ids(points: list[int]) -> str:
    return ",".join(map(str, points)) or "-"


def named(col: str) -> str:
    """A chosen row's figure named in plain words: "predicted training step memory (MB)",
    "measured seconds per update", "validation accuracy"."""
    return counted.words(col) if is_outcome(col) else metric_name(col)


def header(col: str) -> str:
    """A narrow column's heading: its store column without the group (``val_accuracy``,
    ``measured_update_s``)."""
    return col.split(".", 1)[-1]


def wrapped(text: str, width: int, indent: str = "", hanging: str = "    ") -> str:
    """`text` as lines of at most `width` characters, the first indented by `indent`, the others
    by `indent` + `hanging`; words longer than a line are broken."""
    return (
        textwrap.fill(
            text,
            width,
            initial_indent=indent,
            subsequent_indent=indent + hanging,
            break_on_hyphens=False,
        )
        + "\n"
    )


def train_line(store: str, trial_id: str) -> str:
    return f"tune-lowmem train --store {shlex.quote(store)} --trial {shlex.quote(trial_id)}"


def narrow(
    rows: pd.DataFrame,
    goals: dict[str, str],
    beside: Sequence[str],  # what the full table shows besides the objectives
    legend: str,
    store: str,
    width: int,
) -> str:
    """The rows as the narrow table, its columns named below it and a line to train each
    (see the module docstring); every line at most `width` characters."""
    objectives, others = _columns(goals, beside)
    trials = [row["trial_ids"][0] for _, row in rows.iterrows()]
    while True:  # the last declared column that is not an objective goes first
        columns = objectives + others
        table = pd.DataFrame({"trial": trials})
        for col in columns:
            table[header(col)] = [interval(row, col) for _, row in rows.iterrows()]
        if rows["n"].max() > 1:
            table["seeds"] = rows["n"].to_numpy()
        lines = aligned(table).splitlines()
        if max(map(len, lines)) <= width or not others:
            break
        others = others[:-1]
    names = [  # with what else tells it apart (a rewiring knob, the learning rate)
        f"{name}; {other}" if other else name
        for name, other in zip(rows["configuration"], rows["other_settings"], strict=True)
    ]
    if max(map(len, lines)) + 2 + max(map(len, names)) <= width:  # beside its row
        table["configuration"] = names
        lines = aligned(table).splitlines()
    else:  # under its row
        indent = " " * (max(map(len, ["trial", *trials])) + 2)
        lines = lines[:1] + [
            part
            for line, name in zip(lines[1:], names, strict=True)
            for part in (line, *wrapped(name, width, indent, "").splitlines())
        ]
    text = "".join(line[:width].rstrip() + "\n" for line in lines)
    text += "".join(_named_column(col, goals, width) for col in columns)
    if any(counted.counted(col) == counted.ACCOUNTED for col in columns):
        text += wrapped(legend, width)
    text += "To train a row again (its trial's configuration and seed):\n"
    for trial in trials:
        text += f"  {train_line(store, trial)}\n"
    return text


def _columns(goals: dict[str, str], beside: Sequence[str]) -> tuple[list[str], list[str]]:
    """The narrow table's columns, in `NARROW`'s order, each once: the objectives (an accounted
    total's stored figure beside it, where the full table shows one), and the others."""
    pairs = ((g, *counted.stored_beside([g])) for g in goals)
    objectives = [c for pair in pairs for c in pair if c in goals or c in beside]
    others: list[str] = []
    for entry in NARROW:
        if entry == TESTS:
            found = [c for c in beside if c.startswith(TEST)]
        else:
            found = [entry] if entry in beside else []
        others += [c for c in found if c not in objectives + others]
    return objectives, others


def _named_column(col: str, goals: dict[str, str], width: int) -> str:
    """One line (wrapped) saying what a narrow column is."""
    role = f"{goals[col]}d" if col in goals else "beside, not used to choose"
    source = f"; {counted.how(col)}" if is_outcome(col) else ""
    return wrapped(f"{header(col)}: {named(col)}{source} ({col}; {role})", width, "  ")


def aligned(table: pd.DataFrame) -> str:
    """Left-aligned columns two spaces apart: long configuration names stay readable."""
    cells = [list(map(str, table.columns))] + [
        list(map(str, row)) for row in table.itertuples(index=False)
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(table.columns))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in cells
    )
