"""`tune-lowmem pareto` over a store written with `store.write_trial`.

The rows are synthetic but realistic: real tiny-WRN configs whose memory is the profiler's own
prediction, with hand-chosen accuracies so that the front, the seed intervals and the best
configuration under each budget can be worked out by hand.
"""

from __future__ import annotations

import io
import json
import math
import re
import shlex
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
import yaml

from tests.conftest import tiny_wrn_config
from tune_lowmem.cli import main
from tune_lowmem.config import TrialConfig
from tune_lowmem.memory.predict import predict
from tune_lowmem.store import TrialRecord, write_trial

START = datetime(2024, 5, 1, tzinfo=UTC)
# name -> (config changes, validation accuracy per seed)
POINTS = {
    "A": ({}, [0.81, 0.83]),  # the fp32 dense baseline: most accurate, most memory
    "B": ({"precision": "fp16"}, [0.805, 0.815]),
    "C": ({"precision": "fp16", "microbatch.size": 5, "schedule.milestones": [0.5, 0.75]}, [0.79]),
    "D": (
        {
            "precision": "fp16",
            "microbatch.size": 5,
            "sparsity.density": 0.3,
            "checkpoint": "residual-2*",
        },
        [0.75, 0.76, 0.74],
    ),
    "E": ({"microbatch.size": 5}, [0.70]),  # dominated by C: more memory, less accurate
}
FRONT = ["D", "C", "B", "A"]  # by memory, smallest first


def predicted_memory(config: TrialConfig, written_before_packing: bool = False) -> dict:
    """The memory columns of a trial of ``config``, as the profiler predicts them (accounted, and
    the stored total). `written_before_packing`: as a store written before sparse layers were
    packed holds a sparse trial, whose step kept dense weights, gradients and state (the stored
    total of the same config at density 1; its masks aside) beside the accounted objective."""
    report = predict(config).to_dict()
    parts = {
        f"predicted_{p}_mb": report[f"predicted_{p}_mb"]
        for p in ("model", "optimizer", "activation", "total")
    }
    dense = config.replace(**{"sparsity.density": 1.0})
    held_by = dense if written_before_packing and config.sparsity.enabled else config
    held = {"predicted_stored_total_mb": predict(held_by).total_mb}
    return {**parts, **held, "flops_per_step": report["flops_per_step"]}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    memory, configs, n = {}, {}, 0
    for name, (changes, accuracies) in POINTS.items():
        configs[name] = tiny_wrn_config(**changes)
        memory[name] = predicted_memory(configs[name], written_before_packing=name == "D")
        for seed, accuracy in enumerate(accuracies):
            n += 1
            write_trial(
                root,
                TrialRecord(
                    sweep="wrn-tpe",
                    trial_id=f"t{n:03d}",
                    status="completed",
                    config=configs[name].replace(seed=seed).to_flat(),
                    metrics={"val_accuracy": accuracy, "test_accuracy": accuracy - 0.01},
                    memory=memory[name],
                    started_at=START + timedelta(minutes=n),
                    finished_at=START + timedelta(minutes=n + 1),
                    epochs_completed=1,
                ),
            )
    tiny = tiny_wrn_config(**{"sparsity.density": 0.01, "precision": "fp16", "microbatch.size": 1})
    for status, reason in (("failed", "loss became NaN"), ("infeasible", "over the memory budget")):
        n += 1  # the smallest and "most accurate" of all, but not completed: never an answer
        write_trial(
            root,
            TrialRecord(
                sweep="wrn-tpe",
                trial_id=f"t{n:03d}",
                status=status,
                failure_reason=reason,
                config=tiny.to_flat(),
                metrics={"val_accuracy": 0.99},
                memory=predicted_memory(tiny),
            ),
        )
    write_trial(
        root,
        TrialRecord(
            sweep="other",
            trial_id="t999",
            status="completed",
            config=configs["A"].replace(seed=7).to_flat(),
            metrics={"val_accuracy": 0.5},
            memory=memory["A"],
        ),
    )
    sizes = [memory[name]["predicted_total_mb"] for name in FRONT]
    assert (
        sizes == sorted(sizes)
        and memory["C"]["predicted_total_mb"] < memory["E"]["predicted_total_mb"]
    )
    return root, configs, memory


def pareto(capsys, *argv) -> tuple[int, str, str]:
    code = main(["pareto", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_front_is_the_non_dominated_seed_groups_by_memory(store, capsys):
    root, configs, memory = store
    code, out, _ = pareto(capsys, "--store", root, "--sweep", "wrn-tpe", "--format", "json")
    assert code == 0
    front = json.loads(out)
    assert [TrialConfig.from_dict(row["config"]) for row in front] == [
        configs[name].replace(seed=0) for name in FRONT
    ]
    a = front[-1]
    assert a["seeds"] == 2 and a["configuration"] == "fp32"
    accuracy = a["objectives"]["metric.val_accuracy"]
    assert accuracy["mean"] == pytest.approx(0.82)
    assert accuracy["ci95"] == pytest.approx(1.96 * math.sqrt(0.0002) / math.sqrt(2))  # std 0.01414
    assert front[0]["seeds"] == 3 and front[0]["objectives"]["metric.val_accuracy"][
        "mean"
    ] == pytest.approx(0.75)
    assert front[1]["objectives"]["metric.val_accuracy"]["ci95"] is None  # one seed: no interval
    assert [
        row["objectives"]["memory.predicted_total_mb"]["mean"] for row in front
    ] == pytest.approx([memory[name]["predicted_total_mb"] for name in FRONT])
    assert front[0]["configuration"] == "fp16, 30% nonzeros, microbatch 5, checkpoint residual-2*"


def test_table_and_csv_show_the_same_front(store, capsys):
    root, configs, _ = store
    code, text, _ = pareto(capsys, "--store", root, "--sweep", "wrn-tpe", "--wide")
    assert code == 0
    table, runs = text.split("\nTo train a row:\n")
    table, memory_columns = table.split("\nThe memory and time columns:\n")
    *lines, legend = table.strip().splitlines()
    assert len(lines) == 1 + len(FRONT) and legend.startswith("memory: accounted = ")
    assert memory_columns.splitlines() == [
        (
            "  memory.predicted_total_mb: predicted training step memory (MB); from the config's "
            "shapes, before training; accounted"
        ),
        (
            "  memory.predicted_stored_total_mb: predicted training step memory as the step stores "
            "it (MB); from the config's shapes, before training; stored"
        ),
        (
            "  memory.measured_total_mb: measured training step memory (MB); on a real training "
            "step; accounted"
        ),
    ]
    assert "0.82 ± 0.02" in lines[-1] and "  fp32  " in lines[-1]
    assert "test accuracy (not used to choose)" in lines[0] and "0.81 ± 0.02" in lines[-1]
    # each row's command line trains exactly that configuration
    for line, name in zip(runs.strip().splitlines(), FRONT, strict=True):
        words = shlex.split(line.split(": ", 1)[1])
        assert words[:2] == ["tune-lowmem", "train"]
        overrides = dict(w.split("=", 1) for w in words[3::2])
        flat = {k: yaml.safe_load(v) for k, v in overrides.items()}
        assert TrialConfig.from_dict(flat) == configs[name].replace(seed=0)
    assert "(trials t001, t002)" in runs.strip().splitlines()[-1]
    code, text, _ = pareto(capsys, "--store", root, "--sweep", "wrn-tpe", "--format", "csv")
    frame = pd.read_csv(io.StringIO(text))
    assert list(frame["seeds"]) == [3, 1, 2, 2]
    assert [json.loads(ids) for ids in frame["trial_ids"]] == [
        ["t006", "t007", "t008"],
        ["t005"],
        ["t003", "t004"],
        ["t001", "t002"],
    ]
    assert frame["metric.test_accuracy.mean"].iloc[-1] == pytest.approx(0.81)
    assert list(frame["config.microbatch.size"].fillna(0).astype(int)) == [5, 5, 0, 0]
    assert json.loads(frame["config.schedule.milestones"][1]) == [0.5, 0.75]


def test_all_sweeps_merge_seed_groups_across_sweeps(store, capsys):
    root, configs, _ = store
    _, out, _ = pareto(capsys, "--store", root, "--format", "json")
    front = [TrialConfig.from_dict(row["config"]) for row in json.loads(out)]
    # A's third seed, in sweep "other", scored 0.5: A's mean (0.713) falls below B's 0.81
    assert front == [configs[name].replace(seed=0) for name in ("D", "C", "B")]


@pytest.mark.parametrize(
    ("between", "expected"), [(("C", "B"), "C"), (("B", "A"), "B"), (("A", None), "A")]
)
def test_best_under_budget_is_yaml_that_profiles_under_the_budget(
    store, capsys, tmp_path, between, expected
):
    root, configs, memory = store
    low, high = between
    top = memory[high]["predicted_total_mb"] if high else 1e6
    budget = (memory[low]["predicted_total_mb"] + top) / 2
    code, out, _ = pareto(capsys, "--store", root, "--sweep", "wrn-tpe", "--max-memory-mb", budget)
    assert code == 0 and out.startswith("# The best configuration on validation data within")
    path = tmp_path / "best.yaml"
    path.write_text(out)
    chosen = TrialConfig.from_yaml(path)
    assert chosen == configs[expected].replace(seed=0)  # list fields decoded from the store's JSON
    assert main(["profile", str(path), "--json"]) == 0
    profiled = json.loads(capsys.readouterr().out)
    assert profiled["predicted"]["predicted_total_mb"] <= budget
    assert profiled["predicted"]["predicted_total_mb"] == pytest.approx(
        memory[expected]["predicted_total_mb"]
    )


def test_min_accuracy_and_budget_together(store, capsys):
    root, configs, memory = store
    budget = memory["A"]["predicted_total_mb"] + 1
    _, out, _ = pareto(
        capsys,
        "--store",
        root,
        "--sweep",
        "wrn-tpe",
        "--max-memory-mb",
        budget,
        "--min-accuracy",
        0.8,
        "--format",
        "json",
    )
    best = json.loads(out)
    assert TrialConfig.from_dict(best["config"]) == configs["A"].replace(seed=0)
    _, out, _ = pareto(
        capsys, "--store", root, "--sweep", "wrn-tpe", "--min-accuracy", 0.785, "--format", "csv"
    )
    assert len(pd.read_csv(io.StringIO(out))) == 3  # D (0.75) is dropped


def test_no_configuration_under_the_budget_says_the_smallest(store, capsys):
    root, _, memory = store
    smallest = memory["D"]["predicted_total_mb"]
    code, out, err = pareto(
        capsys, "--store", root, "--sweep", "wrn-tpe", "--max-memory-mb", smallest / 2
    )
    assert code == 1 and out == ""
    assert f"the smallest found is {smallest:.4g} MB" in err
    code, _, err = pareto(capsys, "--store", root, "--sweep", "wrn-tpe", "--min-accuracy", 0.95)
    assert code == 1 and "the best found is 0.82" in err


def test_custom_objectives_bare_names_resolve(store, capsys):
    root, _, _ = store
    _, out, _ = pareto(
        capsys,
        "--store",
        root,
        "--sweep",
        "wrn-tpe",
        "--format",
        "json",
        "--objectives",
        "val_accuracy:max",
        "--objectives",
        "predicted_activation_mb:min",
    )
    front = json.loads(out)
    assert set(front[0]["objectives"]) == {"metric.val_accuracy", "memory.predicted_activation_mb"}
    assert front[-1]["objectives"]["metric.val_accuracy"]["mean"] == pytest.approx(0.82)
    assert front[-1]["reported"]["metric.test_accuracy"]["mean"] == pytest.approx(0.81)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sweep", "nope"], "--sweep: 'nope' is not in"),
        (
            ["--objectives", "metric.bleu:max,memory.predicted_total_mb:min"],
            "; allowed: metric.test_accuracy, metric.val_accuracy, memory.",
        ),
        (["--objectives", "metric.val_accuracy:up"], "COLUMN:max or COLUMN:min is required"),
        (
            ["--objectives", "test_accuracy:max,memory.predicted_total_mb:min"],
            "--objectives: metric.test_accuracy is not a validation metric; "
            + "choices are made on validation data only (e.g. metric.val_accuracy)",
        ),
        (["--max-memory-mb", "-5"], "--max-memory-mb: '-5' is not allowed; a number > 0"),
        (["--max-memory-mb", "0"], "--max-memory-mb: '0' is not allowed; a number > 0"),
        (["--max-memory-mb", "nan"], "--max-memory-mb: 'nan' is not allowed; a number > 0"),
        (["--max-memory-mb", "inf"], "--max-memory-mb: 'inf' is not allowed; a number > 0"),
        (["--max-memory-mb", "lots"], "--max-memory-mb: 'lots' is not allowed; a number > 0"),
        (["--min-accuracy", "-0.1"], "--min-accuracy: '-0.1' is not allowed; a number >= 0"),
        (["--min-accuracy", "NaN"], "--min-accuracy: 'NaN' is not allowed; a number >= 0"),
        (["--objectives", "metric.val_accuracy:max"], "two or more objectives are required"),
        (
            [
                "--objectives",
                "memory.predicted_total_mb:min,memory.predicted_model_mb:min",
                "--max-memory-mb",
                "5",
            ],
            "--max-memory-mb: needs a maximized objective",
        ),
    ],
)
def test_bad_input_is_one_clear_line(store, capsys, argv, message):
    root, _, _ = store
    code, out, err = pareto(capsys, "--store", root, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_empty_store_and_unknown_sweep(store, capsys, tmp_path):
    code, _, err = pareto(capsys, "--store", tmp_path / "empty")
    assert code == 2 and "holds no trials" in err
    root, _, _ = store
    code, _, err = pareto(capsys, "--store", root, "--sweep", "missing")
    assert code == 2 and "allowed: other, wrn-tpe" in err


def test_only_failed_trials_is_exit_1(tmp_path, capsys):
    write_trial(
        tmp_path,
        TrialRecord(
            sweep="s",
            trial_id="t1",
            status="failed",
            failure_reason="boom",
            config=tiny_wrn_config().to_flat(),
        ),
    )
    code, _, err = pareto(capsys, "--store", tmp_path)
    assert code == 1 and "no completed trial in the store (1 failed)" in err


def test_objective_no_trial_reports_is_exit_1(store, capsys):
    root, _, _ = store
    code, _, err = pareto(
        capsys, "--store", root, "--objectives", "val_accuracy:max,measured_total_mb:min"
    )
    assert (
        code == 1
        and "no completed trial reports all of metric.val_accuracy, memory.measured_total_mb" in err
    )


def cells_of(header: str, line: str) -> dict[str, str]:
    """A row of `aligned`'s table by column name: columns start after two spaces or more."""
    starts = [0] + [m.end() for m in re.finditer(r" {2,}(?=\S)", header)]
    ends = [*starts[1:], None]
    return {header[a:b].strip(): line[a:b].strip() for a, b in zip(starts, ends, strict=True)}


def test_sparse_rows_show_stored_beside_accounted_with_labels(store, capsys):
    """D (30% nonzeros) is a row of a store written before sparse layers were packed: its stored
    total is above the accounted objective, and every memory figure says which it is; dense
    rows' are equal."""
    root, _, memory = store
    assert memory["D"]["predicted_stored_total_mb"] > memory["D"]["predicted_total_mb"]
    _, text, _ = pareto(capsys, "--store", root, "--sweep", "wrn-tpe", "--wide")
    header, *rows = text.split("\nThe memory and time columns:\n")[0].strip().splitlines()[:-1]
    cells = {name: cells_of(header, row) for name, row in zip(FRONT, rows, strict=True)}
    assert "memory.predicted_total_mb (min, accounted)" in header
    assert "memory.predicted_stored_total_mb (stored)" in header
    d = cells["D"]
    assert float(d["memory.predicted_stored_total_mb (stored)"]) == pytest.approx(
        memory["D"]["predicted_stored_total_mb"], rel=1e-3
    )
    assert float(d["memory.predicted_stored_total_mb (stored)"]) > float(
        d["memory.predicted_total_mb (min, accounted)"]
    )
    assert "Stored is shown beside accounted; they are equal for dense configurations" in text
    _, out, _ = pareto(capsys, "--store", root, "--sweep", "wrn-tpe", "--format", "csv")
    frame = pd.read_csv(io.StringIO(out))
    assert list(frame["memory.predicted_total_mb.counted"]) == ["accounted"] * 4
    assert list(frame["memory.predicted_stored_total_mb.counted"]) == ["stored"] * 4
    held, accounted = (
        frame["memory.predicted_stored_total_mb.mean"],
        frame["memory.predicted_total_mb.mean"],
    )
    assert held[0] > accounted[0] and list(held[1:]) == pytest.approx(list(accounted[1:]))
    # without D the front is dense: the stored column would repeat the accounted one, said once
    _, text, _ = pareto(
        capsys, "--store", root, "--sweep", "wrn-tpe", "--min-accuracy", 0.785, "--wide"
    )
    assert "memory.predicted_stored_total_mb" not in text
    assert "Stored = accounted for every configuration here where it is known." in text


def test_the_best_under_a_budget_says_what_each_memory_figure_is(tmp_path, capsys):
    """A sparse configuration trained packed holds what it accounts: the answer names each memory
    figure in words, says where it comes from, and says stored = accounted without calling the
    configuration dense."""
    config = tiny_wrn_config(**{"sparsity.density": 0.1, "precision": "fp16"})
    memory = predicted_memory(config)
    assert memory["predicted_stored_total_mb"] == memory["predicted_total_mb"]
    write_trial(
        tmp_path,
        TrialRecord(
            sweep="packed",
            trial_id="t1",
            status="completed",
            config=config.to_flat(),
            metrics={"val_accuracy": 0.5, "test_accuracy": 0.49},
            memory={**memory, "measured_total_mb": 1.25},
        ),
    )
    _, out, _ = pareto(capsys, "--store", tmp_path, "--max-memory-mb", 1e6, "--wide")
    comment = [line for line in out.splitlines() if line.startswith("#")]
    predicted = f"{memory['predicted_total_mb']:.4g}"
    assert comment[1] == "#   fp16, 10% nonzeros"
    assert comment[3:7] == [
        "#   validation accuracy: 0.5 (1 seed; metric.val_accuracy)",
        (
            f"#   predicted training step memory (MB): {predicted} (1 seed; from the config's "
            "shapes, before training; accounted; memory.predicted_total_mb)"
        ),
        (
            "#   measured training step memory (MB): 1.25 (on a real training step; accounted; "
            "memory.measured_total_mb)"
        ),
        "#   test accuracy (not used to choose): 0.49",
    ]
    assert comment[7].endswith("Stored = accounted for every configuration here where it is known.")
    assert "sparse where" not in out


def test_a_store_without_stored_figures_still_answers(store, capsys, tmp_path):
    """Rows of an earlier version have no stored column: pareto, status and report still work,
    and say the stored figure is unknown rather than equal."""
    import shutil

    import pyarrow.parquet as pq

    root = tmp_path / "old"
    shutil.copytree(store[0], root)
    for path in root.glob("trials/*/*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns([c for c in table.column_names if "stored" in c]), path)
    code, text, _ = pareto(capsys, "--store", root, "--sweep", "wrn-tpe", "--wide")
    assert code == 0 and "memory.predicted_total_mb (min, accounted)" in text
    assert "stored_total" not in text.split("To train")[0].splitlines()[0]
    assert "4 configuration(s) were written by an earlier version without a stored figure" in text
    _, out, _ = pareto(capsys, "--store", root, "--sweep", "wrn-tpe", "--format", "csv")
    assert len(pd.read_csv(io.StringIO(out))) == 4
    assert main(["status", "wrn-tpe", "--store", str(root)]) == 0
    assert "accounted only" in capsys.readouterr().out
    assert main(["report", "--store", str(root), "--out", str(tmp_path / "report")]) == 0
    capsys.readouterr()
    markdown = (tmp_path / "report" / "table3.md").read_text()
    assert "| memory (MB, accounted) |" in markdown and "(MB, stored)" not in markdown
