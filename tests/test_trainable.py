"""The Ray trainable on its own (no searcher): reports, checkpoints, memory, failed trials.
(Screening over-budget points is the searcher's: tests/test_search.py.)"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch
from ray import tune

from tune_lowmem import store
from tune_lowmem.memory.predict import predict
from tune_lowmem.outcome import (
    MEASURED_STEP_EVAL_PEAK,
    MEASURED_TIMES,
    PREDICTED_EPOCH_S,
    PREDICTED_EVALUATION_S,
    PREDICTED_UPDATE_S,
    result_from_row,
)
from tune_lowmem.search.trainable import (
    CHECKPOINT_FILE,
    FULL_COLLECTION_EVERY,
    final_result,
    freeze_survivors,
    train_trial,
)
from tune_lowmem.space import SearchSpace
from tune_lowmem.timing.predict import schedule_counts
from tune_lowmem.train import Trainer

TINY_BASE = {
    "device": "cpu",
    "model": {"depth": 10, "width": 1},
    "schedule": {"epochs": 2, "batch_size": 20},
    "data": {"train_subset": 200, "val_size": 100, "test_subset": 100},
}


def tiny_space(**changes) -> SearchSpace:
    return SearchSpace.from_dict(
        {
            "name": "trainable",
            "base": TINY_BASE,
            "params": {
                "microbatch.size": {"type": "choice", "values": [None, 5]},
                "schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 1e6},
            },
            "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
            "num_samples": 3,
            **changes,
        }
    )


def run_trials(space: SearchSpace, root: Path, points: list[dict]):
    trainable = tune.with_parameters(train_trial, space=space, root=str(root), sweep=space.name)
    tuner = tune.Tuner(
        trainable,
        param_space={"point": 0, "params": tune.grid_search(points)},
        tune_config=tune.TuneConfig(trial_dirname_creator=lambda trial: trial.trial_id),
        run_config=tune.RunConfig(name=space.name, storage_path=str(root / "ray"), verbose=0),
    )
    results = tuner.fit()
    return {r.config["params"]["schedule.lr_multiplier"]: r for r in results}, store.read_trials(
        root, space.name
    )


def test_trainable_reports_trains_and_fails(local_ray, tmp_path):
    space = tiny_space(resume_checkpoint_s=0)  # a checkpoint each epoch but the last
    good = {"microbatch.size": 5, "schedule.lr_multiplier": 1.0, "seed": 0}
    diverging = {"microbatch.size": 5, "schedule.lr_multiplier": 1e6, "seed": 0}
    results, rows = run_trials(space, tmp_path, [good, diverging])
    by_id = rows.set_index("trial_id")

    # a feasible point: every epoch reported, predicted and measured memory beside the accuracy
    trained = results[1.0]
    assert trained.error is None, trained.error  # the trial's own exception, if it raised
    history = trained.metrics_dataframe
    assert list(history["trial_status"]) == ["running", "completed"]
    predicted = predict(space.trial_config(good)).total_mb
    assert history["memory.predicted_total_mb"].tolist() == pytest.approx([predicted] * 2)
    assert (history["memory.measured_total_mb"] > 0).all()
    row = by_id.loc[trained.metrics["trial_id"]]
    assert row["status"] == "completed" and row["epochs_completed"] == 2
    assert row["metric.val_accuracy"] == pytest.approx(trained.metrics["val_accuracy"])
    assert row["memory.predicted_total_mb"] == pytest.approx(predicted)
    assert row["memory.measured_total_mb"] == pytest.approx(
        trained.metrics["memory.measured_total_mb"]
    )
    for source in ("predicted", "measured"):  # dense: the step holds what is accounted
        assert row[f"memory.{source}_stored_total_mb"] == row[f"memory.{source}_total_mb"]
    epochs = store.read_epochs(tmp_path, space.name, trained.metrics["trial_id"])
    assert len(epochs) == 2
    # its seconds on its device: each epoch's in its epochs row, reported with it; the trial's
    # the median over its epochs, reported and stored under the same columns
    for name in MEASURED_TIMES:
        assert (epochs[name] > 0).all() and (history[name] > 0).all()
        assert row[name] == pytest.approx(epochs[name].median())
        assert row[name] == pytest.approx(trained.metrics[name])
        assert f"metric.{name}" not in by_id and f"metric.{name}" not in epochs
    assert row[MEASURED_STEP_EVAL_PEAK] > 0  # a side run's step and evaluation batch
    # its predicted seconds on its device: with every epoch, and in its row
    predicted_times = (PREDICTED_UPDATE_S, PREDICTED_EVALUATION_S, PREDICTED_EPOCH_S)
    for name in predicted_times:
        assert row[name] > 0 and history[name].tolist() == pytest.approx([row[name]] * 2)
    updates, _ = schedule_counts(space.trial_config(good), None)
    epoch = updates * row[PREDICTED_UPDATE_S] + row[PREDICTED_EVALUATION_S]
    assert row[PREDICTED_EPOCH_S] == pytest.approx(epoch)
    with trained.checkpoint.as_directory() as folder:  # epoch 1's checkpoint resumes exactly
        state = torch.load(Path(folder, CHECKPOINT_FILE), weights_only=True)
    resumed = Trainer(space.trial_config(good))
    resumed.load_state_dict(state["trainer"])
    assert resumed.epoch == 1
    assert resumed.run()[-1]["val_accuracy"] == trained.metrics["val_accuracy"]

    # a diverging loss: the trial's result is a failure with its reason, not a crash
    failed = results[1e6]
    assert failed.error is None and failed.metrics["trial_status"] == "failed"
    row = by_id.loc[failed.metrics["trial_id"]]
    assert row["status"] == "failed" and row["failure_reason"].startswith("TrainingDiverged: ")
    assert len(rows) == 2


class Cycle:
    def __init__(self):
        self.me = self


def test_what_earlier_trials_left_is_out_of_a_trials_collections():
    """A reused worker keeps what its earlier trials cached; a trial's full collections
    (`memory.measure`) must not traverse it, or a trial costs more with every trial run before;
    cyclic garbage among it is still freed, within FULL_COLLECTION_EVERY trials."""
    cached = [[i] for i in range(20_000)]  # alive as the trial starts
    dropped = Cycle()
    freed = weakref.ref(dropped)
    try:
        freeze_survivors()
        collected = gc.get_objects()  # what a full collection now traverses
        assert len(collected) < 10_000 and not any(o is cached for o in collected)
        del dropped  # a cache entry evicted after it was frozen
        gc.collect()
        for _ in range(FULL_COLLECTION_EVERY):
            freeze_survivors()
        assert freed() is None
    finally:
        gc.unfreeze()


def test_a_stored_trial_reports_its_row_again(tmp_path):
    """What a restarted trial that had already finished reports instead of training."""
    space = tiny_space()
    record = store.TrialRecord(
        sweep=space.name,
        trial_id="t1",
        status="completed",
        config=space.trial_config({"seed": 0}).to_flat(),
        metrics={"val_accuracy": 0.25, "epoch": 2},
        memory={"predicted_total_mb": 12.5, "flops_per_step": 7},
    )
    store.write_trial(tmp_path, record, epochs=[])
    row = store.read_trials(tmp_path, space.name).iloc[0].to_dict()
    expected = final_result(space, "completed", {"val_accuracy": 0.25, "epoch": 2}, {})
    reported = result_from_row(row, space.objectives)
    assert reported["val_accuracy"] == 0.25 and reported["memory.predicted_total_mb"] == 12.5
    assert reported["memory.flops_per_step"] == 7 and reported["trial_status"] == "completed"
    assert set(expected) <= set(reported) and reported["memory.measured_total_mb"] is None


# A trial's thread in a worker whose process exits under it (Ray SIGTERMs a killed driver's
# workers: the main thread leaves with sys.exit, the exit handlers tear torch down while the
# trial still trains); `exiting` off: the same error with the process alive, the trial's own.
TORN_DOWN = """
import atexit, json, sys, threading, time
import torch
from tune_lowmem import store
from tune_lowmem.search import trainable
from tune_lowmem.space import SearchSpace

root, exiting, space = sys.argv[1], sys.argv[2] == "exiting", SearchSpace.from_dict(json.loads(sys.argv[3]))

class Trainer:
    device, history, epoch = torch.device("cpu"), [], 0

    def __init__(self, config):
        pass

    def run(self, on_epoch):
        while exiting and threading.main_thread().is_alive():
            time.sleep(0.01)
        raise RuntimeError("Tried to access the schema for which doesn't have a schema registered yet")

trainable.Trainer, trainable._node_id = Trainer, lambda: "n"
trainable.measure = lambda config: trainable.MemoryReport(0, 0, 0, 0, "measured")
trainable.measured_run_peak = lambda config: None
done = threading.Event()

def trial():
    try:
        trainable._Run(space, root, space.name, "t1", 0, {"seed": 0}).train()
    except Exception as error:  # told before `done`: the exit may cut the thread's own report
        print(f"raised: {error}", file=sys.stderr, flush=True)
    finally:
        done.set()

threading.Thread(target=trial, daemon=True).start()
atexit.register(done.wait, 60) if exiting else done.wait(60)
"""


@pytest.mark.parametrize("exiting", [True, False])
def test_an_error_while_the_worker_exits_is_not_stored_as_the_trials_failure(tmp_path, exiting):
    space = tiny_space()
    script = [sys.executable, "-c", TORN_DOWN, str(tmp_path), "exiting" if exiting else "alive"]
    done = subprocess.run(
        [*script, json.dumps(space.to_dict())],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_trials(tmp_path, space.name)
    if exiting:  # nothing stored: the trial runs again when the sweep is resumed
        assert rows.empty and "raised: Tried to access the schema" in done.stderr
    else:
        assert list(rows["status"]) == ["failed"]
        assert rows["failure_reason"].iloc[0].startswith("RuntimeError: Tried to access the schema")
