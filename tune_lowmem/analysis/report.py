"""The whole report of a store: every figure as PNG, Table 3 as Markdown and CSV, one static,
self-contained ``index.html`` that a reviewer reads without the code. The answer comes first
(`answer`: the front as a figure whose points show how to train them, the front against the
baseline, the best within a few budgets); then the figures (or why one is missing when the store
lacks the variation it needs), Table 3, the paper's published figures beside the store's (for
reproduction sweeps), the rule every choice was made by, and the training setup, collapsed.
`tune-lowmem report` and the scripts in ``analysis/`` both land here."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

from ..config import ConfigError
from ..outcome import MAXIMIZE
from . import (
    accuracy_density,
    accuracy_memory,
    accuracy_microbatch,
    answer,
    counted,
    hypervolume,
    memory_parts,
    memory_time,
    paper,
    table3,
    training_setup,
)
from .plotting import Drawn
from .points import Points

FIGURES = (
    memory_parts,
    accuracy_density,
    accuracy_microbatch,
    accuracy_memory,
    memory_time,
    hypervolume,
)
KINDS = tuple(module.NAME for module in FIGURES) + (table3.NAME,)
INDEX = "index.html"
_NOTHING_SCORED = "no completed configuration has both a score and a memory"
_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 1rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; margin: 0.5rem 0; }
.lead { margin: 0 0 0.5rem; color: #444; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.85rem; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.4rem; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
figure { margin: 2rem 0; }
img { max-width: 100%; border: 1px solid #eee; }
figcaption, .note { color: #555; font-size: 0.92rem; }
figure.answer { margin: 0.5rem 0; }
#front { display: block; width: 100%; max-width: 900px; height: auto; }
#front .point { cursor: pointer; }
#front .point:hover, #front .point:focus { stroke-width: 3; outline: none; }
.picked { background: #f4f8fc; border-left: 4px solid #1f77b4; padding: 0.4rem 1rem;
          margin: 0.5rem 0; font-size: 0.92rem; }
.picked code { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.85rem; }
details.setup > summary { cursor: pointer; font-size: 1.3rem; font-weight: bold; margin: 2rem 0 1rem; }
.skipped { background: #fff8e1; border-left: 4px solid #f0b400; padding: 0.5rem 1rem; }
"""


def write_report(points: Points, out: str | Path, only: str | None = None) -> list[Path]:
    """Write every figure and Table 3 (or just ``only``) under ``out``; the files written."""
    if only is not None and only not in KINDS:
        raise ConfigError("--only", f"{only!r} is not allowed; allowed: {', '.join(KINDS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    drawn = [module.draw(points, out) for module in FIGURES if only in (None, module.NAME)]
    table, table_files = None, []
    if only in (None, table3.NAME) and not points.scored().empty:
        table, table_files = table3.write(points, out)
    written = [d.path for d in drawn if d.path is not None] + table_files
    if only is None:
        index = out / INDEX
        index.write_text(page(points, drawn, table))
        written.append(index)
    return written


def page(points: Points, drawn: list[Drawn], table: pd.DataFrame | None) -> str:
    """The static page, the answer first: the front as an interactive figure, the front against
    the baseline and the best under a few budgets; then the figures, Table 3, the paper beside
    the store, the selection rule, and the training setup, collapsed."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>tune-lowmem report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>tune-lowmem report</h1>",
        f'<p class="lead">{_e(summary(points))}</p>',
    ]
    if table is None:
        parts.append(f'<p class="skipped">skipped: {_e(_NOTHING_SCORED)}</p>')
    else:
        parts += _answer_html(points, table)
    parts.append("<h2>Figures</h2>")
    for figure in drawn:
        parts.append(f"<h3>{_e(figure.title)}</h3>")
        if figure.path is None:
            parts.append(f'<p class="skipped">{_e(figure.note or "skipped")}</p>')
        else:
            parts.append(
                f'<figure><img src="{_e(figure.path.name)}" alt="{_e(figure.title)}">'
                f"<figcaption>{_e(figure.caption)}</figcaption></figure>"
            )
    parts.append(f"<h2>{_e(table3.TITLE)}</h2>")
    if table is None:
        parts.append(f'<p class="skipped">skipped: {_e(_NOTHING_SCORED)}</p>')
    else:
        parts.append(_table_html(table.drop(columns="seed_group"), table3.format_cell))
        parts.append(
            f'<p class="note">{_e(table3.note(points, table))} Also as <a href="{table3.NAME}.md">'
            f'Markdown</a> and <a href="{table3.NAME}.csv">CSV</a>.</p>'
        )
    parts += [
        "<h2>Against the paper</h2>",
        _paper_html(points),
        "<h2>How configurations were chosen</h2>",
        (
            f"<p>{_e(points.rule)} Memory: {_e(counted.words(points.memory))}, "
            f"{_e(counted.how(points.memory))} ({_e(points.memory)}). "
            f"Every memory figure is labelled: {_e(counted.LEGEND.removeprefix('memory: '))}.</p>"
        ),
        (
            '<details class="setup"><summary>Training setup: fixed and searched fields, seeds, '
            "sampler, trials by status</summary>"
        ),
        _pairs_html(training_setup.rows(points)),
        "</details>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def summary(points: Points) -> str:
    """The page's first line: what the report is of, counted from the store."""
    trials = points.trials
    sweeps = sorted(trials["sweep"].unique())
    done = int((trials["status"] == "completed").sum())
    seeds = training_setup.seeds_per_configuration(
        points.groups["n"], trials["config.seed"].dropna().astype(int)
    )
    return (
        f"{_count(len(points.groups), 'configuration')} from {_count(done, 'completed trial')} "
        f"({len(trials)} in all) of sweep{'s' * (len(sweeps) > 1)} {', '.join(sweeps)}; seeds "
        f"per configuration: {seeds}. Every choice is made on {points.score_name} "
        f"({points.direction}d), on validation data; memory is the "
        f"{counted.words(points.memory)}."
    )


def _answer_html(points: Points, table: pd.DataFrame) -> list[str]:
    """The first screen: the front as an interactive figure, the front against the baseline
    and the best configuration within a few budgets."""
    front, cell = answer.compared(points, table)
    parts = [
        (
            f'<figure class="answer">{answer.svg(points, table)}<figcaption>Each point is one '
            f"configuration (mean over seeds); blue points are the Pareto front on validation data "
            f"(no other configuration is both smaller and better), joined by the best score reachable "
            f"within each memory; the dashed red line marks the baseline's memory and, when it was "
            f"trained, a red ring its score: {_e(table['configuration'].iloc[0])}.</figcaption>"
            "</figure>"
        ),
        answer.panel(),
        "<h2>The Pareto front against the baseline</h2>",
        _table_html(front, cell),
        (
            "<p class=\"note\">Reduction = the baseline's memory / the configuration's; change "
            f"= its {_e(points.score_name)} - the baseline's; time ratio = its measured seconds "
            "per update / the baseline's median over its seeds, predicted / predicted where it "
            "measured none (on the device each trained on). Memory: "
            f"{_e(counted.how(points.memory))} ({_e(points.memory)}). Table 3 below adds intervals, the test "
            "score and the trials.</p>"
        ),
    ]
    within = answer.budgets(points, table)
    if not within.empty:
        rows, cell = answer.compared(points, within, lead=("within (MB)",))
        parts += ["<h2>The best configuration within a budget</h2>", _table_html(rows, cell)]
        if points.direction == MAXIMIZE:  # pareto's budget answer maximises the score
            sweep = points.trials["sweep"].unique()
            ask = f"tune-lowmem pareto --store {points.root}" + (
                f" --sweep {sweep[0]}" if len(sweep) == 1 else ""
            )
            parts.append(
                f'<p class="note">Each row is what <code>{_e(ask)} --max-memory-mb BUDGET</code> '
                "prints, as a TrialConfig that <code>tune-lowmem train</code> takes.</p>"
            )
    return parts


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _pairs_html(pairs: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in pairs)
    return f"<table><tbody>{rows}</tbody></table>"


def _paper_html(points: Points) -> str:
    """The paper's figures beside the store's, or why there is nothing to put beside them."""
    lines = paper.comparison(points)
    source = _e(paper.published()["source"])
    if lines.empty:
        return (
            '<p class="note">None of the configurations the paper publishes figures for '
            "(WideResNet-28-2 and DC-Transformer rows of its Table 3 and headline ratios) is in "
            "this store, so there is nothing to put beside them; a reproduction sweep (e.g. "
            f"<code>search_spaces/paper-*.yaml</code>) gets the side-by-side table. {source}</p>"
        )

    def cell(column: str, value, _row) -> str:
        if isinstance(value, str):
            return value
        return "not in this store" if pd.isna(value) else f"{value:.4g}"

    return _table_html(lines, cell) + (
        f'<p class="note">Paper: {source}. This store: predicted memory, accounted as the '
        "paper counts it (sparse weights as CSR); test score (mean over "
        "seeds) of the configuration with the same fields, the best on validation data where "
        "several match; reduction and change against the store's own baseline of the same "
        "model. Difference = this store - paper.</p>"
    )


def _table_html(shown: pd.DataFrame, format_cell) -> str:
    head = "".join(f"<th>{_e(col)}</th>" for col in shown.columns)
    rows = []
    for _, row in shown.iterrows():
        cells = "".join(
            f"<td class=num>{_e(format_cell(col, row[col], row))}</td>"
            if not isinstance(row[col], str)
            else f"<td>{_breakable(format_cell(col, row[col], row))}</td>"
            for col in shown.columns
        )
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _breakable(text: str) -> str:
    """Escaped, with a line-break opportunity after each dot, underscore, equals sign and slash:
    long field names (``schedule.lr_multiplier=0.5``) wrap there, so tables fit the window."""
    return re.sub(r"(?<=[._=/])(?=\w)", "<wbr>", _e(text))


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)
