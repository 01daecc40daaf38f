"""How the analysis tells configurations apart: by value, list fields by their content, missing
values as one value, without formatting each value as text (issue 20's speed on 10k trials)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tune_lowmem.analysis.points import completed, configurations, load_trials, value_codes
from tune_lowmem.config import TrialConfig
from tune_lowmem.store import TrialRecord, write_trial


def test_value_codes_compare_lists_by_content_and_missing_values_as_one():
    column = pd.Series(
        [np.array([0.3, 0.6]), [0.3, 0.6], np.array([0.5]), None, np.nan], dtype=object
    )
    codes = value_codes(column)
    assert codes[0] == codes[1]
    assert len({codes[0], codes[2], codes[3]}) == 3
    assert codes[3] == codes[4]
    assert value_codes(pd.Series([0.5, 0.5, np.nan])).tolist() == [0, 0, 1]


def _write(root, trial_id: str, milestones: list[float], lr_multiplier: float) -> None:
    config = TrialConfig.from_dict(
        {
            "task": "wrn-cifar10",
            "device": "cpu",
            "schedule.milestones": milestones,
            "schedule.lr_multiplier": lr_multiplier,
        }
    )
    write_trial(
        root,
        TrialRecord(
            sweep="s",
            trial_id=trial_id,
            status="completed",
            config=config.to_flat(),
            metrics={"val_accuracy": 0.5},
            memory={"predicted_total_mb": 10.0},
        ),
    )


def test_a_list_field_that_differs_is_named_and_one_that_does_not_is_not(tmp_path):
    _write(tmp_path / "a", "t1", [0.3, 0.6, 0.8], 1.0)
    _write(tmp_path / "a", "t2", [0.5, 0.75], 1.0)
    groups = configurations(completed(load_trials(str(tmp_path / "a"))))
    assert sorted(groups["other_settings"]) == [
        "schedule.milestones=0.3,0.6,0.8",
        "schedule.milestones=0.5,0.75",
    ]
    _write(tmp_path / "b", "t1", [0.3, 0.6, 0.8], 1.0)
    _write(tmp_path / "b", "t2", [0.3, 0.6, 0.8], 2.0)
    groups = configurations(completed(load_trials(str(tmp_path / "b"))))
    assert sorted(groups["other_settings"]) == [
        "schedule.lr_multiplier=1",
        "schedule.lr_multiplier=2",
    ]


def test_a_seed_trained_twice_is_one_sample_in_the_means_intervals_and_count(tmp_path):
    """Two sweeps of one store train the same configuration with seed 0 (accuracies 0.4 and 0.6)
    and one with seed 1 (0.9): two seeds, seed 0's value their mean, 0.5."""
    from tune_lowmem.analysis.training_setup import seeds_per_configuration
    from tune_lowmem.pareto import Z_95

    config = TrialConfig.from_dict({"task": "wrn-cifar10", "device": "cpu"})
    for sweep, trial_id, seed, accuracy in (
        ("first", "t1", 0, 0.4),
        ("second", "t2", 0, 0.6),
        ("second", "t3", 1, 0.9),
    ):
        record = TrialRecord(
            sweep=sweep,
            trial_id=trial_id,
            status="completed",
            config={**config.to_flat(), "seed": seed},
            metrics={"val_accuracy": accuracy},
            memory={"predicted_total_mb": 10.0},
        )
        write_trial(tmp_path, record)
    done = completed(load_trials(str(tmp_path)))
    (group,) = configurations(done).to_dict("records")
    assert group["n"] == 2 and len(group["trial_ids"]) == 3
    assert group["metric.val_accuracy.count"] == 2
    assert group["metric.val_accuracy.mean"] == pytest.approx((0.5 + 0.9) / 2)
    assert group["metric.val_accuracy.ci95"] == pytest.approx(
        Z_95 * np.std([0.5, 0.9], ddof=1) / np.sqrt(2)
    )
    seeds = done["config.seed"].astype(int)
    assert seeds_per_configuration(configurations(done)["n"], seeds) == "2 (seeds 0, 1)"
