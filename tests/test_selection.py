"""One rule everywhere: `pareto`, `status` and `report` choose on the sweep's validation metric,
never on test data, and say so plainly when a store has no validation metric to choose on.

The store has a point that is best on test but not on validation (X: the best validation
accuracy; Y: same memory, worse validation, much better test); every command must pick X.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import tiny_wrn_config
from tune_lowmem.cli import main
from tune_lowmem.store import TrialRecord, write_trial

MEMORY = {"predicted_total_mb": 10.0, "predicted_model_mb": 1.0}
OBJECTIVES = {"metric.val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"}
ROOT = Path(__file__).resolve().parents[1]


def write(root, trial_id, changes, val, test, memory=10.0, objectives=OBJECTIVES, sweep="s"):
    metrics = {"test_accuracy": test} | ({} if val is None else {"val_accuracy": val})
    write_trial(
        root,
        TrialRecord(
            sweep=sweep,
            trial_id=trial_id,
            status="completed",
            config=tiny_wrn_config(**changes).to_flat(),
            metrics=metrics,
            memory={**MEMORY, "predicted_total_mb": memory},
            objectives=objectives,
            point=int(trial_id[1:]),
        ),
    )


@pytest.fixture
def store(tmp_path):
    write(tmp_path, "t1", {"precision": "bf16"}, val=0.80, test=0.60)  # X: best on validation
    write(tmp_path, "t2", {"checkpoint": "residual-2"}, val=0.70, test=0.95)  # Y: best on test
    write(tmp_path, "t3", {}, val=0.50, test=0.50, memory=20.0)  # the baseline
    return tmp_path


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_pareto_and_budget_choose_on_validation_not_test(store, capsys):
    code, out, _ = run(capsys, "pareto", "--store", store, "--format", "json")
    assert code == 0
    assert [row["trial_ids"] for row in json.loads(out)] == [["t1"]]  # Y is dominated on val
    code, out, _ = run(
        capsys, "pareto", "--store", store, "--max-memory-mb", 15, "--format", "json"
    )
    best = json.loads(out)
    assert best["trial_ids"] == ["t1"] and best["points"] == [1]
    assert best["reported"]["metric.test_accuracy"]["mean"] == pytest.approx(0.60)


def test_status_pareto_report_choose_on_validation_without_ray_or_torch(store, capsys):
    space = {"name": "s", "objectives": {"val_accuracy": "maximize"}, "num_samples": 3}
    (store / "ray" / "s").mkdir(parents=True)
    (store / "ray" / "s" / "space.yaml").write_text(yaml.safe_dump(space))
    script = (
        "import sys; from tune_lowmem.cli import main; code = main(sys.argv[1:]); "
        "assert 'ray' not in sys.modules and 'torch' not in sys.modules, 'imported'; sys.exit(code)"
    )
    outputs = {}
    report = ["report", "--out", str(store / "report")]  # a trained baseline: no profiler needed
    for argv in (["status", "s"], ["pareto"], report):
        done = subprocess.run(
            [sys.executable, "-c", script, *argv, "--store", str(store)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs[argv[0]] = done.stdout
    for command in ("status", "pareto"):  # the front's one row: its train line names t1
        assert "--trial t1\n" in outputs[command] and "--trial t2\n" not in outputs[command]
    assert "3 trials stored (3 completed, 0 failed, 0 infeasible, 0 stopped)" in outputs["status"]
    assert "3 points x 1 seed(s) planned" in outputs["status"]


def test_report_rows_and_figures_choose_on_validation(store, tmp_path, capsys):
    out = tmp_path / "report"
    code, _, _ = run(capsys, "report", "--store", store, "--out", out)
    assert code == 0
    table = pd.read_csv(out / "table3.csv")
    assert list(table["trials"]) == ["t3", "t1"]  # the baseline, then X; never Y
    assert table["test accuracy (%)"].tolist() == pytest.approx([50.0, 60.0])
    assert "validation accuracy" in (out / "index.html").read_text()


def test_objectives_come_from_the_saved_space_of_an_old_store(tmp_path, capsys):
    """A store without the objectives column: the sweep's saved space (its old memory name too)
    says what to choose on; here a validation loss, minimised."""
    for i, (val_loss, test) in enumerate([(0.4, 0.6), (0.9, 0.99)], 1):
        write(tmp_path, f"t{i}", {"precision": ["bf16", "fp32"][i - 1]}, None, test, objectives={})
        frame_path = tmp_path / "trials" / "sweep=s" / f"t{i}.parquet"
        frame = pd.read_parquet(frame_path)
        frame["metric.val_loss"] = val_loss
        frame.to_parquet(frame_path, index=False)
    space = {"objectives": {"val_loss": "minimize", "memory_total_mb": "minimize"}}
    (tmp_path / "ray" / "s").mkdir(parents=True)
    (tmp_path / "ray" / "s" / "space.yaml").write_text(yaml.safe_dump(space))
    code, out, _ = run(capsys, "pareto", "--store", tmp_path, "--format", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["trial_ids"] == ["t1"]
    assert set(row["objectives"]) == {"metric.val_loss", "memory.predicted_total_mb"}


def test_a_store_without_validation_metrics_says_so(tmp_path, capsys):
    write(tmp_path, "t1", {}, val=None, test=0.9, objectives={})
    for argv in (["pareto"], ["report", "--out", tmp_path / "out"]):
        code, out, err = run(capsys, *argv, "--store", tmp_path)
        assert code == 1 and out == ""
        assert "no validation metric to choose on" in err and "never on test data" in err


def test_a_sweep_that_optimised_a_test_metric_is_not_chosen_on(tmp_path, capsys):
    objectives = {"metric.test_accuracy": "maximize", "memory.predicted_total_mb": "minimize"}
    write(tmp_path, "t1", {}, val=0.5, test=0.9, objectives=objectives)
    code, _, err = run(capsys, "pareto", "--store", tmp_path)
    assert code == 2
    assert "the sweep's objectives: metric.test_accuracy is not a validation metric" in err


def test_a_user_task_s_columns_need_no_task_names(tmp_path):
    """The labels come from columns: a model field that varies names the model, a smaller one
    marks a smaller-model baseline, the batch unit comes from the batch field."""
    from tune_lowmem.analysis.points import configurations, microbatch_size
    from tune_lowmem.store import read_trials

    for i, width in enumerate((1, 2), 1):
        write(tmp_path, f"t{i}", {"model.width": width, "microbatch.size": 5}, 0.5, 0.5)
    by_width = configurations(read_trials(tmp_path)).set_index("config.model.width")
    assert by_width.loc[1, "configuration"] == "model width=1, fp32, microbatch 5"
    assert by_width.loc[1, "techniques"] == "microbatch + smaller width"
    assert by_width.loc[2, "techniques"] == "microbatch"
    row = {"config.microbatch.size": None, "config.schedule.max_tokens": 4000}
    assert microbatch_size(row) == 4000
