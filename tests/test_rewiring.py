"""The rewiring schedule scales with the run, fires on short runs, and is counted per trial."""

from datetime import UTC, datetime

import pytest

from tests.conftest import tiny_wrn_config
from tune_lowmem import store
from tune_lowmem.config import TrialConfig
from tune_lowmem.search.trainable import sweep_rows
from tune_lowmem.space import SearchSpace
from tune_lowmem.tasks.translation import DynamicConvIwslt14
from tune_lowmem.techniques.rewiring import (
    RunLength,
    planned_rewirings,
    rewires,
    rewiring_period,
    rewiring_updates,
)
from tune_lowmem.techniques.sparsity import Sparsity
from tune_lowmem.techniques.sparsity_config import SparsityConfig
from tune_lowmem.train import Trainer
from tune_lowmem.validation import ConfigError

RELATIVE = SparsityConfig(density=0.3)
ABSOLUTE = SparsityConfig(density=0.3, schedule_units="absolute")


def reference_rewirings(scale: float = 1.0) -> list[int]:
    """The reference's WRN schedule written out: 200 epochs of 450 updates, every 100/200/400/800
    updates (times `scale`) from epochs 0/25/80/140, none from epoch 190."""
    periods = {0: 100, 25: 200, 80: 400, 140: 800}
    chosen = []
    for update in range(1, 200 * 450):
        epoch = update // 450
        if epoch >= 190:
            break
        period = round(periods[max(start for start in periods if start <= epoch)] * scale)
        if update % period == 0:
            chosen.append(update)
    return chosen


def test_relative_is_the_papers_schedule_at_the_papers_length():
    paper = RunLength(200 * 450, 450)
    expected = reference_rewirings()
    assert list(rewiring_updates(RELATIVE, paper)) == expected
    assert list(rewiring_updates(ABSOLUTE, paper)) == expected
    dct = RunLength(50_000, 1_000, DynamicConvIwslt14.PAPER_UPDATES, 0.5)  # halved periods
    assert [
        rewiring_period(RELATIVE, dct, u // 1000, u) for u in (0, 6_249, 6_250, 20_000, 35_000)
    ] == [50, 50, 100, 200, 400]


def test_short_run_rewires_in_relative_units_and_not_in_absolute():
    """The issue's 4 epochs of 80 updates: absolute periods of 100+ updates never fire there."""
    run = RunLength(4 * 80, 80)
    assert list(rewiring_updates(ABSOLUTE, run)) == []
    # relative: phases from updates 40 / 128 / 224 (25, 80, 140 of 200), periods 100/200/400/800
    # x 320/90,000 rounded (at least 1): 1, 1, 1, 3; stop at 0.95 x 320 = 304
    expected = [*range(1, 224), *range(225, 304, 3)]
    assert list(rewiring_updates(RELATIVE, run)) == expected
    slower = SparsityConfig(density=0.3, period_multiplier=4.0)  # periods 1, 3, 6, 11
    assert len(list(rewiring_updates(slower, run))) < len(expected)


def test_training_rewires_the_planned_number_of_times():
    """WRN-10-1, 200 images, batch 20, 3 epochs: 30 updates; relative periods of 1 until update
    0.95 x 30 = 28.5, so after updates 1..28; absolute: never (periods 100 and more)."""
    for units, rewirings in (("relative", 28), ("absolute", 0)):
        config = tiny_wrn_config(
            **{"schedule.epochs": 3, "sparsity.density": 0.5, "sparsity.schedule_units": units}
        )
        trainer = Trainer(config)
        history = trainer.run()
        assert (
            history[-1]["sparsity_rewirings"]
            == rewirings
            == trainer.technique(Sparsity).engine.rewirings
        )
        assert planned_rewirings(config) == rewirings


def test_every_trial_stores_its_rewirings(tmp_path):
    space = SearchSpace.from_dict(
        {
            "name": "rw",
            "base": {"task": "wrn-cifar10", "device": "cpu"},
            "params": {"sparsity.density": {"type": "choice", "values": [0.5, 1.0]}},
            "objectives": {"val_accuracy": "maximize"},
            "num_samples": 2,
        }
    )
    now = datetime.now(UTC)
    for trial_id, density in (("sparse", 0.5), ("dense", 1.0)):
        config = tiny_wrn_config(**{"schedule.epochs": 1, "sparsity.density": density})
        history = Trainer(config).run()
        record = sweep_rows(space, "rw").row(
            trial_id,
            "completed",
            config.to_flat(),
            history[-1],
            {},
            started_at=now,
            finished_at=now,
            point=0,
        )
        store.write_trial(tmp_path, record, epochs=history)
    rows = store.read_trials(tmp_path, "rw").set_index("trial_id")
    # 10 updates, relative periods of 1, stop at 9.5: after updates 1..9
    assert rows.loc["sparse", "metric.sparsity_rewirings"] == 9
    assert rows.loc["dense", "metric.sparsity_rewirings"] == 0


QUICK_BASE = {
    "task": "wrn-cifar10",
    "device": "cpu",
    "model": {"depth": 16, "width": 1},
    "schedule": {"epochs": 3, "batch_size": 50},
    "data": {"train_subset": 3000, "val_size": 1000, "test_subset": 500},
}


def space_with(units: str, params: dict) -> dict:
    return {
        "name": "rw",
        "base": {**QUICK_BASE, "sparsity": {"schedule_units": units}},
        "params": params,
        "objectives": {"val_accuracy": "maximize"},
        "num_samples": 4,
    }


KNOBS = {
    "sparsity.density": {"type": "choice", "values": [0.1, 1.0]},
    "sparsity.period_multiplier": {"type": "loguniform", "low": 0.125, "high": 4.0},
}


def test_space_refuses_searched_rewiring_knobs_that_never_rewire():
    with pytest.raises(ConfigError) as error:
        SearchSpace.from_dict(space_with("absolute", KNOBS))
    message = str(error.value)
    assert message.startswith("params.sparsity.period_multiplier: ") and "\n" not in message
    assert (
        "rewires 0 times in its 180 updates" in message
        and "sparsity.period_multiplier=4.0" in message
    )
    SearchSpace.from_dict(space_with("relative", KNOBS))  # rewires at both ends
    # without a searched rewiring knob, a schedule that does not rewire is the user's choice
    SearchSpace.from_dict(space_with("absolute", {"sparsity.density": KNOBS["sparsity.density"]}))


def test_rows_of_older_stores_read_as_what_they_trained(tmp_path):
    """A row written before schedule_units and precision_update existed rewired in absolute
    units and rounded to nearest."""
    config = tiny_wrn_config(**{"sparsity.density": 0.5})
    record = store.TrialRecord(
        sweep="old", trial_id="t", status="completed", config=config.to_flat(), metrics={}
    )
    store.write_trial(tmp_path, record, epochs=[])
    row = store.read_trials(tmp_path, "old").iloc[0]
    old = row.drop(["config.sparsity.schedule_units", "config.precision_update"])
    assert store.trial_config(row) == config  # today's rows: as written
    read = store.trial_config(old)
    assert read.sparsity.schedule_units == "absolute" and read.precision_update == "nearest"
    assert read.replace(**{"sparsity.schedule_units": "relative"}) == config


@pytest.mark.parametrize("rewiring", ["dynamic", "static"])
def test_the_profiler_runs_a_rewiring_only_for_a_trial_that_rewires(rewiring, monkeypatch):
    """The dry run's rewiring peak is measured when a trial that rewires asks, once per dry
    run; a sparse trial that never rewires (the same shape key) never runs one."""
    from tune_lowmem.memory import predict as predict_module
    from tune_lowmem.memory.stored import accounted

    real, calls = predict_module.occasional_peak, []
    monkeypatch.setattr(
        predict_module, "occasional_peak", lambda *args: calls.append(args) or real(*args)
    )
    predict_module.dry_run.cache_clear()
    config = TrialConfig.from_dict(
        {
            "task": "tests.tiny_task:TinyBlobs",
            "device": "cpu",
            "sparsity.density": 0.3,
            "sparsity.rewiring": rewiring,
        }
    )
    assert rewires(config) == (rewiring == "dynamic")
    predict_module.predict(config)
    accounted(config, "csr")
    assert len(calls) == (rewiring == "dynamic")
