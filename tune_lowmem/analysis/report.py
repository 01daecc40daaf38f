"""The whole report of a store: every figure as PNG, Table 3 as Markdown and CSV, one static
``index.html`` that a reviewer reads without the code: the training setup it summarises, the
rule every choice was made by, the paper's published figures beside the store's (for
reproduction sweeps), Table 3 and the figures (or why a figure is missing when the store lacks
the variation it needs). `tune-lowmem report` and the scripts in ``analysis/`` both land here."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from ..config import ConfigError
from . import (
    accuracy_density,
    accuracy_memory,
    accuracy_microbatch,
    counted,
    hypervolume,
    memory_parts,
    paper,
    table3,
    training_setup,
)
from .plotting import Drawn
from .points import Points

FIGURES = (memory_parts, accuracy_density, accuracy_microbatch, accuracy_memory, hypervolume)
KINDS = tuple(module.NAME for module in FIGURES) + (table3.NAME,)
INDEX = "index.html"
_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.92rem; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.6rem; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
figure { margin: 2rem 0; }
img { max-width: 100%; border: 1px solid #eee; }
figcaption, .note { color: #555; font-size: 0.92rem; }
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
    """The static page: setup, selection rule, the paper beside the store, Table 3, figures."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>tune-lowmem report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>tune-lowmem report</h1>",
        "<h2>Training setup</h2>",
        _pairs_html(training_setup.rows(points)),
        "<h2>How configurations were chosen</h2>",
        (
            f"<p>{_e(points.rule)} Memory: <code>{_e(points.memory)}</code> (predicted by the "
            f"profiler from shapes, before training; {_e(counted.counted(points.memory))}). "
            f"Every memory figure is labelled: {_e(counted.LEGEND.removeprefix('memory: '))}.</p>"
        ),
        "<h2>Against the paper</h2>",
        _paper_html(points),
        f"<h2>{_e(table3.TITLE)}</h2>",
    ]
    if table is None:
        parts.append(
            '<p class="skipped">skipped: no completed configuration has both a score and a '
            "memory</p>"
        )
    else:
        parts.append(_table_html(table.drop(columns="seed_group"), table3.format_cell))
        parts.append(
            f'<p class="note">{_e(table3.note(points, table))} Also as <a href="{table3.NAME}.md">'
            f'Markdown</a> and <a href="{table3.NAME}.csv">CSV</a>.</p>'
        )
    for figure in drawn:
        parts.append(f"<h2>{_e(figure.title)}</h2>")
        if figure.path is None:
            parts.append(f'<p class="skipped">{_e(figure.note or "skipped")}</p>')
        else:
            parts.append(
                f'<figure><img src="{_e(figure.path.name)}" alt="{_e(figure.title)}">'
                f"<figcaption>{_e(figure.caption)}</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


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
            f"<td{'' if isinstance(row[col], str) else ' class=num'}>"
            f"{_e(format_cell(col, row[col], row))}</td>"
            for col in shown.columns
        )
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)
