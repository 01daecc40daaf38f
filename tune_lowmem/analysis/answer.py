"""The report's first screen, the answer a sweep was run for: the memory-score front as an inline
SVG (hovering a point shows its configuration and the command that trains it), the front against
the baseline, and the best configuration under a few memory budgets.

The figure is drawn here as SVG text rather than by matplotlib so that the page stays one
self-contained file that needs no server and fetches nothing when it is opened; the points carry
their details as data attributes and native tooltips, and a few lines of inline script copy them
into a panel under the figure, where the command can be selected.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.ticker import LogLocator, MaxNLocator

from . import counted, table3
from .plotting import thin, wants_log
from .points import Points, trial_config
from .query import run_line

WIDTH, HEIGHT = 900, 380
LEFT, RIGHT, TOP, BOTTOM = 70, 24, 16, 52
MOST_BUDGETS = 4
FRONT_COLOR, OTHER_COLOR, BASE_COLOR = "#1f77b4", "#9a9a9a", "#d62728"
PANEL = "picked"
HINT = (
    "Hover over (or tab to) a point of the front: its configuration and the command that trains it."
)
# Copies a point's details into the panel; textContent, so nothing in them is read as HTML.
SCRIPT = f"""<script>
(() => {{
  const panel = document.getElementById("{PANEL}");
  const show = (point) => {{
    const title = document.createElement("strong");
    title.textContent = point.dataset.label;
    const command = document.createElement("code");
    command.textContent = point.dataset.command;
    panel.replaceChildren(title, document.createElement("br"), command);
  }};
  for (const point of document.querySelectorAll("#front .point")) {{
    for (const event of ["mouseenter", "focus", "click"]) {{
      point.addEventListener(event, () => show(point));
    }}
  }}
}})();
</script>"""


def compared(
    points: Points, table: pd.DataFrame, lead: tuple[str, ...] = ()
) -> tuple[pd.DataFrame, Callable[[str, object, pd.Series], str]]:
    """Rows of Table 3 cut to what a reader compares: the ``lead`` columns, configuration, memory
    (named in words), its reduction and beside it its time ratio to the baseline (where the
    store has times: `slowdown`), the score and its change against the baseline, the measured
    seconds per update, seeds; and the cell formatter, which formats each column as Table 3 does."""
    wanted = [
        *lead,
        "configuration",
        "other settings",
        table3.memory_header(points),
        "reduction (x)",
        table3.TIME_RATIO,
        table3.score_label(points.score),
        table3.change_label(points.score),
        table3.UPDATE_TIME,
        "seeds",
    ]
    names = {table3.memory_header(points): counted.words(points.memory)}
    original = {names.get(column, column): column for column in wanted}

    def cell(column: str, value, row: pd.Series) -> str:
        return table3.format_cell(original[column], value, row)

    shown = table[[column for column in wanted if column in table]].rename(columns=names)
    return shown, cell


def budgets(points: Points, table: pd.DataFrame) -> pd.DataFrame:
    """The best configuration within a few round budgets (1, 2, 5 x 10^k MB) between the front's
    smallest memory and the baseline's: the front row with the most memory within each, which is
    what ``tune-lowmem pareto --max-memory-mb`` answers. A budget whose answer a smaller one
    already gave is left out; empty when no budget fits between."""
    memory = table3.memory_header(points)
    front = table[table["seed_group"].isin(set(points.front()["seed_group"]))]
    smallest, base = front[memory].min(), table[memory].iloc[0]
    exponents = range(math.floor(math.log10(smallest)), math.ceil(math.log10(base)) + 1)
    answers: dict[str, dict] = {}
    for budget in (m * 10**e for e in exponents for m in (1, 2, 5)):
        if smallest <= budget < base:
            best = front[front[memory] <= budget].sort_values(memory).iloc[-1]
            answers.setdefault(best["seed_group"], {"within (MB)": f"{budget:g}", **best})
    return pd.DataFrame(thin(list(answers.values()), MOST_BUDGETS))


def svg(points: Points, table: pd.DataFrame) -> str:
    """Every configuration's mean score against its memory: the front as large points joined by
    the best score reachable within each memory, the others small and grey, the baseline's
    memory a dashed line (and its score a point, when it was trained)."""
    scored, front = points.scored(), points.front()
    x_of, y_of = f"{points.memory}.mean", f"{points.score}.mean"
    memory = table3.memory_header(points)
    base = table.iloc[0]
    xs = np.append(scored[x_of].to_numpy(float), base[memory])
    ys = scored[y_of].to_numpy(float) * points.scale
    log = wants_log(xs)
    x, x_ticks = _axis(xs, log, LEFT, WIDTH - RIGHT)
    y, y_ticks = _axis(ys, False, HEIGHT - BOTTOM, TOP)
    done = points.trials[points.trials["status"] == "completed"]
    parts = [
        (
            f'<svg id="front" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
            f'aria-labelledby="front-title"><title id="front-title">{_e(points.score_label)} '
            f"against {_e(counted.words(points.memory))}, Pareto front marked</title>"
        ),
        *_ticks(x, x_ticks, y, y_ticks),
        _text(
            (LEFT + WIDTH - RIGHT) / 2,
            HEIGHT - 10,
            counted.words(points.memory) + (", log scale" if log else ""),
        ),
        _text(
            16,
            (TOP + HEIGHT - BOTTOM) / 2,
            points.score_label,
            f"rotate(-90 16 {(TOP + HEIGHT - BOTTOM) / 2})",
        ),
        (
            f'<line class="baseline" x1="{x(base[memory]):.1f}" x2="{x(base[memory]):.1f}" '
            f'y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="{BASE_COLOR}" stroke-dasharray="5 4">'
            f"<title>baseline: {_e(base['configuration'])}, {base[memory]:.4g} MB</title></line>"
        ),
        _text(x(base[memory]) - 4, TOP + 12, "baseline", anchor="end", color=BASE_COLOR),
        _step(front[x_of].map(x), (front[y_of] * points.scale).map(y)),
    ]
    on_front = set(front["seed_group"])
    for _, row in scored[~scored["seed_group"].isin(on_front)].iterrows():
        parts.append(
            f'<circle class="other" cx="{x(row[x_of]):.1f}" cy="{y(row[y_of] * points.scale):.1f}" '
            f'r="3.5" fill="{OTHER_COLOR}" fill-opacity="0.6"><title>{_e(_label(points, row))}'
            "</title></circle>"
        )
    base_score = base.get(table3.score_label(points.score))
    if not pd.isna(base_score):  # a trained baseline: a ring, under the point it may share
        parts.append(
            f'<circle class="baseline" cx="{x(base[memory]):.1f}" cy="{y(base_score):.1f}" '
            f'r="11" fill="none" stroke="{BASE_COLOR}" stroke-width="2.5"/>'
        )
    for _, row in front.iterrows():
        label = _label(points, row)
        command = run_line(trial_config(done, row["seed_group"]))
        parts.append(
            f'<circle class="point" tabindex="0" cx="{x(row[x_of]):.1f}" '
            f'cy="{y(row[y_of] * points.scale):.1f}" r="7" fill="{FRONT_COLOR}" '
            f'stroke="black" data-label="{_e(label)}" data-command="{_e(command)}">'
            f"<title>{_e(label)}\n{_e(command)}</title></circle>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def panel() -> str:
    """The panel the script fills, then the script: placed after the figure it reads."""
    return f'<p id="{PANEL}" class="picked">{_e(HINT)}</p>\n{SCRIPT}'


def _label(points: Points, row: pd.Series) -> str:
    """A point as its tooltip names it: configuration, other settings, memory, score, seeds."""
    other = f"; {row['other_settings']}" if row["other_settings"] else ""
    return (
        f"{row['configuration']}{other}: {row[f'{points.memory}.mean']:.4g} MB, "
        f"{points.score_name} {row[f'{points.score}.mean'] * points.scale:.4g}"
        f"{'%' if points.scale == 100 else ''} ({row['n']} seed{'s' * (row['n'] > 1)})"
    )


def _axis(values: np.ndarray, log: bool, start: float, end: float):
    """A map from data to pixels over ``values`` with a margin, and the ticks inside it (1, 2, 5
    x 10^k on a log axis)."""
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    if log:
        low, high = low / 1.3, high * 1.3
        ticks = LogLocator(subs=(1.0, 2.0, 5.0)).tick_values(low, high)
    else:
        pad = 0.08 * ((high - low) or abs(high) or 1.0)
        low, high = low - pad, high + pad
        ticks = MaxNLocator(nbins=6).tick_values(low, high)
    forward = np.log10 if log else float
    a, b = forward(low), forward(high)

    def to_pixel(value: float) -> float:
        return start + (forward(value) - a) / (b - a) * (end - start)

    return to_pixel, [t for t in ticks if low <= t <= high]


def _ticks(x, x_ticks, y, y_ticks) -> list[str]:
    """Grid lines and labels at the ticks, and the axes' frame."""
    lines = [
        (
            f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
            f'height="{HEIGHT - TOP - BOTTOM}" fill="none" stroke="#888"/>'
        )
    ]
    for tick in x_ticks:
        at = x(tick)
        lines.append(
            f'<line x1="{at:.1f}" x2="{at:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="#eee"/>'
        )
        lines.append(_text(at, HEIGHT - BOTTOM + 16, f"{tick:g}"))
    for tick in y_ticks:
        at = y(tick)
        lines.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{at:.1f}" y2="{at:.1f}" stroke="#eee"/>'
        )
        lines.append(_text(LEFT - 6, at + 4, f"{tick:g}", anchor="end"))
    return lines


def _step(xs: pd.Series, ys: pd.Series) -> str:
    """The best score reachable within each memory: flat from each front point to the next."""
    corners = [f"M{xs.iloc[0]:.1f} {ys.iloc[0]:.1f}"]
    for i in range(1, len(xs)):
        corners.append(f"H{xs.iloc[i]:.1f} V{ys.iloc[i]:.1f}")
    return (
        f'<path d="{" ".join(corners)}" fill="none" stroke="{FRONT_COLOR}" stroke-width="1.5" '
        'stroke-dasharray="6 3"/>'
    )


def _text(
    x: float, y: float, text: str, transform: str = "", anchor: str = "middle", color="#333"
) -> str:
    turn = f' transform="{transform}"' if transform else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{color}" '
        f'font-size="13"{turn}>{_e(text)}</text>'
    )


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
