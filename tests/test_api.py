"""The Python API used as a notebook would: launch a sweep from a dict, open its store, read
trials and epochs as DataFrames, take the front and the best configuration under a budget."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import tune_lowmem
import tune_lowmem.search
from tune_lowmem.analysis import table3
from tune_lowmem.analysis.points import load_points
from tune_lowmem.config import TrialConfig
from tune_lowmem.store import TrialRecord, write_trial

ROOT = Path(__file__).resolve().parents[1]
TINY_TASK = "tests.tiny_task:TinyBlobs"


def write_point(root: Path, trial_id: str, config: TrialConfig, accuracy: float, mb: float):
    record = TrialRecord(
        sweep="hand",
        trial_id=trial_id,
        status="completed",
        config=config.to_flat(),
        metrics={"val_accuracy": accuracy, "test_accuracy": 1 - accuracy},
        memory={"predicted_total_mb": mb},
        objectives={"metric.val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    )
    write_trial(root, record, [{"epoch": 0, "val_accuracy": accuracy / 2}])


@pytest.fixture
def hand_store(tmp_path):
    """Three configurations, two seeds each: fp32 (big, best), bf16 (smaller), and a
    dominated one (as big as fp32, less accurate)."""
    base = TrialConfig.from_dict({"model.depth": 10, "model.width": 1})
    points = {
        "fp32": (base, 0.80, 10.0),
        "bf16": (base.replace(precision="bf16"), 0.70, 6.0),
        "worse": (base.replace(**{"sparsity.density": 0.5}), 0.60, 10.5),
    }
    for name, (config, accuracy, mb) in points.items():
        for seed in (0, 1):
            write_point(
                tmp_path, f"{name}-{seed}", config.replace(seed=seed), accuracy + seed / 100, mb
            )
    return tmp_path


def test_a_store_answers_as_dataframes_and_a_trialconfig(hand_store):
    runs = tune_lowmem.open_store(hand_store)
    assert runs.sweeps() == ["hand"]
    trials = runs.trials("hand")
    assert isinstance(trials, pd.DataFrame) and len(trials) == 6
    assert set(runs.epochs("hand", "fp32-0")["metric.val_accuracy"]) == {0.4}
    front = runs.front("hand")
    means = dict(zip(front["configuration"], front["metric.val_accuracy.mean"], strict=True))
    assert len(front) == 2 and not any("0.5" in c for c in means)  # the dominated one is out
    assert sorted(round(v, 3) for v in means.values()) == [0.705, 0.805]  # seeds averaged
    assert (front["n"] == 2).all()
    best = runs.best_config(8.0, "hand")  # fp32 needs 10 MB: bf16 is the best within 8
    assert isinstance(best, TrialConfig) and best.precision == "bf16" and best.seed == 0
    assert runs.best_config(100.0).precision == "fp32"
    assert math.isclose(runs.best(100.0)["metric.val_accuracy.mean"], 0.805)
    status = runs.status("hand")
    assert status.counts["completed"] == 6 and status.stored == 6
    assert status.planned_points is None and status.space_problem is None  # no saved space


def test_the_best_under_a_budget_none_fits(hand_store):
    from tune_lowmem.analysis.points import NoResult

    with pytest.raises(NoResult, match="the smallest found is 6 MB"):
        tune_lowmem.open_store(hand_store).best_config(1.0)


def test_an_unreadable_saved_space_is_said_not_raised_by_status(hand_store):
    folder = hand_store / "ray" / "hand"
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_text("")
    runs = tune_lowmem.open_store(hand_store)
    with pytest.raises(tune_lowmem.SpaceUnreadable, match="space.yaml: an empty file"):
        runs.space("hand")
    status = runs.status("hand")
    assert "an empty file" in status.space_problem and status.counts["completed"] == 6


def test_launch_from_a_dict_then_resume_return_the_front(tmp_path, monkeypatch):
    """A sweep launched from a dict (no file), its front, its store opened afterwards, its
    best config trained; `resume` of the finished sweep runs nothing again. The sweep trains
    its baseline (the base, fp32, dense) once, outside the sampler, and the report's front
    table prices every configuration against it: score change and time ratio."""
    monkeypatch.syspath_prepend(str(ROOT))  # the tiny task is a user's module
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    space = {
        "name": "notebook",
        "base": {"task": TINY_TASK, "device": "cpu", "schedule": {"epochs": 1}},
        "params": {"precision": {"type": "choice", "values": ["bf16", "amp-bf16"]}},
        "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
        "sampler": "grid",
        "max_concurrent": 2,
        "resources": {"cpu": 1, "gpu": 0},
    }
    result = tune_lowmem.launch(space, store=tmp_path / "runs")
    assert sorted(result.trials["status"]) == ["completed"] * 3
    (baseline,) = result.trials.index[result.trials["point"].isna()]
    assert result.trials.loc[baseline, "config.precision"] == "fp32"
    assert len(tune_lowmem.search.sweep_study(tmp_path / "runs", "notebook").trials) == 2
    assert {"val_accuracy", "memory.predicted_total_mb", "precision", "seeds"} <= set(
        result.front.columns
    )
    runs = tune_lowmem.open_store(tmp_path / "runs")
    assert runs.space("notebook")["name"] == "notebook"
    status = runs.status("notebook")
    assert (status.counts["completed"], status.planned_points, status.baseline) == (3, 2, True)
    front = runs.front("notebook")
    assert (front["time.measured_update_s.mean"] > 0).all()
    table = table3.build(load_points(str(tmp_path / "runs"), "notebook"))
    assert table["configuration"].iloc[0] == "fp32 (baseline)"
    priced = table.iloc[1:]
    assert len(priced) and priced["validation change (pp)"].notna().all()
    assert (priced[table3.TIME_RATIO] > 0).all() and table[table3.UPDATE_TIME].notna().all()
    unlimited = runs.best(1e6, "notebook")["seed_group"]  # the baseline's time is the yardstick
    assert runs.best(1e6, "notebook", max_slowdown=1e6)["seed_group"] == unlimited
    config = runs.best_config(1e6, "notebook")
    assert config.task == TINY_TASK
    from tune_lowmem.train import Trainer

    history = Trainer(config).run()
    assert history and 0.0 <= history[-1]["val_accuracy"] <= 1.0
    again = tune_lowmem.resume("notebook", store=tmp_path / "runs")
    pd.testing.assert_frame_equal(
        again.trials.sort_values("trial_id", ignore_index=True),
        result.trials.sort_values("trial_id", ignore_index=True),
    )
