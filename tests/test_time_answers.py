"""Answers with their price: `pareto --max-slowdown`/``--max-update-s`` and the API's `best`
against a brute-force filter of random stores built here, the answer's time comments, fronts with
time as an objective, and one-line refusals."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

import tune_lowmem
from tune_lowmem.analysis.points import NoResult
from tune_lowmem.cli import main
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.pareto import non_dominated_mask
from tune_lowmem.store import TrialRecord, read_trials, write_trial

BASE = TrialConfig.from_dict({"model.depth": 10, "model.width": 1})
OBJECTIVES = {"metric.val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"}
VARIANTS = [  # every one differs from the base: its seed group is never the baseline's
    {"precision": p, "sparsity.density": d, "checkpoint": c}
    for p, d, c in itertools.product(("fp32", "fp16", "bf16"), (1.0, 0.5), ("none", "residual-2*"))
][1:]
MEASURED, PREDICTED = "time.measured_update_s", "time.predicted_update_s"


def write(root: Path, trial_id: str, config: TrialConfig, point: int | None, **figures) -> None:
    times = {
        key: figures[key] for key in ("measured_update_s", "predicted_update_s") if key in figures
    }
    write_trial(
        root,
        TrialRecord(
            sweep="timed",
            trial_id=trial_id,
            status="completed",
            config=config.to_flat(),
            metrics={"val_accuracy": figures["accuracy"], "test_accuracy": figures["accuracy"]},
            memory={"predicted_total_mb": figures["mb"]},
            time=times,
            point=point,
            objectives=OBJECTIVES,
        ),
    )


def random_store(
    root: Path, seed: int, baseline: bool = True, timed: bool = True, every_prediction=False
) -> Path:
    """A baseline trained with three seeds (rows without a point) and random configurations of
    one to three seeds; some trials measured no time, a few have no predicted time either
    (unless `every_prediction`)."""
    rng = np.random.default_rng(seed)

    def figures() -> dict:
        found = {"accuracy": float(rng.uniform(0.5, 0.9))}
        if timed and rng.random() > 0.25:
            found["measured_update_s"] = float(rng.uniform(0.05, 0.4))
        if timed and (every_prediction or rng.random() > 0.15):
            found["predicted_update_s"] = float(rng.uniform(0.05, 0.4))
        return found

    if baseline:
        for s in range(3):
            times = {"measured_update_s": 0.1 + 0.02 * s, "predicted_update_s": 0.09}
            base = {**figures(), **(times if timed else {})}
            write(root, f"base-{s}", BASE.replace(seed=s), None, mb=20.0, **base)
    for point, changes in enumerate(VARIANTS):
        mb = float(rng.uniform(2, 20))
        for s in range(int(rng.integers(1, 4))):
            config = BASE.replace(**changes, seed=s)
            write(root, f"p{point}-{s}", config, point, mb=mb, **figures())
    return root


def brute_force(root: Path, max_mb=None, max_slowdown=None, max_update_s=None) -> str | None:
    """The seed group the answer must be, worked out from the trial rows alone."""
    rows = read_trials(root)
    base = rows[rows["point"].isna()]
    base_s = {
        col: base.groupby("config.seed")[col].mean().median() for col in (MEASURED, PREDICTED)
    }
    means = rows.groupby("seed_group")[
        ["metric.val_accuracy", "memory.predicted_total_mb", MEASURED, PREDICTED]
    ].mean()
    best = None
    for group, row in means.iterrows():
        seconds = row[MEASURED] if not math.isnan(row[MEASURED]) else row[PREDICTED]
        ratios = [row[col] / base_s[col] for col in (MEASURED, PREDICTED)]
        ratio = next((r for r in ratios if not math.isnan(r)), math.nan)
        if max_mb is not None and not row["memory.predicted_total_mb"] <= max_mb:
            continue
        if max_update_s is not None and not seconds <= max_update_s:
            continue
        if max_slowdown is not None and not ratio <= max_slowdown:
            continue
        if best is None or row["metric.val_accuracy"] > means.loc[best, "metric.val_accuracy"]:
            best = group
    return best


@pytest.mark.parametrize("seed", range(4))
def test_the_best_within_time_and_memory_is_the_brute_force_answer(tmp_path, seed):
    root = random_store(tmp_path, seed)
    runs = tune_lowmem.open_store(root)
    limits = [
        (mb, slow, secs)
        for mb in (None, 8.0, 14.0)
        for slow in (None, 1.2, 2.5)
        for secs in (None, 0.2)
        if (mb, slow, secs) != (None, None, None)
    ]
    answered = 0
    for mb, slow, secs in limits:
        expected = brute_force(root, mb, slow, secs)
        if expected is None:
            with pytest.raises(NoResult, match="no configuration within"):
                runs.best(mb, max_slowdown=slow, max_update_s=secs)
            continue
        found = runs.best(mb, max_slowdown=slow, max_update_s=secs)
        assert found["seed_group"] == expected, (mb, slow, secs)
        answered += 1
    assert answered >= 3  # the limits bite differently, and most have an answer


def test_the_cli_answers_the_same_and_its_yaml_says_the_price(tmp_path, capsys):
    root = random_store(tmp_path, 7)
    expected = brute_force(root, 14.0, 2.5)
    code = main(["pareto", "--store", str(root), "--max-memory-mb", "14", "--max-slowdown", "2.5"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    rows = read_trials(root)
    chosen = rows[rows["seed_group"] == expected]
    config = yaml.safe_load(out)
    assert config["precision"] == chosen["config.precision"].iloc[0]
    assert config["sparsity.density"] == chosen["config.sparsity.density"].iloc[0]
    said = next(line for line in out.splitlines() if "time per update:" in line)
    measured = chosen[MEASURED].mean()
    predicted = chosen[PREDICTED].mean()
    assert "within 14 MB and 2.5x the baseline's time per update" in out
    if not math.isnan(predicted):
        assert f"predicted {predicted:.3g} s" in said
    if not math.isnan(measured):  # measured over the baseline's median of 0.1, 0.12, 0.14
        assert f"measured {measured:.3g} s" in said
        assert f"{measured / 0.12:.3g}x the baseline's (measured, the median of its 3" in said
    else:  # predicted over predicted, never measured over predicted
        assert f"{predicted / 0.09:.3g}x the baseline's (predicted" in said


def test_the_time_limit_alone_and_in_seconds(tmp_path, capsys):
    root = random_store(tmp_path, 3)
    code = main(["pareto", "--store", str(root), "--max-update-s", "0.2"])
    out, _ = capsys.readouterr()
    assert code == 0 and "# The best configuration on validation data within 0.2 s" in out
    assert tune_lowmem.open_store(root).best(max_update_s=0.2)["seed_group"] == brute_force(
        root, max_update_s=0.2
    )


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--max-slowdown", "0"], "--max-slowdown: '0' is not allowed; a number > 0"),
        (["--max-slowdown", "-1"], "--max-slowdown: '-1' is not allowed; a number > 0"),
        (["--max-update-s", "0"], "--max-update-s: '0' is not allowed; a number > 0"),
        (["--max-update-s", "nan"], "--max-update-s: 'nan' is not allowed; a number > 0"),
    ],
)
def test_bad_limits_are_one_line_and_nothing_printed(tmp_path, capsys, argv, flag):
    root = random_store(tmp_path, 0)
    code = main(["pareto", "--store", str(root), "--max-memory-mb", "10", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and flag in err and len(err.strip().splitlines()) == 1


def test_the_api_refuses_bad_limits_naming_the_flag(tmp_path):
    runs = tune_lowmem.open_store(random_store(tmp_path, 0))
    for kwargs, flag in (
        ({"max_slowdown": 0.0}, "--max-slowdown"),
        ({"max_update_s": -1.0}, "--max-update-s"),
        ({"max_slowdown": math.inf}, "--max-slowdown"),
    ):
        with pytest.raises(ConfigError, match=flag):
            runs.best(10.0, **kwargs)
    with pytest.raises(ConfigError, match="a budget or a time limit is required"):
        runs.best()


def test_a_store_without_time_or_baseline_refuses_the_time_flags(tmp_path, capsys):
    untimed = random_store(tmp_path / "untimed", 1, timed=False)
    for flag in ("--max-slowdown", "--max-update-s"):
        code = main(["pareto", "--store", str(untimed), "--max-memory-mb", "30", flag, "2"])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert f"{flag}: the store has no time per update" in err
    code = main(["pareto", "--store", str(untimed), "--max-memory-mb", "30"])
    out, _ = capsys.readouterr()  # the memory answer stands, with no time line
    assert code == 0 and "time per update:" not in out
    unbased = random_store(tmp_path / "unbased", 1, baseline=False)
    code = main(["pareto", "--store", str(unbased), "--max-slowdown", "2"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "--max-slowdown: the store trained no baseline" in err
    code = main(["pareto", "--store", str(unbased), "--max-update-s", "0.3"])
    out, _ = capsys.readouterr()
    assert code == 0 and "no baseline trained to compare with" in out


@pytest.mark.parametrize("seed", range(3))
def test_fronts_of_two_and_three_objectives_with_time(tmp_path, seed, capsys):
    root = random_store(tmp_path, seed)
    runs = tune_lowmem.open_store(root)
    rows = read_trials(root)
    means = rows.groupby("seed_group")[
        ["metric.val_accuracy", "memory.predicted_total_mb", MEASURED]
    ].mean()
    for columns, ways in (
        (["metric.val_accuracy", MEASURED], ["maximize", "minimize"]),
        (
            ["metric.val_accuracy", "memory.predicted_total_mb", MEASURED],
            ["maximize"] + ["minimize"] * 2,
        ),
    ):
        specs = [f"{c}:{w[:3]}" for c, w in zip(columns, ways, strict=True)]
        expected = set(means.index[non_dominated_mask(means[columns].to_numpy(), ways)])
        assert set(runs.front(objectives=specs)["seed_group"]) == expected
        assert (
            main(
                [
                    "pareto",
                    "--store",
                    str(root),
                    "--objectives",
                    ",".join(specs),
                    "--format",
                    "json",
                ]
            )
            == 0
        )
        shown = json.loads(capsys.readouterr().out)
        assert {row["seed_group"] for row in shown} == expected


def test_the_tables_show_time_per_update(tmp_path, capsys):
    root = random_store(tmp_path, 2)
    for argv in (["pareto", "--store", str(root)], ["status", "timed", "--store", str(root)]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        head = next(line for line in out.splitlines() if line.startswith("trial"))
        assert "measured_update_s" in head and "predicted_update_s" in head
        assert max(map(len, out.splitlines())) <= 120


@pytest.fixture(scope="module")
def timed_report(tmp_path_factory):
    root = random_store(tmp_path_factory.mktemp("store"), 11, every_prediction=True)
    out = tmp_path_factory.mktemp("report")
    assert main(["report", "--store", str(root), "--out", str(out)]) == 0
    return root, out


def test_the_report_s_front_has_the_time_ratio_of_every_point(timed_report):
    root, out = timed_report
    rows = read_trials(root)
    means = rows.groupby("seed_group")[[MEASURED, PREDICTED]].mean()
    table = pd.read_csv(out / "table3.csv")
    assert table["seeds"].iloc[0] == 3  # the sweep's trained baseline leads
    for _, row in table.iterrows():
        measured, predicted = means.loc[row["seed_group"]]
        expected = measured / 0.12 if not math.isnan(measured) else predicted / 0.09
        assert row["time ratio (x)"] == pytest.approx(expected)
    page = (out / "index.html").read_text()
    front = page[page.index("<h2>The Pareto front against the baseline</h2>") :]
    header = front[: front.index("</thead>")]
    assert "<th>reduction (x)</th><th>time ratio (x)</th>" in header  # beside the reduction
    body = front[front.index("<tbody>") : front.index("</tbody>")]
    ratios = re.findall(r"<td class=num>([0-9.]+)×</td>", body)  # reduction, then time ratio
    assert len(ratios) == 2 * len(table)


def test_the_report_draws_memory_against_time_for_the_front(timed_report):
    _, out = timed_report
    with Image.open(out / "memory_vs_time.png") as image:
        assert image.format == "PNG"
        low, high = image.convert("L").getextrema()
        assert high - low > 100
    page = (out / "index.html").read_text()
    assert '<img src="memory_vs_time.png"' in page
    assert "hollow where only the profiler" in page


def test_an_untimed_store_skips_the_figure_and_the_ratio(tmp_path):
    root = random_store(tmp_path / "store", 5, timed=False)
    out = tmp_path / "out"
    assert main(["report", "--store", str(root), "--out", str(out)]) == 0
    assert not (out / "memory_vs_time.png").exists()
    assert "time ratio" not in pd.read_csv(out / "table3.csv").columns
    assert "no configuration of the front has a time per update" in (out / "index.html").read_text()
