"""Compaction of the one-file-per-trial store: the same rows before and after, none lost or read
twice when a compaction is cut short or runs while a sweep writes, and column-selective reads."""

from __future__ import annotations

import shutil
import threading
from datetime import UTC, datetime

import pandas as pd

from tune_lowmem import store
from tune_lowmem.config import TrialConfig
from tune_lowmem.store import (
    TrialRecord,
    compact,
    compaction,
    read_epochs,
    read_trials,
    trial_ids,
    write_trial,
)

CONFIG = TrialConfig.from_dict({"precision": "fp16"}).to_flat()


def record(i: int, accuracy: float = 0.5) -> TrialRecord:
    return TrialRecord(
        sweep="s",
        trial_id=f"t{i:04d}",
        status="completed",
        config={**CONFIG, "seed": i},
        metrics={"val_accuracy": accuracy},
        memory={"predicted_total_mb": float(i)},
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        objectives={"metric.val_accuracy": "maximize"},
    )


def write_many(root, n: int) -> None:
    for i in range(n):
        write_trial(root, record(i), epochs=[{"epoch": 1, "loss": i}, {"epoch": 2, "loss": -i}])


def folder(root, table="trials"):
    return root / table / "sweep=s"


def test_compaction_keeps_every_row_in_one_file(tmp_path):
    write_many(tmp_path, 70)
    before, epochs = read_trials(tmp_path), read_epochs(tmp_path)
    assert compact(tmp_path) == 140  # 70 trial files and 70 epoch files merged away
    assert [p.name[:11] for p in folder(tmp_path).glob("*.parquet")] == ["+compacted-"]
    pd.testing.assert_frame_equal(read_trials(tmp_path), before)
    pd.testing.assert_frame_equal(read_epochs(tmp_path), epochs)
    assert trial_ids(tmp_path, "s") == [f"t{i:04d}" for i in range(70)]
    assert read_epochs(tmp_path, "s", "t0007")["metric.loss"].tolist() == [7.0, -7.0]
    assert compact(tmp_path) == 0  # nothing left to merge
    write_trial(tmp_path, record(3, accuracy=0.9))  # a rewrite after compaction wins
    assert compact(tmp_path, force=True) == 3  # the rewrite, then the two merged files
    rows = read_trials(tmp_path).set_index("trial_id")
    assert len(rows) == 70 and rows.loc["t0003", "metric.val_accuracy"] == 0.9
    assert store.list_sweeps(tmp_path) == ["s"]


def test_a_compaction_cut_short_reads_each_row_once(tmp_path):
    """Killed after writing the merged file, before removing the small ones: both are there."""
    write_many(tmp_path, 5)
    saved = tmp_path / "saved"
    shutil.copytree(folder(tmp_path), saved)
    compact(tmp_path, force=True)
    for path in saved.glob("*.parquet"):
        shutil.copy(path, folder(tmp_path) / path.name)
    rows = read_trials(tmp_path)
    assert sorted(rows["trial_id"]) == [f"t{i:04d}" for i in range(5)]
    assert compact(tmp_path, force=True) == 7  # the 5 copies, then the two merged files
    assert len(read_trials(tmp_path)) == 5


def test_a_trial_rewritten_during_compaction_is_kept(tmp_path):
    write_trial(tmp_path, record(1, accuracy=0.1))
    path = folder(tmp_path) / "t0001.parquet"
    seen = compaction._identity(path)  # what compaction read
    write_trial(tmp_path, record(1, accuracy=0.8))  # then the sweep rewrote it
    compaction._remove_if_unchanged(path, seen)
    assert path.is_file()
    assert read_trials(tmp_path)["metric.val_accuracy"].tolist() == [0.8]


def test_compaction_while_a_sweep_writes_loses_nothing(tmp_path):
    stop = threading.Event()

    def compacting():
        while not stop.is_set():
            compact(tmp_path, force=True)

    thread = threading.Thread(target=compacting)
    thread.start()
    try:
        for i in range(120):
            write_trial(tmp_path, record(i))
            if i % 10 == 0:
                assert len(read_trials(tmp_path, columns=["status"])) == i + 1
    finally:
        stop.set()
        thread.join()
    compact(tmp_path, force=True)
    assert sorted(read_trials(tmp_path)["trial_id"]) == [f"t{i:04d}" for i in range(120)]


def test_reads_only_the_columns_asked(tmp_path):
    write_many(tmp_path, 2)
    rows = read_trials(tmp_path, columns=["status", "metric."])
    assert set(rows.columns) == {
        "sweep",
        "trial_id",
        "schema_version",
        "status",
        "metric.val_accuracy",
    }
    assert rows["status"].tolist() == ["completed", "completed"]


def test_the_objectives_are_stored_with_each_row(tmp_path):
    write_many(tmp_path, 1)
    (text,) = read_trials(tmp_path)["objectives"]
    assert text == '{"metric.val_accuracy": "maximize"}'


def test_a_large_folder_is_merged_a_chunk_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(compaction, "COMPACT_CHUNK", 4)
    write_many(tmp_path, 10)
    before = read_trials(tmp_path)
    assert compact(tmp_path, force=True) == 2 * (10 + 3)  # 3 chunks each, then merged together
    assert len(list(folder(tmp_path).glob("*.parquet"))) == 1
    pd.testing.assert_frame_equal(read_trials(tmp_path), before)
