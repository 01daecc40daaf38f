"""The Parquet store: one file per trial, so every result is in it exactly once.

Layout under a store root ``DIR``::

    DIR/trials/sweep=<name>/<trial_id>.parquet   one row: the trial's config, final metrics, memory
    DIR/epochs/sweep=<name>/<trial_id>.parquet   one row per epoch of that trial
    DIR/models/sweep=<name>/<trial_id>.pt        the final weights of a completed trial: a plain
                                                 torch state_dict (`torch.load(..., weights_only=True)`)

Both tables are Hive-partitioned Parquet datasets that need nothing of this project to read::

    pandas.read_parquet("DIR/trials")
    pyarrow.dataset.dataset("DIR/trials", partitioning="hive")
    duckdb: SELECT * FROM read_parquet('DIR/trials/*/*.parquet', hive_partitioning=true,
                                       union_by_name=true)

Translation trials' `metric.val_bleu` / `metric.test_bleu` are tokenised BLEU (BPE removed,
text still Moses-tokenised and lower-cased, as fairseq-generate --remove-bpe and the paper score
it); `metric.*_sacrebleu` (stores from this version on) are detokenised sacreBLEU, signature
`tune_lowmem.tasks.translation.decode.sacrebleu_signature()` with `version.sacrebleu`.

``sweep`` is the partition key and lives in the path only (a copy inside the files would clash
with it in pyarrow). Config columns have the types of the `TrialConfig` fields, so every trial
of one task has the same config columns whatever its values. Metric columns follow what each
trial reported; when they differ between trials, pandas and pyarrow take the first file's
columns, so read with `read_trials` (or DuckDB's ``union_by_name``) to get the union.

Concurrent trials never write the same file; a trial written again replaces its own file
atomically (a hidden temporary file in the same folder, fsync, `os.replace`), so a reader sees
the old row or the new one, never half a file, and a crash leaves at most a hidden temporary
file that every reader skips.

Thousands of one-row files are slow to open, so `compact` merges a sweep's files into one
``+compacted-<time>-<id>.parquet`` (a name no trial id can take) the way table formats compact
small files: it writes the merged file atomically first and only then removes the files it holds.
A crash in between leaves a row in two files, and the readers keep one copy per trial id (its
own file before a compacted one, the newest compacted one before older ones), so no row is ever
lost or read twice; a trial file rewritten while compaction runs is kept, not removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .config import ConfigError, TrialConfig, config_kinds, older_store_values
from .results import CUDA_PEAK_COLUMNS
from .schema import Kind, scalar_fits

SCHEMA_VERSION = 1
STATUSES = ("completed", "failed", "infeasible", "stopped")  # stopped: by early stopping
MEMORY_COLUMNS: dict[str, pa.DataType] = {
    **{
        f"{kind}_{part}_mb": pa.float64()
        for kind in ("predicted", "measured")
        for part in ("model", "optimizer", "activation", "total")
    },
    # What the masked step holds (sparse weights dense, with masks), beside the accounted totals
    # above (sparse weights as CSR); empty in rows of stores written before them
    **{f"{kind}_stored_total_mb": pa.float64() for kind in ("predicted", "measured")},
    "flops_per_step": pa.int64(),
    **dict.fromkeys(CUDA_PEAK_COLUMNS, pa.float64()),
}
VERSIONED_PACKAGES = {
    "tune_lowmem": "tune-lowmem",
    "torch": "torch",
    "ray": "ray",
    "optuna": "optuna",
    "sacrebleu": "sacrebleu",  # completes the signature of metric.*_sacrebleu
}
TRIALS, EPOCHS, MODELS = "trials", "epochs", "models"


def later_fields() -> dict[str, Any]:
    """Config fields newer than the first stores, with the value every older row implicitly had:
    the built-in tasks' two, and what each technique declares (`Setting.older_stores`)."""
    return {"model.init_checkpoint": None, "model.fused_norm": "none", **older_store_values()}


# Config fields removed since, with the value every row that had them held.
REMOVED_FIELDS = {"data.num_workers": 0}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_NAME_RULE = "letters, digits, '-', '_' and '.', starting with a letter or digit, at most 200"
_SUFFIX = ".parquet"
_COMPACTED = re.compile(r"\+compacted-(\d{20})-[0-9a-f]{8}\.parquet")
_OWN_FILE_RANK = 2**62  # a trial's own file outranks every compacted copy of its row
COMPACT_MIN_FILES = 64  # small files before `compact` (unforced) merges a sweep
COMPACT_CHUNK = 500  # small files merged at once: what bounds compaction's memory
_GROUPS = ("config.", "metric.", "memory.", "version.")  # column order of what the readers return
_KINDS = {  # column type -> (what to call it, the Python values it takes)
    pa.bool_(): ("true or false", (bool, np.bool_)),
    pa.int64(): ("an integer", (int, np.integer)),
    pa.string(): ("a string", (str,)),
}
_BASE_COLUMNS = {  # every row file's own columns, with their types
    "schema_version": pa.int64(),
    "trial_id": pa.string(),
    "status": pa.string(),
    "failure_reason": pa.string(),
    "seed_group": pa.string(),
    "started_at": pa.timestamp("us", tz="UTC"),
    "finished_at": pa.timestamp("us", tz="UTC"),
    "wall_seconds": pa.float64(),
    "epochs_completed": pa.int64(),
    "node_id": pa.string(),
    "sampler": pa.string(),
    "point": pa.int64(),
    "objectives": pa.string(),  # the sweep's objectives (column -> direction) as JSON
}
_EPOCH_COLUMNS = {"schema_version": pa.int64(), "trial_id": pa.string(), "epoch": pa.int64()}
_LIST = pa.list_(pa.null())  # stands for "any list" among allowed types
_KEYS = ("schema_version", "trial_id", "epoch")  # every read returns these
QUARANTINE = "quarantine"  # DIR/quarantine/: unreadable files moved aside, never deleted


class StoreError(ValueError):
    """The store holds something this version cannot read (a newer schema, clashing types)."""


class WriteFailed(RuntimeError):
    """A file of the store or of a sweep could not be written (a full disk, a quota): not a
    trial's failure but the storage's, so the sweep stops, to be resumed once there is room."""

    def __init__(self, path: str | Path, error: OSError):
        self.path = Path(path)
        reason = error.strerror or str(error) or type(error).__name__
        super().__init__(f"cannot write {path}: {reason}")


@dataclass(frozen=True)
class TrialRecord:
    """One finished (or failed) trial, as the trainable knows it at the end."""

    sweep: str
    trial_id: str
    status: str  # completed | failed | infeasible | pruned
    config: Mapping[str, Any]  # flat, as `TrialConfig.to_flat()` gives it
    metrics: Mapping[str, float | None] = field(default_factory=dict)  # final values by name
    memory: Mapping[str, float | int | None] = field(default_factory=dict)  # keys of MEMORY_COLUMNS
    failure_reason: str | None = None  # required when failed or infeasible
    started_at: datetime | None = None  # timezone-aware
    finished_at: datetime | None = None
    epochs_completed: int = 0
    node_id: str | None = None  # the Ray node that ran it last (None: never placed on one)
    sampler: str | None = None  # the sweep's Optuna sampler (nsga2, tpe, gp, random, grid)
    point: int | None = None  # the number of the Optuna trial that proposed it (None: no sweep)
    objectives: Mapping[str, str] = field(default_factory=dict)  # the sweep's: column -> direction

    def __post_init__(self) -> None:
        check_name(self.sweep, "sweep")
        check_name(self.trial_id, "trial_id")
        if self.status not in STATUSES:
            raise ConfigError(
                "status", f"{self.status!r} is not allowed; allowed: {', '.join(STATUSES)}"
            )
        if self.status in ("failed", "infeasible") and not self.failure_reason:
            raise ConfigError("failure_reason", f"a reason is required for a {self.status} trial")
        unknown = sorted(set(self.memory) - set(MEMORY_COLUMNS))
        if unknown:
            raise ConfigError(
                f"memory.{unknown[0]}", f"unknown part; allowed: {', '.join(MEMORY_COLUMNS)}"
            )
        for name in ("started_at", "finished_at"):
            moment = getattr(self, name)
            if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
                raise ConfigError(
                    name, f"{moment!r} is not allowed; a timezone-aware datetime is required"
                )
        _check_count("epochs_completed", self.epochs_completed)
        for column, direction in self.objectives.items():
            if direction not in ("maximize", "minimize"):
                raise ConfigError(
                    f"objectives.{column}",
                    f"{direction!r} is not allowed; allowed: maximize, minimize",
                )
        if self.point is not None:
            _check_count("point", self.point)


def _check_count(field_name: str, count: Any) -> None:
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ConfigError(field_name, f"{count!r} is not allowed; an integer >= 0 is required")


def check_name(value: Any, field_name: str) -> str:
    """Sweep names and trial ids become file names: only a safe charset gets through."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ConfigError(field_name, f"{value!r} is not allowed; allowed: {_NAME_RULE} characters")
    return value


# ---- writing -------------------------------------------------------------------------------


def write_trial(
    root: str | Path, record: TrialRecord, epochs: Sequence[Mapping[str, Any]] | None = None
) -> Path:
    """Store one trial (and, if given, its epochs), replacing any earlier copy of it.

    Both tables are built before anything touches the disk, so bad values write nothing. The
    epochs go first: a trial row in the store means its epochs are there too. ``epochs=None``
    leaves an existing epochs file of this trial as it is.
    """
    trial = _trial_table(record)
    epoch_table = None if epochs is None else _epochs_table(record.trial_id, epochs)
    if epoch_table is not None:
        epochs_path = _file(root, EPOCHS, record.sweep, record.trial_id)
        _quarantine_if_bad(root, epochs_path, EPOCHS)
        _atomic_write(epochs_path, functools.partial(pq.write_table, epoch_table))
    path = _file(root, TRIALS, record.sweep, record.trial_id)
    _quarantine_if_bad(root, path, TRIALS)
    _atomic_write(path, functools.partial(pq.write_table, trial))
    return path


def model_file(root: str | Path, sweep: str, trial_id: str) -> Path:
    """Where a trial's final weights are (or would be) kept."""
    return _file(root, MODELS, sweep, trial_id).with_suffix(".pt")


def write_model(root: str | Path, sweep: str, trial_id: str, state_dict: Mapping[str, Any]) -> Path:
    """Keep a trial's final weights (on the CPU, in the dtypes it trained in) beside its rows;
    written before the trial's row, so a completed row means its weights are there."""
    import torch

    path = model_file(root, sweep, trial_id)
    state = {name: tensor.detach().cpu() for name, tensor in state_dict.items()}
    _atomic_write(path, lambda handle: torch.save(state, handle))
    return path


def _trial_table(record: TrialRecord) -> pa.Table:
    config = _config_columns(record.config)
    started, finished = record.started_at, record.finished_at
    wall = (finished - started).total_seconds() if started and finished else None
    values = {
        "schema_version": SCHEMA_VERSION,
        "trial_id": record.trial_id,
        "status": record.status,
        "failure_reason": record.failure_reason,
        "seed_group": _seed_group(config),
        "started_at": started,
        "finished_at": finished,
        "wall_seconds": wall,
        "epochs_completed": record.epochs_completed,
        "node_id": record.node_id,
        "sampler": record.sampler,
        "point": record.point,
        "objectives": json.dumps(dict(record.objectives)) if record.objectives else None,
    }
    columns = {name: pa.array([values[name]], kind) for name, kind in _BASE_COLUMNS.items()}
    columns.update((f"config.{key}", array) for key, array in config.items())
    for name in sorted(record.metrics):
        columns[f"metric.{check_name(name, 'metrics')}"] = _numbers(
            [record.metrics[name]], f"metrics.{name}"
        )
    for name, kind in MEMORY_COLUMNS.items():
        columns[f"memory.{name}"] = _column(record.memory.get(name), kind, f"memory.{name}")
    for column, version in _versions().items():
        columns[f"version.{column}"] = pa.array([version], pa.string())
    return pa.table(columns)


def _epochs_table(trial_id: str, epochs: Sequence[Mapping[str, Any]]) -> pa.Table:
    numbers = [row.get("epoch") for row in epochs]
    for number in numbers:
        if not isinstance(number, (int, np.integer)) or isinstance(number, bool) or number < 0:
            raise ConfigError(
                "epochs.epoch",
                f"{number!r} is not allowed; an integer >= 0 in every row is required",
            )
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise ConfigError(
            "epochs.epoch",
            f"epoch {repeated[0]} appears more than once; one row per epoch is required",
        )
    names = sorted({name for row in epochs for name in row if name != "epoch"})
    given = {
        "schema_version": [SCHEMA_VERSION] * len(epochs),
        "trial_id": [trial_id] * len(epochs),
        "epoch": numbers,
    }
    columns = {name: pa.array(given[name], kind) for name, kind in _EPOCH_COLUMNS.items()}
    for name in names:
        check_name(name, "epochs")
        columns[f"metric.{name}"] = _numbers([row.get(name) for row in epochs], f"epochs.{name}")
    return pa.table(columns)


def _config_columns(config: Mapping[str, Any]) -> dict[str, pa.Array]:
    """Every config field of the trial's task as a typed one-value column (null when absent)."""
    task = config.get("task", TrialConfig.task)
    try:
        kinds = config_kinds(task)
    except ConfigError as error:
        raise ConfigError(f"config.{error.field}", error.reason) from None
    unknown = sorted(set(config) - set(kinds))
    if unknown:
        raise ConfigError(f"config.{unknown[0]}", f"not a TrialConfig field of task {task}")
    columns = {}
    for key, kind in kinds.items():  # the validator's own types (`schema`): lists stay lists
        value = config.get(key)
        if value is not None:
            Kind(kind.scalar, kind.is_list, kind.length).check(value, f"config.{key}")
            value = list(value) if kind.is_list else value
        columns[key] = pa.array([value], kind.arrow)
    return columns


def _column(value: Any, kind: pa.DataType, field_name: str) -> pa.Array:
    """A one-row column of ``kind``; a value of another kind is refused, naming its field."""
    if kind == pa.float64():
        return _floats([value], field_name)
    name, accepted = _KINDS[kind]
    is_bool = isinstance(value, (bool, np.bool_))  # bool is an int subclass: keep them apart
    if value is None or (isinstance(value, accepted) and is_bool == (kind == pa.bool_())):
        try:
            return pa.array([value], kind)
        except OverflowError:
            pass
    raise ConfigError(field_name, f"{value!r} is not allowed; {name} or null is required")


def _floats(values: list[Any], field_name: str) -> pa.Array:
    for value in values:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float, np.number))
        ):
            raise ConfigError(field_name, f"{value!r} is not allowed; a number or null is required")
    return pa.array([None if v is None else float(v) for v in values], pa.float64())


def _numbers(values: list[Any], field_name: str) -> pa.Array:
    """A metric column: int64 when every value is an integer (counts: epoch, updates), else
    float64; pyarrow, pandas and DuckDB promote int64 to float64 where files differ."""
    floats = _floats(values, field_name)
    given = [v for v in values if v is not None]
    if given and all(scalar_fits(v, int) for v in given):
        return pa.array([None if v is None else int(v) for v in values], pa.int64())
    return floats


def _seed_group(config: Mapping[str, pa.Array]) -> str:
    """The same point with another seed gets the same id: a hash of the typed config but seed.
    Lists enter as the JSON text that stores before list columns held, and fields added later
    (`later_fields`) count only when they differ from the value every older row had, and removed
    ones (`REMOVED_FIELDS`) with the value they had, so ids stay the same across versions."""
    later = later_fields()
    point = {
        key: _hashable(array[0].as_py())
        for key, array in config.items()
        if key != "seed" and not (key in later and array[0].as_py() == later[key])
    }
    for key, value in REMOVED_FIELDS.items():
        point.setdefault(key, value)
    return hashlib.sha256(json.dumps(point, sort_keys=True).encode()).hexdigest()[:16]


def _hashable(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, list) else value


@functools.cache
def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for column, distribution in VERSIONED_PACKAGES.items():
        try:
            versions[column] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            versions[column] = None
    versions["python"] = platform.python_version()
    return versions


def _file(root: str | Path, table: str, sweep: str, trial_id: str) -> Path:
    return (
        Path(root)
        / table
        / f"sweep={check_name(sweep, 'sweep')}"
        / f"{check_name(trial_id, 'trial_id')}{_SUFFIX}"
    )


def _atomic_write(path: Path, write: Callable[[Any], None]) -> None:
    """``write`` a hidden temporary file beside ``path``, fsync it, rename it onto ``path``; a
    write that fails (a full disk) leaves the old file as it was and raises `WriteFailed`."""
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")  # leading dot: readers skip it
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        raise WriteFailed(path, error) from error
    finally:
        tmp.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a power cut
    finally:
        os.close(directory)


# ---- reading -------------------------------------------------------------------------------


def list_sweeps(root: str | Path) -> list[str]:
    """Names of the sweeps that have at least one stored trial."""
    return _sweeps(root, TRIALS)


def _sweeps(root: str | Path, table: str) -> list[str]:
    folder = Path(root) / table
    names = (path.name.removeprefix("sweep=") for path in folder.glob("sweep=*"))
    return sorted(n for n in names if _NAME.fullmatch(n) and _data_files(folder / f"sweep={n}"))


def trial_ids(root: str | Path, sweep: str) -> list[str]:
    """The trial ids stored for one sweep, sorted."""
    folder = Path(root) / TRIALS / f"sweep={check_name(sweep, 'sweep')}"
    while True:  # listed again when a compaction removes a file before it is read
        ids = {path.name.removesuffix(_SUFFIX) for path in _parquet_files(folder)}
        try:
            for path in _compacted_files(folder):
                ids.update(pq.read_table(path, columns=["trial_id"])["trial_id"].to_pylist())
        except FileNotFoundError:
            continue
        return sorted(ids)


def read_trials(
    root: str | Path, sweep: str | None = None, columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """All stored trials (of one sweep, or of all), one row each, columns the union over files.

    ``columns`` reads only those (a name ending in ``.`` stands for every column it starts):
    analysis of a large store need not read what it does not show. ``sweep`` and ``trial_id``
    always come.
    """
    return _read(root, TRIALS, sweep, None, columns)


def read_epochs(
    root: str | Path, sweep: str | None = None, trial_id: str | None = None
) -> pd.DataFrame:
    """The per-epoch rows, of one sweep and/or one trial, sorted by sweep, trial and epoch."""
    return _read(root, EPOCHS, sweep, trial_id, None)


def _parquet_files(folder: Path) -> list[Path]:
    """The one-trial files of a sweep's folder (hidden temporary files never match)."""
    return sorted(
        p for p in folder.glob(f"*{_SUFFIX}") if _NAME.fullmatch(p.name.removesuffix(_SUFFIX))
    )


def _compacted_files(folder: Path) -> list[Path]:
    """The files `compact` wrote, oldest first (their names start with the time they were made)."""
    return sorted(p for p in folder.glob(f"+*{_SUFFIX}") if _COMPACTED.fullmatch(p.name))


def _data_files(folder: Path) -> list[tuple[Path, int]]:
    """Every file of a sweep's folder with its rank: of two copies of a row, the higher wins."""
    compacted = [(p, int(_COMPACTED.fullmatch(p.name).group(1))) for p in _compacted_files(folder)]
    return compacted + [(p, _OWN_FILE_RANK) for p in _parquet_files(folder)]


def _read(
    root: str | Path,
    table: str,
    sweep: str | None,
    trial_id: str | None,
    columns: Sequence[str] | None,
) -> pd.DataFrame:
    sweeps = [check_name(sweep, "sweep")] if sweep is not None else _sweeps(root, table)
    if trial_id is not None:
        check_name(trial_id, "trial_id")
    parts = []
    for name in sweeps:
        data = _read_folder(Path(root) / table / f"sweep={name}", table, trial_id, columns)
        if data is not None:
            parts.append(data.add_column(0, "sweep", pa.array([name] * data.num_rows, pa.string())))
    keys = ["sweep", "trial_id"] + (["epoch"] if table == EPOCHS else [])
    if not parts:
        return pd.DataFrame(columns=[*keys, "schema_version"])
    frame = _concat(parts, Path(root) / table).to_pandas(
        types_mapper={pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}.get
    )
    frame = frame[sorted(frame.columns, key=_column_group)]  # stable: base, config, metric, ...
    return frame.sort_values(keys, kind="stable", ignore_index=True)


def _read_folder(
    folder: Path, table: str, trial_id: str | None, columns: Sequence[str] | None
) -> pa.Table | None:
    """One sweep's rows, one copy per trial: its own file's, else the newest compacted file's.

    A file that a compaction removed between listing and reading means its rows are now in a
    merged file this listing missed: the folder is listed and read again."""
    while True:
        try:
            return _read_listed(folder, table, trial_id, columns)
        except FileNotFoundError:
            continue


def _read_listed(
    folder: Path, table: str, trial_id: str | None, columns: Sequence[str] | None
) -> pa.Table | None:
    files = _data_files(folder)
    if trial_id is not None:
        own = folder / f"{trial_id}{_SUFFIX}"
        mine = [(own, _OWN_FILE_RANK)] if own.is_file() else []
        files = mine or [f for f in files if f[1] < _OWN_FILE_RANK]
    return _read_files(files, folder, table, trial_id, columns)


def _read_files(
    files: list[tuple[Path, int]],
    folder: Path,
    table: str,
    trial_id: str | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table | None:
    """The rows of ``files``, one copy per trial: the copy of the highest-ranked file. A file
    whose column has another type than in the other files is named and left out. Each file is
    opened once: its schema, for that comparison, comes with its rows."""
    opened = {path: _schema_and_rows(path, table, columns) for path, _ in files}
    odd = _odd_files(
        {path: schema for path, (schema, _, _) in opened.items() if schema is not None}
    )
    parts = []
    for path, rank in files:
        _, data, problem = opened[path]
        if path in odd or problem is not None:  # named on stderr, left as it is
            _say_skipped(path, odd.get(path, problem))
            continue
        if trial_id is not None:
            data = data.filter(pc.equal(data["trial_id"], trial_id))
        parts.append(data.append_column("__rank", pa.array([rank] * data.num_rows, pa.int64())))
    if not parts:
        return None
    merged = _concat(parts, folder)
    if len(parts) > 1:  # a row in two files (a compaction interrupted, a trial rewritten since)
        best = pc.equal(merged["__rank"], _max_rank_per_trial(merged))
        merged = merged.filter(best)
    return merged.drop_columns("__rank")


def _odd_files(schemas: Mapping[Path, pa.Schema]) -> dict[Path, str]:
    """Files whose column types disagree with the rest of the folder's (the type most files give
    a column wins; a file that is all null there agrees with any): path -> the problem. The
    config columns' types are those of the trials' own task, which the reader does not import."""
    if len(schemas) < 2:
        return {}

    def counted(column: pa.Field) -> bool:  # JSON-text lists of old files read as lists
        old_list = column.name in _JSON_LISTS and _normal(column.type) == pa.string()
        return column.type != pa.null() and not old_list

    votes: dict[str, dict[pa.DataType, int]] = {}
    for schema in schemas.values():
        for column in schema:
            if counted(column):
                counts = votes.setdefault(column.name, {})
                counts[_normal(column.type)] = counts.get(_normal(column.type), 0) + 1
    winner = {name: max(counts, key=counts.get) for name, counts in votes.items()}
    odd = {}
    for path, schema in schemas.items():
        for column in schema:
            expected = winner.get(column.name)
            if counted(column) and expected is not None and _normal(column.type) != expected:
                odd[path] = f"column {column.name!r} is {column.type}, not {expected} as elsewhere"
                break
    return odd


def _max_rank_per_trial(data: pa.Table) -> pa.Array:
    """For each row, the highest rank any row of its trial has."""
    top = data.group_by("trial_id").aggregate([("__rank", "max")])
    lookup = dict(zip(top["trial_id"].to_pylist(), top["__rank_max"].to_pylist(), strict=True))
    return pa.array([lookup[t] for t in data["trial_id"].to_pylist()], pa.int64())


def _concat(parts: list[pa.Table], where: Path) -> pa.Table:
    try:
        return pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise StoreError(f"{where}: files disagree on a column's type: {error}") from None


def _column_group(name: str) -> int:
    return next((i for i, p in enumerate(_GROUPS, 1) if name.startswith(p)), 0)


def _checked_file(
    path: Path, table: str, columns: Sequence[str] | None = None
) -> tuple[pa.Table | None, str | None]:
    """The file's rows (old list columns converted; only `columns` and the keys when given), or
    None and why it is not a file this version can read: truncated, empty, foreign or newer. A
    file gone meanwhile (compacted) is not a bad file: FileNotFoundError goes to the caller,
    which lists the folder again."""
    _, data, problem = _schema_and_rows(path, table, columns)
    return data, problem


def _schema_and_rows(
    path: Path, table: str, columns: Sequence[str] | None = None
) -> tuple[pa.Schema | None, pa.Table | None, str | None]:
    """`_checked_file`'s answer after the file's schema (None when not even that is readable)."""
    schema = None
    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
        names = schema.names
        if columns is not None:
            keys = {"schema_version", "trial_id"} | ({"epoch"} if table == EPOCHS else {"status"})
            names = [n for n in names if n in keys or _wanted(n, columns)]
        data = parquet.read(columns=names)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as error:
        return schema, None, f"not a readable Parquet file ({_one_line(error)})"
    problem = _schema_problem(data, schema, table, path.name.removesuffix(_SUFFIX))
    if problem is None:
        if columns is not None:  # the checks' own columns go again unless they were asked for
            data = data.select([n for n in data.column_names if n in _KEYS or _wanted(n, columns)])
        try:
            return schema, _lists_from_json(data), None
        except (ValueError, TypeError):
            problem = "a list column holds text that is not a JSON list"
    return schema, None, problem


def _wanted(name: str, columns: Sequence[str]) -> bool:
    return any(name == c or (c.endswith(".") and name.startswith(c)) for c in columns)


def _schema_problem(data: pa.Table, schema: pa.Schema, table: str, trial_id: str) -> str | None:
    """What makes `data` not a file of this store's `table`, or None: the same types as written."""
    base = _BASE_COLUMNS if table == TRIALS else _EPOCH_COLUMNS
    if "schema_version" not in data.column_names:
        return "no schema_version column; not a file of the tune-lowmem store"
    newest = pc.max(data["schema_version"]).as_py() if data.num_rows else None
    if newest is not None and newest > SCHEMA_VERSION:
        return (
            f"schema_version {newest} is newer than this tune-lowmem reads ({SCHEMA_VERSION});"
            " upgrade tune-lowmem to read it"
        )
    required = ("trial_id", "status") if table == TRIALS else ("trial_id", "epoch")
    missing = [name for name in required if name not in data.column_names]
    if missing:
        return f"lacks the column {missing[0]}; not a {table} file of the store"
    if not _COMPACTED.fullmatch(
        f"{trial_id}{_SUFFIX}"
    ):  # a trial's own file holds that trial alone
        if table == TRIALS and data.num_rows != 1:
            return f"has {data.num_rows} rows; a trials file holds one"
        if set(data["trial_id"].to_pylist()) - {trial_id}:
            return f"holds rows of another trial than {trial_id}"
    if table == TRIALS:
        unknown = set(data["status"].to_pylist()) - set(STATUSES)
        if unknown:
            return f"status {min(unknown)!r} is not one of {', '.join(STATUSES)}"
    for column in schema:  # the whole file's columns, also those not read
        allowed = _allowed_types(column.name, base)
        if allowed is None:
            return f"column {column.name!r} is not a column of the store's {table}"
        kind = _normal(column.type)
        if kind not in allowed and not (_LIST in allowed and pa.types.is_list(kind)):
            return f"column {column.name!r} is {column.type}, not {allowed[0]}"
    return None


# ---- compacting ----------------------------------------------------------------------------


def compact(root: str | Path, sweep: str | None = None, force: bool = False) -> int:
    """Merge each sweep's files (trials and epochs) into one, once it has `COMPACT_MIN_FILES`
    one-trial files (any two files with ``force``); the number of files merged away.

    Safe while a sweep writes: a trial file written after the merge was read stays (its copy
    wins over the merged one), and a second compaction at once waits for none: it skips.
    A store that cannot be written (read-only copy) is left as it is.
    """
    sweeps = [check_name(sweep, "sweep")] if sweep is not None else list_sweeps(root)
    merged = 0
    for name in sweeps:
        for table in (TRIALS, EPOCHS):
            folder = Path(root) / table / f"sweep={name}"
            small = len(_parquet_files(folder))
            if small >= COMPACT_MIN_FILES or (force and len(_data_files(folder)) > 1):
                merged += _compact_folder(folder, table)
    return merged


def _compact_folder(folder: Path, table: str) -> int:
    try:
        lock = open(folder / ".compact.lock", "a")  # noqa: SIM115 - held until the end
    except OSError:  # read-only
        return 0
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another compaction of this folder is running
            return 0
        small = [(path, _OWN_FILE_RANK) for path in _parquet_files(folder)]
        merged = 0
        for start in range(0, len(small), COMPACT_CHUNK):  # bounded memory: a chunk at a time
            merged += _merge(small[start : start + COMPACT_CHUNK], folder, table)
        compacted = _data_files(folder)
        return merged + (_merge(compacted, folder, table) if len(compacted) > 1 else 0)


def _merge(files: list[tuple[Path, int]], folder: Path, table: str) -> int:
    """Write ``files``' rows as one new compacted file (newer than any before it, so its copy
    of a row wins), then remove each of them that no writer replaced meanwhile."""
    seen = {path: _identity(path) for path, _ in files}
    data = _read_files(files, folder, table)
    if data is None:
        return 0
    keys = [("trial_id", "ascending")] + ([("epoch", "ascending")] if table == EPOCHS else [])
    name = f"+compacted-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}{_SUFFIX}"
    _atomic_write(folder / name, functools.partial(pq.write_table, data.sort_by(keys)))
    for path, _ in files:
        _remove_if_unchanged(path, seen[path])
    return len(files)


def _identity(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


def _remove_if_unchanged(path: Path, identity: tuple[int, int, int]) -> None:
    """Remove a merged file, unless a writer replaced it after it was read: move it aside first
    (atomic), and put it back when what was moved is not what was merged."""
    aside = path.with_name(f".{path.name}.merged-{uuid.uuid4().hex}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if _identity(aside) != identity:
        with contextlib.suppress(FileExistsError):  # an even newer copy is already back
            os.link(aside, path)
    aside.unlink()


# Tuple fields of the first version's built-in tasks, which it stored as JSON text.
_JSON_LISTS = (
    "config.schedule.milestones",
    "config.schedule.betas",
    "config.model.encoder_kernels",
    "config.model.decoder_kernels",
)


def _normal(kind: pa.DataType) -> pa.DataType:
    """The type as this store writes it, for the same data written by other tools (pandas
    writes large strings and lists, and timestamps in other units)."""
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_list(kind):
        return pa.list_(kind.value_type)
    if pa.types.is_timestamp(kind):
        return pa.timestamp("us", tz="UTC")
    return kind


def _allowed_types(name: str, base: Mapping[str, pa.DataType]):
    """The types a column may have (first: the one written now); None: not a column of ours."""
    numbers = (pa.float64(), pa.int64(), pa.null())
    if name in base:
        return (base[name], pa.null())
    if name.startswith("metric."):
        return numbers
    if base is _EPOCH_COLUMNS:
        return None
    if name.startswith("memory."):
        return (MEMORY_COLUMNS.get(name.removeprefix("memory."), pa.float64()), *numbers)
    if name.startswith("version."):
        return (pa.string(), pa.null())
    if name.startswith("config."):  # the task's own types: checked against the other files
        return (pa.bool_(), pa.int64(), pa.float64(), pa.string(), pa.null(), _LIST)
    return None


def _lists_from_json(data: pa.Table) -> pa.Table:
    """Stores of the first version held tuple fields as JSON text: read as lists."""
    for name in _JSON_LISTS:
        if name in data.column_names and data[name].type == pa.string():
            values = [None if v is None else json.loads(v) for v in data[name].to_pylist()]
            index = data.column_names.index(name)
            data = data.set_column(index, name, pa.array(values))
    return data


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


_SAID: set[tuple[str, str]] = set()


def forget_reported_files() -> None:
    """A new command (the CLI calls this) names each bad file again, once."""
    _SAID.clear()


def _say_skipped(path: Path, problem: str) -> None:
    """One line on stderr per bad file and command: the command goes on without it."""
    if (str(path), problem) not in _SAID:
        _SAID.add((str(path), problem))
        print(f"tune-lowmem: skipped {path}: {problem}; the file is left as it is", file=sys.stderr)


def _quarantine_if_bad(root: str | Path, path: Path, table: str) -> None:
    """Before a trial's file is written again: an unreadable old copy is moved aside to
    ``DIR/quarantine/<table>/sweep=<name>/`` (named with the time), never overwritten."""
    if not path.is_file() or _checked_file(path, table)[1] is None:
        return
    stamp = datetime.now().astimezone().strftime("%Y%m%dT%H%M%S%f")
    target = Path(root) / QUARANTINE / table / path.parent.name / f"{path.name}.{stamp}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, target)
    print(f"tune-lowmem: moved unreadable {path} to {target}", file=sys.stderr)


def config_values(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row's config as flat dotted keys to plain values (lists as lists, no numpy
    scalars, null as None): what `TrialConfig.from_dict` reads back, known
    without importing the row's task (and so without torch)."""
    values = {}
    for column, value in row.items():
        if not column.startswith("config."):
            continue
        if isinstance(value, str) and column in _JSON_LISTS:  # a store older than list columns
            value = json.loads(value)
        if isinstance(value, np.ndarray):
            value = value.tolist()
        key = column.removeprefix("config.")
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            value = later_fields().get(key)  # a field added since: what the row trained with
        elif isinstance(value, np.generic):
            value = value.item()
        values[key] = value
    return values


def trial_config(row: Mapping[str, Any]) -> TrialConfig:
    """The `TrialConfig` of one stored trial row (a `read_trials` row), ready to train or profile."""
    flat: dict[str, Any] = {}
    for key, kind in config_kinds(row["config.task"]).items():
        value = row.get(f"config.{key}")
        if isinstance(value, str) and kind.is_list:  # a row of a store older than list columns
            value = json.loads(value)
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            later = later_fields()
            if key in later:  # added since the row was written: what it trained with
                flat[key] = later[key]
            continue  # unset: the field's default
        elif kind.is_list:
            flat[key] = [kind.scalar(v) for v in value]
        else:
            flat[key] = kind.scalar(value)  # pandas may hand back numpy scalars
    return TrialConfig.from_dict(flat)
