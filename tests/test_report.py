"""`tune-lowmem report` (and the scripts in analysis/) over stores written with `store.write_trial`:
every file is there, the PNGs are real images, Table 3 says what the store holds, and a store
without the variation a figure needs gets a note instead of an empty plot."""

from __future__ import annotations

import html
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from tests.browser import WINDOW, chromium, needs_chromium
from tests.conftest import tiny_wrn_config
from tests.test_pareto_cli import predicted_memory
from tune_lowmem.analysis import baselines
from tune_lowmem.analysis.points import trial_config
from tune_lowmem.cli import main
from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB, baseline_config
from tune_lowmem.memory.predict import predict
from tune_lowmem.pareto import non_dominated_mask
from tune_lowmem.store import TrialRecord, read_trials, write_trial

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2024, 5, 1, tzinfo=UTC)
FIGURES = [
    "memory_parts",
    "accuracy_vs_density",
    "accuracy_vs_microbatch",
    "accuracy_vs_memory",
    "memory_vs_time",
    "hypervolume",
]


def write_sweep(root: Path, sweep: str, points: list[dict], seeds: int, offset: int = 0) -> None:
    """One completed trial per point and seed, accuracy falling with sparsity and microbatch size
    as the paper's figures show; plus one failed and one infeasible trial."""
    rng = np.random.default_rng(offset)
    n = offset
    for changes in points:
        config = tiny_wrn_config(**changes)
        memory = predicted_memory(config, written_before_packing=True)  # labels shown, see below
        density, micro = config.sparsity.density, config.microbatch.size or 20
        for seed in range(seeds):
            n += 1
            accuracy = 0.55 + 0.1 * density - 0.04 * (micro < 5) + rng.normal(0, 0.01)
            write_trial(
                root,
                TrialRecord(
                    sweep=sweep,
                    trial_id=f"t{n:03d}",
                    status="completed",
                    config=config.replace(seed=seed).to_flat(),
                    metrics={"val_accuracy": accuracy + 0.01, "test_accuracy": accuracy},
                    memory={**memory, "measured_total_mb": memory["predicted_total_mb"] * 1.04},
                    time={"measured_update_s": 0.01 * memory["predicted_total_mb"] * (1 + seed)},
                    started_at=START + timedelta(minutes=n),
                    finished_at=START + timedelta(minutes=n + 1),
                    epochs_completed=1,
                ),
            )
    for status in ("failed", "infeasible"):
        n += 1
        write_trial(
            root,
            TrialRecord(
                sweep=sweep,
                trial_id=f"t{n:03d}",
                status=status,
                failure_reason="boom",
                config=tiny_wrn_config().to_flat(),
                started_at=START + timedelta(minutes=n),
            ),
        )


JOINT = [
    {},  # the baseline
    {"precision": "fp16"},
    {"sparsity.density": 0.3},
    {"precision": "fp16", "sparsity.density": 0.3, "checkpoint": "residual-2*"},
    {"microbatch.size": 5},
    {"precision": "fp16", "microbatch.size": 2, "microbatch.mode": "simulated"},
    {
        "precision": "fp16",
        "sparsity.density": 0.1,
        "microbatch.size": 4,
        "checkpoint": "residual-2*",
    },
]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    write_sweep(root, "joint-tpe", JOINT, seeds=2)
    write_sweep(root, "joint-random", JOINT[::-1], seeds=1, offset=100)
    out = tmp_path_factory.mktemp("report")
    assert main(["report", "--store", str(root), "--out", str(out)]) == 0
    return root, out


def test_every_file_is_written_and_every_png_is_a_real_image(report):
    _, out = report
    expected = {f"{name}.png" for name in FIGURES} | {"table3.md", "table3.csv", "index.html"}
    assert {p.name for p in out.iterdir()} == expected
    for name in FIGURES:
        with Image.open(out / f"{name}.png") as image:
            assert image.format == "PNG"
            width, height = image.size
            assert 600 <= width <= 2500 and 400 <= height <= 2500
            low, high = image.convert("L").getextrema()
            assert high - low > 100  # something is drawn on the white


def test_html_references_every_png_and_the_tables(report):
    _, out = report
    page = (out / "index.html").read_text()
    assert sorted(re.findall(r'<img src="([^"]+)"', page)) == sorted(
        f"{name}.png" for name in FIGURES
    )
    assert 'href="table3.md"' in page and 'href="table3.csv"' in page
    assert 'class="skipped"' not in page
    assert "samplers are read from the sweep names" in page  # no sampler column in this store
    assert "<th>trials by status</th><td>25: 21 completed, 2 failed, 2 infeasible" in page
    for setup in ("fixed: schedule.epochs</th><td>1<", "fixed: data.train_subset</th><td>200<"):
        assert setup in page  # the training setup the report summarises
    assert "<th>searched: sparsity.density</th><td>0.1, 0.3, 1<" in page
    assert "made on the validation metric metric.val_accuracy (maximized)" in page
    assert "None of the configurations the paper publishes figures for" in page


def table_rows(page: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first table after ``heading``, each by column name, as the page shows
    them (line-break hints dropped)."""
    section = page.split(heading, 1)[1].split("</table>", 1)[0].replace("<wbr>", "")
    head = [html.unescape(h) for h in re.findall(r"<th>([^<]*)</th>", section)]
    rows = re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>", 1)[1])
    return [
        dict(zip(head, map(html.unescape, re.findall(r"<td[^>]*>([^<]*)</td>", row)), strict=True))
        for row in rows
    ]


def store_front(root: Path) -> list[str]:
    """The store's validation front worked out from its trials, by memory: seed groups."""
    done = read_trials(root).query("status == 'completed'")
    means = done.groupby("seed_group")[["metric.val_accuracy", "memory.predicted_total_mb"]].mean()
    front = means[non_dominated_mask(means.to_numpy(), ["maximize", "minimize"])]
    return list(front.sort_values("memory.predicted_total_mb").index)


def test_the_page_leads_with_the_front_and_ends_with_the_setup_collapsed(report):
    """The answer first (the front's figure, the front against the baseline, the best within
    budgets), then the figures, Table 3, the paper, the rule; the setup last, in <details>."""
    _, out = report
    page = (out / "index.html").read_text()
    order = [
        '<svg id="front"',
        "<h2>The Pareto front against the baseline</h2>",
        "<h2>The best configuration within a budget</h2>",
        "<h2>Figures</h2>",
        "<h2>Memory and accuracy of the Pareto-optimal configurations",
        "<h2>Against the paper</h2>",
        "<h2>How configurations were chosen</h2>",
        '<details class="setup">',
        "<th>trials by status</th>",
        "</details>",
    ]
    places = [page.index(part) for part in order]
    assert places == sorted(places)
    table = pd.read_csv(out / "table3.csv")
    front = table_rows(page, "The Pareto front against the baseline")
    assert [row["configuration"] for row in front] == list(table["configuration"])
    assert [row["reduction (x)"] for row in front] == [f"{r:.1f}×" for r in table["reduction (x)"]]
    assert [row["validation change (pp)"] for row in front] == [
        f"{c:+.2f}" for c in table["validation change (pp)"]
    ]
    assert [row["predicted training step memory (MB)"] for row in front] == [
        f"{m:.4g}" for m in table["memory (MB, accounted)"]
    ]


def test_the_front_s_points_show_the_command_that_trains_them(report):
    """Each point of the front in the figure carries its configuration and a `tune-lowmem train`
    line that trains exactly that configuration; the axes are named in words."""
    root, out = report
    page = (out / "index.html").read_text()
    figure = page[page.index('<svg id="front"') : page.index("</svg>")]
    points = re.findall(
        r'<circle class="point"[^>]*data-label="([^"]*)" data-command="([^"]*)"', figure
    )
    done = read_trials(root).query("status == 'completed'")
    expected = [TrialConfig.from_dict(trial_config(done, group)) for group in store_front(root)]
    trained = []
    for label, command in points:
        words = shlex.split(html.unescape(command))
        assert words[:2] == ["tune-lowmem", "train"]
        flat = {k: yaml.safe_load(v) for k, v in (w.split("=", 1) for w in words[3::2])}
        trained.append(TrialConfig.from_dict(flat))
    assert trained == expected
    labels = [html.unescape(label) for label, _ in points]
    assert labels[-1].startswith("fp16: ") and labels[-1].endswith("(2 seeds)")  # 0 run twice
    axes = re.findall(r"<text[^>]*>([^<]*)</text>", figure)
    assert "predicted training step memory (MB), log scale" in axes  # it spans a decade
    assert "validation accuracy (%)" in axes
    assert "memory.predicted_total_mb" not in figure


def test_each_budget_s_row_is_what_pareto_answers_for_it(report, capsys):
    root, out = report
    rows = table_rows((out / "index.html").read_text(), "The best configuration within a budget")
    assert len(rows) >= 2 and len({row["configuration"] for row in rows}) == len(rows)
    for row in rows:
        argv = ["pareto", "--store", str(root), "--max-memory-mb", row["within (MB)"]]
        assert main([*argv, "--format", "json"]) == 0
        best = json.loads(capsys.readouterr().out)
        assert best["configuration"] == row["configuration"]
        memory = best["objectives"]["memory.predicted_total_mb"]["mean"]
        assert row["predicted training step memory (MB)"] == f"{memory:.4g}"


def test_the_first_line_counts_what_the_store_holds(report, tmp_path):
    """Configurations, trials and seeds per configuration as the store holds them: a
    configuration both sweeps trained with seed 0 (and joint-tpe with seed 1 too) has three
    trials and two seeds; a sweep of one seed per configuration says so (not "seeds 0")."""
    root, out = report
    trials = read_trials(root)
    done = trials.query("status == 'completed'")
    groups = done.groupby("seed_group")
    assert groups.size().max() == 3 and groups["config.seed"].nunique().max() == 2
    lead = re.search(r'<p class="lead">([^<]*)</p>', (out / "index.html").read_text())[1]
    assert html.unescape(lead).startswith(
        f"{groups.ngroups} configurations from {len(done)} completed trials ({len(trials)} in "
        "all) of sweeps joint-random, joint-tpe; seeds per configuration: 2 (seeds 0, 1)."
    )
    one, shown = tmp_path / "store", tmp_path / "out"
    write_sweep(one, "quick", JOINT, seeds=1)
    assert main(["report", "--store", str(one), "--out", str(shown)]) == 0
    page = (shown / "index.html").read_text()
    assert (
        "7 configurations from 7 completed trials (9 in all) of sweep quick; seeds per "
        "configuration: 1 (seed 0)." in page
    )
    assert "<th>seeds per configuration</th><td>1 (seed 0)</td>" in page


def test_table3_rows_are_the_store_s_validation_front_against_the_baseline(report):
    root, out = report
    table = pd.read_csv(out / "table3.csv")
    trials = read_trials(root)
    done = trials[trials["status"] == "completed"]
    columns = ["metric.val_accuracy", "metric.test_accuracy", "memory.predicted_total_mb"]
    # a seed's runs are one sample (seed 0 ran in both sweeps): their mean, then over seeds
    per_seed = done.groupby(["seed_group", "config.seed"])[columns].mean()
    means = per_seed.groupby("seed_group").mean()
    base_group = done[
        (done["config.precision"] == "fp32")
        & (done["config.sparsity.density"] == 1)
        & done["config.microbatch.size"].isna()
        & (done["config.checkpoint"] == "none")
    ]["seed_group"].iloc[0]
    base_val = means.loc[base_group, "metric.val_accuracy"] * 100
    base_test = means.loc[base_group, "metric.test_accuracy"] * 100
    base_memory = means.loc[base_group, "memory.predicted_total_mb"]
    first = table.iloc[0]
    assert first["configuration"] == "fp32 (baseline)" and first["seeds"] == 2
    assert first["memory (MB, accounted)"] == pytest.approx(base_memory)
    assert first["validation accuracy (%)"] == pytest.approx(base_val)
    assert first["test accuracy (%)"] == pytest.approx(base_test)
    assert first["reduction (x)"] == 1 and first["test change (pp)"] == pytest.approx(0)
    chosen_on = means[["metric.val_accuracy", "memory.predicted_total_mb"]].to_numpy()
    front = means[non_dominated_mask(chosen_on, ["maximize", "minimize"])]
    front = front.drop(index=base_group, errors="ignore")
    rows = table.iloc[1:].set_index("seed_group")
    assert set(rows.index) == set(front.index)
    assert list(rows["memory (MB, accounted)"]) == sorted(
        rows["memory (MB, accounted)"], reverse=True
    )
    for group, row in rows.iterrows():
        val = front.loc[group, "metric.val_accuracy"] * 100
        test = front.loc[group, "metric.test_accuracy"] * 100
        memory = front.loc[group, "memory.predicted_total_mb"]
        assert row["memory (MB, accounted)"] == pytest.approx(memory)
        assert row["reduction (x)"] == pytest.approx(base_memory / memory)
        assert row["validation accuracy (%)"] == pytest.approx(val)
        assert row["validation change (pp)"] == pytest.approx(val - base_val)
        assert row["test accuracy (%)"] == pytest.approx(test)
        assert row["test change (pp)"] == pytest.approx(test - base_test)
        assert row["validation 95% CI (±)"] > 0 and row["test 95% CI (±)"] > 0  # 2 seeds each
        ids = set(done[done["seed_group"] == group]["trial_id"])
        assert set(row["trials"].split(", ")) == ids
    markdown = (out / "table3.md").read_text()
    assert markdown.count("\n| ") == len(table) + 2  # the header, the rule, one line per row
    assert f"| {base_memory:.4g} | {base_memory:.4g} | 1.0× | {base_val:.2f} |" in markdown
    assert "| configuration | memory (MB, accounted) |" in markdown and "| --- | ---: |" in markdown


def test_a_store_without_variation_skips_figures_and_predicts_the_baseline(tmp_path):
    root, out = tmp_path / "store", tmp_path / "out"
    point = {"precision": "fp16", "sparsity.density": 0.3, "checkpoint": "residual-2*"}
    write_sweep(root, "one-point", [point], seeds=3)
    assert main(["report", "--store", str(root), "--out", str(out)]) == 0
    drawn = {"memory_parts.png", "memory_vs_time.png", "hypervolume.png"}
    assert {p.name for p in out.glob("*.png")} == drawn
    page = (out / "index.html").read_text()
    for why in (
        "the same fraction of nonzeros",
        "the same microbatch size",
        "two configurations or more",
    ):
        assert why in page
    table = pd.read_csv(out / "table3.csv")
    expected = predict(baseline_config(tiny_wrn_config(**point))).total_bytes / MB
    assert table["configuration"][0].endswith("(baseline; predicted, not trained)")
    assert table["memory (MB, accounted)"][0] == pytest.approx(expected)
    assert table["reduction (x)"][1] == pytest.approx(
        expected / predicted_memory(tiny_wrn_config(**point))["predicted_total_mb"]
    )
    assert table["test accuracy (%)"].isna()[0] and table["seeds"][1] == 3
    markdown = (out / "table3.md").read_text()
    assert "| not trained |" in markdown and "| n/a: baseline not trained |" in markdown


def test_scripts_write_one_kind_each(report, tmp_path, monkeypatch):
    root, _ = report
    scripts = sorted(p.stem for p in (ROOT / "analysis").glob("*.py"))
    assert scripts == sorted([*FIGURES, "table3", "report"])
    monkeypatch.setattr(
        sys, "argv", ["hypervolume.py", "--store", str(root), "--out", str(tmp_path)]
    )
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "analysis" / "hypervolume.py"), run_name="__main__")
    assert exit_.value.code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["hypervolume.png"]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--only", "pie"], 2, "--only: 'pie' is not allowed; allowed: memory_parts"),
        (["--metric", "metric.bleu"], 2, "--metric: 'metric.bleu' is not a numeric column"),
        (
            ["--metric", "metric.test_accuracy"],
            2,
            "--metric: metric.test_accuracy is not a validation metric",
        ),
        (["--sweep", "nope"], 2, "allowed: joint-random, joint-tpe"),
    ],
)
def test_bad_input(report, tmp_path, capsys, argv, code, message):
    root, _ = report
    assert main(["report", "--store", str(root), "--out", str(tmp_path), *argv]) == code
    assert message in capsys.readouterr().err


def test_help_names_every_kind(capsys):
    from tune_lowmem.analysis.report import KINDS

    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(kind in text for kind in KINDS)


def test_a_reproduction_store_puts_the_paper_beside_its_own_figures(tmp_path):
    """WRN-28-2 rows of the paper's Table 3 in the store: the page shows paper, store and
    difference for each published figure, from the data file that names its source."""
    root, out = tmp_path / "store", tmp_path / "out"
    paper_rows = {
        "base": ({}, 400.0, 0.94),
        "best": (
            {
                "precision": "fp16",
                "checkpoint": "residual-2*",
                "microbatch.size": 10,
                "sparsity.density": 0.3,
            },
            8.0,
            0.93,
        ),
    }
    n = 0
    for name, (changes, memory, test) in paper_rows.items():
        for seed in range(2):
            n += 1
            config = TrialConfig.from_dict(
                {"model.depth": 28, "model.width": 2, "seed": seed, **changes}
            )
            write_trial(
                root,
                TrialRecord(
                    sweep="paper-wrn-table3",
                    trial_id=f"{name}{seed}",
                    status="completed",
                    config=config.to_flat(),
                    metrics={"val_accuracy": test + 0.01, "test_accuracy": test},
                    memory={"predicted_total_mb": memory},
                ),
            )
    assert main(["report", "--store", str(root), "--out", str(out)]) == 0
    page = (out / "index.html").read_text().replace("<wbr>", "")  # break hints in long cells
    assert "arXiv 1904.10631" in page
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", page.split("Against the paper")[1])
    row = cells.index("WRN-28-2 fp16 + residual-2* + microbatch 10 + 30% nonzeros")
    memory = cells[row : row + 7]
    assert memory[1:5] == ["memory (MB)", "6.7", "8", "1.3"]  # paper, store, difference
    reduction = cells[row + 7 : row + 14]
    assert reduction[1:5] == ["reduction (x)", "60.7", "50", "-10.7"]
    score = cells[row + 14 : row + 21]
    assert score[1:5] == ["test score", "93.95", "93", "-0.95"]
    assert "not in this store" in page  # the paper's fp16-only row was not run here


def test_a_baseline_recorded_at_the_sweep_s_end_spares_the_report_torch(tmp_path):
    root, out = tmp_path / "store", tmp_path / "out"
    point = {"precision": "fp16", "checkpoint": "residual-2*"}
    write_sweep(root, "one-point", [point], seeds=2)
    assert baselines.record(root, "one-point") is not None  # what the sweep's end does
    script = (
        "import sys; from tune_lowmem.cli import main; code = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules and 'ray' not in sys.modules; sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "report", "--store", str(root), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out / "table3.csv")
    expected = predict(baseline_config(tiny_wrn_config(**point))).total_bytes / MB
    assert table["memory (MB, accounted)"][0] == pytest.approx(expected)
    assert (
        table["configuration"][0] == "fp32, dense, no technique (baseline; predicted, not trained)"
    )


def test_sparse_rows_show_stored_memory_beside_the_accounted(report):
    """Table 3 and the page label every memory figure; a sparse row of a store written before
    sparse layers were packed holds its stored memory (the masked step's dense weights) above
    its accounted one, a dense row's equal to it."""
    root, out = report
    table = pd.read_csv(out / "table3.csv")
    accounted, held = table["memory (MB, accounted)"], table["memory (MB, stored)"]
    trials = read_trials(root).drop_duplicates("seed_group").set_index("seed_group")
    density = trials.loc[table["seed_group"], "config.sparsity.density"]
    sparse = density.to_numpy() < 1
    assert sparse.any() and (~sparse).any()
    assert (held[sparse] > accounted[sparse]).all()
    assert list(held[~sparse]) == pytest.approx(list(accounted[~sparse]))
    markdown = (out / "table3.md").read_text()
    assert "| memory (MB, accounted) | memory (MB, stored) |" in markdown
    page = (out / "index.html").read_text()
    legend = "accounted = sparse weights counted compressed (sparsity.storage: CSR unless set;"
    assert legend in page and "stored = what the step holds (equal for packed runs;" in page
    assert "<th>memory (MB, accounted)</th><th>memory (MB, stored)</th>" in page
    assert "a red diamond is a sparse configuration&#x27;s stored total" in page


# Injected into a copy of the page: records script errors and console errors; once the page has
# loaded, which of its images the browser could not decode, what sticks out of the window (the
# page's width beyond it, and each table, image or figure that ends past its right edge), where
# the answer ends up, and what the panel shows once a point of the front is hovered.
PROBE = """<script>
window.__errors = [];
window.addEventListener("error", (e) => window.__errors.push(String(e.message || e.type)), true);
const logged = console.error;
console.error = (...args) => { window.__errors.push(args.join(" ")); logged(...args); };
window.addEventListener("load", () => {
  const images = [...document.images];
  const broken = images.filter((i) => !(i.complete && i.naturalWidth > 0)).map((i) => i.src);
  const width = document.documentElement.clientWidth;
  const wide = [...document.querySelectorAll("table, img, svg, pre, div")]
    .filter((e) => e.getBoundingClientRect().right > width)
    .map((e) => e.tagName + " " + Math.round(e.getBoundingClientRect().right));
  const figure = document.getElementById("front").getBoundingClientRect();
  const table = document.querySelector("h2 + table").getBoundingClientRect();
  const point = document.querySelector("#front .point");
  point.dispatchEvent(new MouseEvent("mouseenter"));
  Object.assign(document.body.dataset, {
    images: images.length,
    broken: JSON.stringify(broken),
    errors: JSON.stringify(window.__errors),
    overflow: document.documentElement.scrollWidth - width,
    wide: JSON.stringify(wide),
    answer: JSON.stringify([figure.top, figure.bottom, table.top]),
    picked: document.getElementById("picked").textContent,
    hovered: point.dataset.label + point.dataset.command,
  });
});
</script>"""


def probed(page: Path) -> tuple[dict, subprocess.CompletedProcess]:
    """What PROBE recorded of ``page`` opened in a 1280-pixel window (its vertical scroll bar
    taking its width, as in a desktop browser), and Chromium's run."""
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</head>", PROBE + "</head>", 1))
    shown = chromium("--dump-dom", probe.as_uri())
    body = re.search(r"<body([^>]*)>", shown.stdout).group(1)
    return {k: html.unescape(v) for k, v in re.findall(r'data-(\w+)="([^"]*)"', body)}, shown


@needs_chromium
def test_the_page_in_a_real_browser_fits_the_window_and_answers_first(report, tmp_path):
    """index.html opened in headless Chromium, 1280 pixels wide: every image loads and decodes,
    no script or console error (a missing or broken image is one, "Failed to load resource"),
    nothing wider than the window, the front's figure and the table of the front on the first
    screen, and hovering a point of the front shows its configuration and train command. A
    screenshot of the first screen is saved (also to $TUNE_LOWMEM_REPORT_SCREENSHOT when set:
    docs/images/report.png)."""
    _, out = report
    page = tmp_path / "page"
    shutil.copytree(out, page)
    data, shown = probed(page / "index.html")
    assert int(data["images"]) == len(FIGURES), data
    assert json.loads(data["broken"]) == [] and json.loads(data["errors"]) == [], data
    console = [line for line in shown.stderr.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if "ERROR" in line or "Failed" in line], console
    assert int(data["overflow"]) <= 0 and json.loads(data["wide"]) == [], data
    top, bottom, table = json.loads(data["answer"])
    assert top < 200 and bottom < table < WINDOW[1], data  # the answer on the first screen
    assert data["picked"] == data["hovered"] and "tune-lowmem train --set" in data["picked"]

    # the checks see a broken image and a table wider than the window
    (page / f"{FIGURES[0]}.png").write_bytes(b"not a png")
    index = page / "index.html"
    wide = '<table><tr><td style="min-width: 1400px">wide</td></tr></table>'
    index.write_text(index.read_text().replace("<h1>", wide + "<h1>", 1))
    broken, _ = probed(index)
    assert f"{FIGURES[0]}.png" in broken["broken"]
    assert int(broken["overflow"]) > 0 and "TABLE" in broken["wide"]

    screenshot = tmp_path / "report.png"
    chromium("--hide-scrollbars", f"--screenshot={screenshot}", (out / "index.html").as_uri())
    with Image.open(screenshot) as image:
        assert image.size == WINDOW
        low, high = image.convert("L").getextrema()
        assert high - low > 100  # the page drew something
    if os.environ.get("TUNE_LOWMEM_REPORT_SCREENSHOT"):
        shutil.copyfile(screenshot, os.environ["TUNE_LOWMEM_REPORT_SCREENSHOT"])


def test_a_sweep_minimising_the_run_s_peak_reports_it(tmp_path):
    """The quickstart's memory objective is the run's peak, held as stored: the front, Table 3
    and the page are in it, named in words."""
    root, out = tmp_path / "store", tmp_path / "report"
    goals = {"metric.val_accuracy": "maximize", "memory.predicted_run_peak_mb": "minimize"}
    peaks = {}
    for n, changes in enumerate(JOINT[:4]):
        config = tiny_wrn_config(**changes)
        peaks[n] = predict(config).run_peak_bytes / MB
        write_trial(
            root,
            TrialRecord(
                sweep="peak",
                trial_id=f"p{n}",
                status="completed",
                config=config.to_flat(),
                metrics={"val_accuracy": 0.5 + 0.05 * n, "test_accuracy": 0.5},
                memory={"predicted_run_peak_mb": peaks[n], "predicted_total_mb": peaks[n]},
                objectives=goals,
                started_at=START,
                finished_at=START + timedelta(minutes=1),
                epochs_completed=1,
            ),
        )
    assert main(["report", "--store", str(root), "--out", str(out)]) == 0
    table = pd.read_csv(out / "table3.csv")
    assert "memory (MB, stored)" in table.columns
    assert table["memory (MB, stored)"].iloc[0] == pytest.approx(peaks[0], rel=1e-3)
    assert "predicted peak memory of the whole run (MB)" in (out / "index.html").read_text()


def test_memory_parts_keeps_long_labels_and_its_legend_inside_the_image(report, tmp_path):
    """The page shows the figure at most its own width: nothing may run off its left (the bar
    labels) or its right (the legend, the totals), however long a configuration's name."""
    import dataclasses
    import warnings

    from tune_lowmem.analysis import memory_parts
    from tune_lowmem.analysis.points import load_points

    root, _ = report
    points = load_points(str(root))
    groups = points.groups.copy()
    groups["configuration"] += ", with a name long enough to need two lines or more in the margin"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # constrained layout warns when it cannot fit everything
        drawn = memory_parts.draw(dataclasses.replace(points, groups=groups), tmp_path)
    with Image.open(drawn.path) as image:
        pixels = np.asarray(image.convert("L"))
    for edge in (pixels[:, :3], pixels[:, -3:], pixels[-3:, :]):
        assert edge.min() > 200  # white: nothing drawn touches the edge
    legend_rows = pixels[int(pixels.shape[0] * 0.85) :, :]  # the legend sits below the axes
    assert (legend_rows < 100).any()
