"""The Parquet store: what is written is what pandas, pyarrow and DuckDB read, exactly once."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.outcome import (
    MEASURED_EPOCH_S,
    MEASURED_EVALUATION_S,
    MEASURED_STEP_EVAL_PEAK,
    MEASURED_UPDATE_S,
    result_from_row,
)
from tune_lowmem.store import (
    REMOVED_FIELDS,
    SCHEMA_VERSION,
    SweepRows,
    TrialRecord,
    WriteFailed,
    compact,
    later_fields,
    list_sweeps,
    read_epochs,
    read_trials,
    trial_config,
    trial_ids,
    write_trial,
)

START = datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)
CONFIG = TrialConfig.from_dict(
    {"precision": "fp16", "sparsity.density": 0.1, "microbatch.size": 25}
)


def record(
    trial_id: str = "t_00001", sweep: str = "wrn", trial_config: TrialConfig = CONFIG, **changes
):
    values = {
        "sweep": sweep,
        "trial_id": trial_id,
        "status": "completed",
        "config": trial_config.to_flat(),
        "metrics": {"val_accuracy": 0.9125, "test_accuracy": 0.9031, "val_loss": 0.3125},
        "memory": {
            "predicted_total_mb": 404.8,
            "measured_total_mb": 398.25,
            "flops_per_step": 123456789,
        },
        "started_at": START,
        "finished_at": START + timedelta(seconds=90.5),
        "epochs_completed": 2,
        "point": 3,
    }
    return TrialRecord(**{**values, **changes})


EPOCHS = [
    {"epoch": 1, "val_accuracy": 0.5, "train_loss": 1.5},
    {"epoch": 2, "val_accuracy": 0.75, "train_loss": 0.5},
]
EXPECTED = {
    "sweep": "wrn",
    "trial_id": "t_00001",
    "status": "completed",
    "schema_version": SCHEMA_VERSION,
    "config.precision": "fp16",
    "config.sparsity.density": 0.1,
    "config.microbatch.size": 25,
    "config.schedule.milestones": [0.3, 0.6, 0.8],  # a list column, not JSON text
    "config.data.augment": True,
    "metric.val_accuracy": 0.9125,
    "metric.test_accuracy": 0.9031,
    "memory.predicted_total_mb": 404.8,
    "memory.measured_total_mb": 398.25,
    "memory.flops_per_step": 123456789,
    "started_at": START,
    "finished_at": START + timedelta(seconds=90.5),
    "wall_seconds": 90.5,
    "epochs_completed": 2,
    "point": 3,
}
NULLS = [
    "failure_reason",
    "config.data.root",
    "config.sparsity.fraction",
    "memory.predicted_model_mb",
]


def duckdb_rows(pattern: str, union: bool = False) -> list[dict]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    options = ", union_by_name=true" if union else ""
    result = con.execute(
        f"SELECT * FROM read_parquet('{pattern}', hive_partitioning=true{options})"
    )
    names = [column[0] for column in result.description]
    return [dict(zip(names, row)) for row in result.fetchall()]


def plain(value):
    """A cell as Python: pandas gives list columns as numpy arrays, the others as lists."""
    return list(value) if hasattr(value, "__len__") and not isinstance(value, str) else value


def missing(value) -> bool:
    return value is None or (not isinstance(plain(value), list) and pd.isna(value))


def assert_row(row, expected=EXPECTED, nulls=NULLS):
    for key, value in expected.items():
        assert plain(row[key]) == value, key
    for key in nulls:
        assert missing(row[key]), key


def test_three_readers_see_the_values_written(tmp_path):
    write_trial(tmp_path, record(), EPOCHS)

    ours = read_trials(tmp_path)
    assert len(ours) == 1 and list(ours.columns[:3]) == ["sweep", "schema_version", "trial_id"]
    assert_row(ours.iloc[0])
    assert trial_config(ours.iloc[0]) == CONFIG

    pandas = pd.read_parquet(tmp_path / "trials")  # pandas alone, the partition gives `sweep`
    assert_row(pandas.iloc[0])
    arrow = ds.dataset(tmp_path / "trials", partitioning="hive").to_table().to_pylist()
    assert_row(arrow[0])
    (duck,) = duckdb_rows(f"{tmp_path}/trials/*/*.parquet")
    assert_row(duck)
    for column, value in ours.iloc[0].items():  # every column, the same in every reader
        for other in (pandas.iloc[0][column], arrow[0][column], duck[column]):
            assert missing(other) if missing(value) else plain(other) == plain(value), column
    assert (
        duck["version.python"]
        == f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    )
    assert duck["version.optuna"] is not None and duck["version.tune_lowmem"] is not None

    epochs = read_epochs(tmp_path, sweep="wrn", trial_id="t_00001")
    assert epochs["epoch"].tolist() == [1, 2]
    assert epochs["metric.val_accuracy"].tolist() == [0.5, 0.75]
    duck_epochs = duckdb_rows(f"{tmp_path}/epochs/*/*.parquet")
    assert sorted((r["epoch"], r["metric.train_loss"]) for r in duck_epochs) == [(1, 1.5), (2, 0.5)]
    assert list_sweeps(tmp_path) == ["wrn"] and trial_ids(tmp_path, "wrn") == ["t_00001"]


def test_rewriting_a_trial_replaces_its_row_and_touches_no_other(tmp_path):
    write_trial(tmp_path, record("other"), EPOCHS)
    other = (tmp_path / "trials" / "sweep=wrn" / "other.parquet").read_bytes()
    write_trial(
        tmp_path,
        record(status="failed", failure_reason="CUDA out of memory", metrics={}),
        EPOCHS[:1],
    )
    write_trial(tmp_path, record(metrics={"val_accuracy": 0.5}), EPOCHS)

    trials = read_trials(tmp_path).set_index("trial_id")
    assert trials.index.tolist() == ["other", "t_00001"]
    assert trials.loc["t_00001", "status"] == "completed"
    assert trials.loc["t_00001", "metric.val_accuracy"] == 0.5
    assert pd.isna(trials.loc["t_00001", "failure_reason"])
    assert len(read_epochs(tmp_path, trial_id="t_00001")) == 2
    assert (tmp_path / "trials" / "sweep=wrn" / "other.parquet").read_bytes() == other
    assert sorted(p.name for p in (tmp_path / "trials" / "sweep=wrn").iterdir()) == [
        "other.parquet",
        "t_00001.parquet",
    ]


def test_a_crash_before_the_rename_is_invisible(tmp_path):
    write_trial(tmp_path, record(metrics={"val_accuracy": 0.25}))
    # A writer killed between its temporary file and the rename: os.replace never returns.
    crash = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from tests.test_store import record
        from tune_lowmem import store
        os.replace = lambda src, dst: os._exit(9)  # the store's atomic rename
        store.write_trial({str(tmp_path)!r}, record(metrics={{"val_accuracy": 0.75}}))
    """)
    assert subprocess.run([sys.executable, "-c", crash], check=False).returncode == 9
    folder = tmp_path / "trials" / "sweep=wrn"
    (leftover,) = folder.glob(".t_00001.parquet.tmp-*")
    half = leftover.read_bytes()[: leftover.stat().st_size // 2]
    (folder / ".t_00002.parquet.tmp-torn").write_bytes(half)  # and a torn one

    assert read_trials(tmp_path)["metric.val_accuracy"].tolist() == [0.25]
    assert pd.read_parquet(tmp_path / "trials")["metric.val_accuracy"].tolist() == [0.25]
    assert ds.dataset(tmp_path / "trials", partitioning="hive").to_table().num_rows == 1
    assert [r["metric.val_accuracy"] for r in duckdb_rows(f"{tmp_path}/trials/*/*.parquet")] == [
        0.25
    ]
    assert trial_ids(tmp_path, "wrn") == ["t_00001"]

    write_trial(tmp_path, record(metrics={"val_accuracy": 0.75}))  # the retry lands once
    assert read_trials(tmp_path)["metric.val_accuracy"].tolist() == [0.75]


def test_a_full_disk_names_the_file_and_keeps_the_old_row(tmp_path, monkeypatch):
    write_trial(tmp_path, record(metrics={"val_accuracy": 0.25}))
    folder = tmp_path / "trials" / "sweep=wrn"

    def full_disk(table, handle):
        handle.write(b"PAR1 half a file")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pq, "write_table", full_disk)
    with pytest.raises(WriteFailed) as stopped:
        write_trial(tmp_path, record(metrics={"val_accuracy": 0.75}))
    assert (
        str(stopped.value) == f"cannot write {folder / 't_00001.parquet'}: No space left on device"
    )
    assert [p.name for p in folder.iterdir()] == ["t_00001.parquet"]  # no temporary file left
    monkeypatch.undo()
    assert read_trials(tmp_path)["metric.val_accuracy"].tolist() == [0.25]


def test_a_sweeps_rows_are_built_from_what_its_trials_reported():
    """`SweepRows.row`: reported memory names (the first version's too) become memory columns,
    metrics that are not numbers are left out, and the sweep's objectives are named by column."""
    rows = SweepRows("wrn", "nsga2", {"val_accuracy": "maximize", "memory_total_mb": "minimize"})
    reported = {"val_accuracy": 0.9125, "test_accuracy": 0.9031, "diverged": False, "note": "x"}
    memory = {"memory_total_mb": 404.8, "memory.measured_total_mb": 398.25, "flops_per_step": 7}
    built = rows.row("t_00001", "completed", CONFIG.to_flat(), reported, memory, point=3)
    assert built == record(
        metrics={"val_accuracy": 0.9125, "test_accuracy": 0.9031},
        memory={"predicted_total_mb": 404.8, "measured_total_mb": 398.25, "flops_per_step": 7},
        started_at=None,
        finished_at=None,
        epochs_completed=0,
        sampler="nsga2",
        objectives={"metric.val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    )
    assert rows.row("t_00002", "stopped", {}).metrics == {}


def test_trials_with_different_columns_read_together(tmp_path):
    dct = TrialConfig.from_dict({"task": "dct-iwslt14", "seed": 3})
    write_trial(tmp_path, record())
    write_trial(
        tmp_path,
        record("t_00002", status="failed", failure_reason="NaN loss at update 7", metrics={}),
    )
    write_trial(
        tmp_path,
        record("d_1", sweep="dct", trial_config=dct, metrics={"test_bleu": 33.5}, memory={}),
    )

    trials = read_trials(tmp_path).set_index("trial_id")
    assert list_sweeps(tmp_path) == ["dct", "wrn"]
    assert trials.loc["d_1", "metric.test_bleu"] == 33.5 and pd.isna(
        trials.loc["d_1", "metric.val_accuracy"]
    )
    assert list(trials.loc["d_1", "config.model.encoder_kernels"]) == [3, 7, 15, 31, 31, 31, 31]
    assert (
        pd.isna(trials.loc["t_00001", "config.model.embed_dim"])
        and trials.loc["t_00001", "config.model.depth"] == 28
    )
    assert trials.loc["t_00002", "failure_reason"] == "NaN loss at update 7"
    assert pd.isna(trials.loc["t_00002", "metric.val_accuracy"])
    assert trial_config(trials.loc["d_1"]) == dct
    assert read_trials(tmp_path, sweep="wrn").index.size == 2

    rows = {r["trial_id"]: r for r in duckdb_rows(f"{tmp_path}/trials/*/*.parquet", union=True)}
    assert rows["d_1"]["metric.test_bleu"] == 33.5 and rows["t_00001"]["metric.test_bleu"] is None


def test_seed_group_is_the_point_without_its_seed(tmp_path):
    """The id is the hash earlier versions gave (lists hashed as their JSON text), so the rows of
    a sweep resumed across the change still group with the ones written before it."""
    write_trial(tmp_path, record("a"))
    old = {
        k: json.dumps(v) if isinstance(v, list) else v
        for k, v in CONFIG.to_flat().items()
        if not (k in later_fields() and v == later_fields()[k])  # fields the first version lacked
    }
    old.update(REMOVED_FIELDS)  # and one it had
    del old["seed"]
    old_hash = hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:16]
    assert read_trials(tmp_path)["seed_group"].tolist() == [old_hash]
    write_trial(tmp_path, record("b", trial_config=CONFIG.replace(seed=7)))
    write_trial(tmp_path, record("c", trial_config=CONFIG.replace(**{"sparsity.density": 0.2})))
    groups = read_trials(tmp_path).set_index("trial_id")["seed_group"]
    assert groups["a"] == groups["b"] != groups["c"]


def test_newer_schema_is_skipped_and_older_files_read_with_nulls(tmp_path, capsys):
    write_trial(tmp_path, record())
    table = pq.read_table(tmp_path / "trials" / "sweep=wrn" / "t_00001.parquet")
    older = table.drop_columns(["seed_group", "memory.flops_per_step"]).set_column(
        1, "trial_id", pa.array(["old"])
    )
    pq.write_table(older, tmp_path / "trials" / "sweep=wrn" / "old.parquet")
    trials = read_trials(tmp_path).set_index("trial_id")
    assert pd.isna(trials.loc["old", "seed_group"]) and pd.isna(
        trials.loc["old", "memory.flops_per_step"]
    )
    assert trials.loc["t_00001", "memory.flops_per_step"] == 123456789
    without = table.drop_columns(["config.model.fused_norm"]).set_column(
        1, "trial_id", pa.array(["before_fused_norm"])
    )
    pq.write_table(without, tmp_path / "trials" / "sweep=wrn" / "before_fused_norm.parquet")
    rows = read_trials(tmp_path).set_index("trial_id")
    assert trial_config(rows.loc["before_fused_norm"]) == CONFIG  # the added field's default

    newer = table.set_column(0, "schema_version", pa.array([SCHEMA_VERSION + 1], pa.int64()))
    newer = newer.set_column(1, "trial_id", pa.array(["new"]))
    pq.write_table(newer, tmp_path / "trials" / "sweep=wrn" / "new.parquet")
    assert sorted(read_trials(tmp_path)["trial_id"]) == ["before_fused_norm", "old", "t_00001"]
    (line,) = capsys.readouterr().err.splitlines()
    said = f"schema_version {SCHEMA_VERSION + 1} is newer than this tune-lowmem reads ({SCHEMA_VERSION})"
    assert f"new.parquet: {said}" in line


def as_written_before_time_columns(path: Path) -> None:
    """A file of today's store rewritten as the version before time columns (schema 1) wrote
    it: no ``time.*`` column, the side run's step-and-evaluation peak under its old name."""
    table = pq.read_table(path)
    table = table.drop_columns([c for c in table.column_names if c.startswith("time.")])
    table = table.set_column(0, "schema_version", pa.array([1] * table.num_rows, pa.int64()))
    old = {MEASURED_STEP_EVAL_PEAK: "memory.measured_run_peak_mb"}
    pq.write_table(table.rename_columns([old.get(c, c) for c in table.column_names]), path)


def test_a_store_written_before_time_columns_reads_them_empty(tmp_path):
    """Rows of the version before (schema 1): their time columns empty beside a newer row's,
    their side run's peak read under its new name, as a result too, and so once compacted."""
    rows = SweepRows("wrn", objectives={"val_accuracy": "maximize"})
    times = {MEASURED_UPDATE_S: 0.25, MEASURED_EVALUATION_S: 1.5, MEASURED_EPOCH_S: 4.0}
    for trial_id in ("old", "new"):
        outcome = {MEASURED_STEP_EVAL_PEAK: 12.0, **times}
        row = rows.row(trial_id, "completed", CONFIG.to_flat(), {"val_accuracy": 0.5}, outcome)
        write_trial(tmp_path, row, epochs=[{"epoch": 1, "val_accuracy": 0.5, **times}])
    for table in ("trials", "epochs"):
        as_written_before_time_columns(tmp_path / table / "sweep=wrn" / "old.parquet")
    for _ in ("as written", "compacted"):
        trials = read_trials(tmp_path).set_index("trial_id")
        assert "memory.measured_run_peak_mb" not in trials
        assert (trials[MEASURED_STEP_EVAL_PEAK] == 12.0).all()
        assert trials.loc["old", list(times)].isna().all()
        assert trials.loc["new", list(times)].tolist() == list(times.values())
        epochs = read_epochs(tmp_path).set_index("trial_id")
        assert epochs.loc["old", list(times)].isna().all()
        assert epochs.loc["new", MEASURED_UPDATE_S] == 0.25
        reported = result_from_row(trials.loc["old"].to_dict(), ["val_accuracy"])
        assert reported[MEASURED_STEP_EVAL_PEAK] == 12.0
        assert all(reported[name] is None for name in times)
        compact(tmp_path, "wrn", force=True)
    (tmp_path / "trials" / "sweep=wrn").rename(tmp_path / "gone")  # the older row alone
    write_trial(tmp_path, rows.row("only", "completed", CONFIG.to_flat(), {"val_accuracy": 0.5}))
    as_written_before_time_columns(tmp_path / "trials" / "sweep=wrn" / "only.parquet")
    alone = read_trials(tmp_path)
    assert not any(c.startswith("time.") for c in alone.columns)
    assert result_from_row(alone.iloc[0].to_dict(), [])[MEASURED_UPDATE_S] is None


def test_lists_stored_as_json_text_by_older_versions_still_read(tmp_path):
    """Before list columns, a tuple field was JSON text: such rows read as lists, beside new
    ones, with the same seed group, and rebuild the same config."""
    write_trial(tmp_path, record())
    table = pq.read_table(tmp_path / "trials" / "sweep=wrn" / "t_00001.parquet")
    column = table.column_names.index("config.schedule.milestones")
    old = table.set_column(column, "config.schedule.milestones", pa.array(["[0.3, 0.6, 0.8]"]))
    old = old.set_column(1, "trial_id", pa.array(["old"]))
    pq.write_table(old, tmp_path / "trials" / "sweep=wrn" / "old.parquet")
    trials = read_trials(tmp_path).set_index("trial_id")
    assert [list(v) for v in trials["config.schedule.milestones"]] == [[0.3, 0.6, 0.8]] * 2
    assert trials.loc["old", "seed_group"] == trials.loc["t_00001", "seed_group"]
    assert trial_config(trials.loc["old"]) == trial_config(trials.loc["t_00001"]) == CONFIG
    assert trial_config({**trials.loc["old"].to_dict(), "config.schedule.milestones": "[0.5]"})


def test_counts_are_integers_and_lists_are_lists(tmp_path):
    epochs = [
        {"epoch": 1, "updates": 10, "train_loss": 1.5},
        {"epoch": 2, "updates": 20, "train_loss": 1},
    ]
    write_trial(tmp_path, record(metrics={"updates": 20, "val_accuracy": 0.5}), epochs)
    schema = pq.read_schema(tmp_path / "trials" / "sweep=wrn" / "t_00001.parquet")
    assert schema.field("metric.updates").type == pa.int64()
    assert schema.field("config.schedule.milestones").type == pa.list_(pa.float64())
    epoch_schema = pq.read_schema(tmp_path / "epochs" / "sweep=wrn" / "t_00001.parquet")
    assert epoch_schema.field("metric.updates").type == pa.int64()
    assert epoch_schema.field("metric.train_loss").type == pa.float64()  # 1.5 and 1: numbers


@pytest.mark.parametrize(
    "name", ["", "../up", "a/b", ".hidden", "_meta", "sweep=x", "a b", "x" * 201, None]
)
def test_bad_names_are_refused_and_nothing_is_written(tmp_path, name):
    for field in ("sweep", "trial_id"):
        with pytest.raises(ConfigError, match=f"^{field}: .* allowed: letters, digits"):
            write_trial(tmp_path, record(**{field: name}), EPOCHS)
    if name is not None:  # None asks the readers for every sweep
        with pytest.raises(ConfigError, match="^sweep: "):
            read_trials(tmp_path, sweep=name)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("changes", "epochs", "field"),
    [
        ({"status": "done"}, None, "status"),
        ({"status": "failed"}, None, "failure_reason"),
        ({"started_at": datetime(2024, 1, 1)}, None, "started_at"),
        ({"memory": {"total_mb": 1.0}}, None, "memory.total_mb"),
        ({"metrics": {"val_accuracy": "high"}}, None, "metrics.val_accuracy"),
        ({"config": {**CONFIG.to_flat(), "model.depth": "deep"}}, EPOCHS, "config.model.depth"),
        ({"config": {**CONFIG.to_flat(), "model.height": 3}}, EPOCHS, "config.model.height"),
        ({"config": {**CONFIG.to_flat(), "model.depth": 28.5}}, None, "config.model.depth"),
        ({"config": {**CONFIG.to_flat(), "data.augment": 1}}, None, "config.data.augment"),
        (
            {"config": {**CONFIG.to_flat(), "schedule.milestones": "0.3"}},
            None,
            "config.schedule.milestones",
        ),
        ({"config": {"task": "mnist"}}, None, "config.task"),
        ({"memory": {"flops_per_step": 1.5}}, None, "memory.flops_per_step"),
        ({"point": -1}, None, "point"),
        ({}, [{"epoch": 1}, {"epoch": 1}], "epochs.epoch"),
        ({}, [{"epoch": 1, "val_accuracy": [0.5]}], "epochs.val_accuracy"),
    ],
)
def test_bad_values_name_their_field_and_write_nothing(tmp_path, changes, epochs, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        write_trial(tmp_path, record(**changes), epochs)
    assert list(tmp_path.iterdir()) == []


def test_rows_before_the_stored_totals_read_with_them_empty(tmp_path):
    """The stored totals and the paper's CSR column came after the first stores: a file without
    them reads beside one with them, its cells empty rather than a guess."""
    memory = {"predicted_total_mb": 1.5, "predicted_stored_total_mb": 2.25}
    write_trial(tmp_path, record(memory={**memory, "paper_csr_total_mb": 1.75}))
    path = tmp_path / "trials" / "sweep=wrn" / "t_00001.parquet"
    table = pq.read_table(path)
    later = ["memory.predicted_stored_total_mb", "memory.measured_stored_total_mb"]
    later.append("memory.paper_csr_total_mb")
    older = table.drop_columns(later).set_column(1, "trial_id", pa.array(["old"]))
    pq.write_table(older, path.with_name("old.parquet"))
    rows = read_trials(tmp_path).set_index("trial_id")
    assert rows.loc["t_00001", "memory.predicted_stored_total_mb"] == 2.25
    assert rows.loc["t_00001", "memory.paper_csr_total_mb"] == 1.75
    assert pd.isna(rows.loc["old", "memory.predicted_stored_total_mb"])
    assert pd.isna(rows.loc["old", "memory.paper_csr_total_mb"])
    assert rows.loc["old", "memory.predicted_total_mb"] == 1.5
