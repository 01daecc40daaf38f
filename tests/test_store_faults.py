"""One bad file never takes a command down: `status`, `pareto` and `report` over a store with
good rows and one truncated, empty or foreign file name that file in one line, leave it as it
is, and answer from the other rows; a trial written again over a bad file moves it aside."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tune_lowmem.cli import main
from tune_lowmem.search import SPACE_FILE, sweep_folder
from tune_lowmem.space import SearchSpace
from tune_lowmem.store import QUARANTINE, TrialRecord, read_epochs, read_trials, write_trial

NOW = datetime(2024, 5, 1, tzinfo=UTC)
SPACE = {
    "name": "s",
    "base": {"device": "cpu", "model": {"depth": 10, "width": 1}, "schedule.batch_size": 20},
    "params": {"sparsity.density": {"type": "choice", "values": [0.25, 0.5, 1.0]}},
    "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    "num_samples": 4,
}
GOOD = {"t0": (0.25, 0.6, 10.0), "t1": (0.5, 0.7, 20.0), "t2": (1.0, 0.8, 40.0)}  # density, acc, MB


def _write(root: Path, trial_id: str, density: float, accuracy: float, memory: float) -> None:
    space = SearchSpace.from_dict(SPACE)
    config = space.trial_config({"sparsity.density": density, "seed": 0}).to_flat()
    record = TrialRecord(
        sweep="s",
        trial_id=trial_id,
        status="completed",
        config=config,
        metrics={"val_accuracy": accuracy, "test_accuracy": accuracy, "updates": 10},
        memory={
            "predicted_total_mb": memory,
            "predicted_model_mb": memory / 4,
            "predicted_optimizer_mb": memory / 4,
            "predicted_activation_mb": memory / 2,
        },
        started_at=NOW,
        finished_at=NOW,
        epochs_completed=1,
        point=int(trial_id[1:]),
    )
    write_trial(root, record, [{"epoch": 1, "val_accuracy": accuracy, "updates": 10}])


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _foreign(path: Path) -> None:
    pq.write_table(pa.table({"schema_version": [1], "trial_id": ["x"], "a": [1]}), path)


def _clashing(path: Path) -> None:  # our columns, one of another type: would break every merge
    table = pq.read_table(path)
    index = table.column_names.index("config.model.depth")
    pq.write_table(table.set_column(index, "config.model.depth", pa.array(["ten"])), path)


FAULTS = {
    "truncated": _truncated,
    "empty": _empty,
    "foreign schema": _foreign,
    "clashing type": _clashing,
}
SAID = {
    "truncated": "not a readable Parquet file",
    "empty": "not a readable Parquet file",
    "foreign schema": "lacks the column status",
    "clashing type": "'config.model.depth' is string",
}


@pytest.fixture
def store(tmp_path):
    """Three good trials and a fourth, t3, whose trial file is then damaged."""
    root = tmp_path / "store"
    for trial_id, values in {**GOOD, "t3": (0.25, 0.9, 5.0)}.items():
        _write(root, trial_id, *values)
    folder = sweep_folder(root, "s")
    folder.mkdir(parents=True)
    (folder / SPACE_FILE).write_text(yaml.safe_dump(SearchSpace.from_dict(SPACE).to_dict()))
    return root, root / "trials" / "sweep=s" / "t3.parquet"


def _run(capsys, *argv) -> tuple[int, str, list[str]]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_commands_name_the_bad_file_and_answer_from_the_rest(fault, store, tmp_path, capsys):
    root, bad = store
    FAULTS[fault](bad)
    damaged = bad.read_bytes()

    assert sorted(read_trials(root)["trial_id"]) == ["t0", "t1", "t2"]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(bad) in line and SAID[fault] in line and "left as it is" in line

    code, out, err = _run(capsys, "status", "s", "--store", root)
    assert code == 0 and "3 trials stored (3 completed" in out
    assert len(err) == 1 and str(bad) in err[0]

    code, out, err = _run(capsys, "pareto", "--store", root, "--format", "csv")
    assert code == 0 and len(err) == 1 and str(bad) in err[0]
    front = pd.read_csv(io.StringIO(out))  # t3 (0.9, same point as t0) would make t0's mean 0.75
    assert sorted(front["metric.val_accuracy.mean"]) == [0.6, 0.7, 0.8]

    code, out, err = _run(
        capsys, "report", "--store", root, "--out", tmp_path / "out", "--only", "memory_parts"
    )
    assert code == 0 and (tmp_path / "out" / "memory_parts.png").is_file()
    assert len(err) == 1 and str(bad) in err[0]

    assert bad.read_bytes() == damaged  # left untouched by every reader


def test_bad_epoch_files_are_checked_like_trial_rows(store, capsys):
    root, _ = store
    epochs = root / "epochs" / "sweep=s"
    _foreign(epochs / "t1.parquet")
    table = pq.read_table(epochs / "t2.parquet")
    pq.write_table(table.append_column("config.seed", pa.array([0])), epochs / "t2.parquet")
    _empty(epochs / "t3.parquet")
    assert read_epochs(root)["trial_id"].tolist() == ["t0"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3
    assert "t2.parquet: column 'config.seed' is not a column of the store's epochs" in err[1]


def test_rewriting_a_bad_file_moves_it_to_quarantine(store, capsys):
    """What resume does when a trial whose file is unreadable runs again: the new row is
    written, the old file kept under DIR/quarantine/, never deleted."""
    root, bad = store
    _truncated(bad)
    damaged = bad.read_bytes()
    _write(root, "t3", 0.25, 0.5, 5.0)
    assert sorted(read_trials(root)["trial_id"]) == ["t0", "t1", "t2", "t3"]
    (kept,) = (root / QUARANTINE / "trials" / "sweep=s").iterdir()
    assert kept.name.startswith("t3.parquet.") and kept.read_bytes() == damaged
    assert "moved unreadable" in capsys.readouterr().err
