"""The Parquet store: one file per trial, so every result is in it exactly once.

Layout under a store root ``DIR``::

    DIR/trials/sweep=<name>/<trial_id>.parquet   one row: the trial's config, final metrics, memory
    DIR/epochs/sweep=<name>/<trial_id>.parquet   one row per epoch of that trial

Both tables are Hive-partitioned Parquet datasets that need nothing of this project to read::

    pandas.read_parquet("DIR/trials")
    pyarrow.dataset.dataset("DIR/trials", partitioning="hive")
    duckdb: SELECT * FROM read_parquet('DIR/trials/*/*.parquet', hive_partitioning=true,
                                       union_by_name=true)

``sweep`` is the partition key and lives in the path only (a copy inside the files would clash
with it in pyarrow). Config columns have the types of the `TrialConfig` fields, so every trial
of one task has the same config columns whatever its values. Metric columns follow what each
trial reported; when they differ between trials, pandas and pyarrow take the first file's
columns, so read with `read_trials` (or DuckDB's ``union_by_name``) to get the union.

Concurrent trials never write the same file; a trial written again replaces its own file
atomically (a hidden temporary file in the same folder, fsync, `os.replace`), so a reader sees
the old row or the new one, never half a file, and a crash leaves at most a hidden temporary
file that every reader skips.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import types
import typing
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .config import TASKS, ConfigError, TrialConfig

SCHEMA_VERSION = 1
STATUSES = ("completed", "failed", "infeasible", "pruned")
MEMORY_COLUMNS: dict[str, pa.DataType] = {
    **{
        f"{kind}_{part}_mb": pa.float64()
        for kind in ("predicted", "measured")
        for part in ("model", "optimizer", "activation", "total")
    },
    "flops_per_step": pa.int64(),
}
VERSIONED_PACKAGES = {
    "tune_lowmem": "tune-lowmem",
    "torch": "torch",
    "ray": "ray",
    "optuna": "optuna",
}
TRIALS, EPOCHS = "trials", "epochs"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_NAME_RULE = "letters, digits, '-', '_' and '.', starting with a letter or digit, at most 200"
_SUFFIX = ".parquet"
_GROUPS = ("config.", "metric.", "memory.", "version.")  # column order of what the readers return
_KINDS = {  # column type -> (what to call it, the Python values it takes)
    pa.bool_(): ("true or false", (bool, np.bool_)),
    pa.int64(): ("an integer", (int, np.integer)),
    pa.string(): ("a string", (str,)),
}
_ARROW_TYPES = {
    bool: pa.bool_(),
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    tuple: pa.string(),
}


class StoreError(ValueError):
    """The store holds something this version cannot read (a newer schema, clashing types)."""


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
        _atomic_write(_file(root, EPOCHS, record.sweep, record.trial_id), epoch_table)
    path = _file(root, TRIALS, record.sweep, record.trial_id)
    _atomic_write(path, trial)
    return path


def _trial_table(record: TrialRecord) -> pa.Table:
    config = _config_columns(record.config)
    started, finished = record.started_at, record.finished_at
    wall = (finished - started).total_seconds() if started and finished else None
    columns: dict[str, pa.Array] = {
        "schema_version": pa.array([SCHEMA_VERSION], pa.int64()),
        "trial_id": pa.array([record.trial_id], pa.string()),
        "status": pa.array([record.status], pa.string()),
        "failure_reason": pa.array([record.failure_reason], pa.string()),
        "seed_group": pa.array([_seed_group(config)], pa.string()),
        "started_at": pa.array([started], pa.timestamp("us", tz="UTC")),
        "finished_at": pa.array([finished], pa.timestamp("us", tz="UTC")),
        "wall_seconds": pa.array([wall], pa.float64()),
        "epochs_completed": pa.array([record.epochs_completed], pa.int64()),
        "node_id": pa.array([record.node_id], pa.string()),
        "sampler": pa.array([record.sampler], pa.string()),
        "point": pa.array([record.point], pa.int64()),
    }
    columns.update((f"config.{key}", array) for key, array in config.items())
    for name in sorted(record.metrics):
        columns[f"metric.{check_name(name, 'metrics')}"] = _floats(
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
    columns: dict[str, pa.Array] = {
        "schema_version": pa.array([SCHEMA_VERSION] * len(epochs), pa.int64()),
        "trial_id": pa.array([trial_id] * len(epochs), pa.string()),
        "epoch": pa.array(numbers, pa.int64()),
    }
    for name in names:
        check_name(name, "epochs")
        columns[f"metric.{name}"] = _floats([row.get(name) for row in epochs], f"epochs.{name}")
    return pa.table(columns)


def _config_columns(config: Mapping[str, Any]) -> dict[str, pa.Array]:
    """Every config field of the trial's task as a typed one-value column (null when absent)."""
    task = config.get("task", TrialConfig.task)
    if task not in TASKS:
        raise ConfigError("config.task", f"{task!r} is not allowed; allowed: {', '.join(TASKS)}")
    fields = config_fields(task)
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise ConfigError(f"config.{unknown[0]}", f"not a TrialConfig field of task {task}")
    columns = {}
    for key, base in fields.items():
        value = config.get(key)
        if base is tuple and value is not None:
            if not isinstance(value, (list, tuple)):
                raise ConfigError(f"config.{key}", f"{value!r} is not allowed; a list is required")
            value = json.dumps(list(value))  # JSON text keeps the column scalar
        columns[key] = _column(value, _ARROW_TYPES[base], f"config.{key}")
    return columns


@functools.cache
def config_fields(task: str) -> dict[str, type]:
    """Dotted config key -> its Python type (bool, int, float, str, tuple), from the annotations."""
    return dict(_field_types(TrialConfig.from_dict({"task": task}), ""))


def _field_types(section: Any, prefix: str) -> Iterable[tuple[str, type]]:
    hints = typing.get_type_hints(type(section))
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            yield from _field_types(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", _base_type(hints[f.name])


def _base_type(hint: Any) -> type:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return typing.get_origin(hint) or hint


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


def _seed_group(config: Mapping[str, pa.Array]) -> str:
    """The same point with another seed gets the same id: a hash of the typed config but seed."""
    point = {key: array[0].as_py() for key, array in config.items() if key != "seed"}
    return hashlib.sha256(json.dumps(point, sort_keys=True).encode()).hexdigest()[:16]


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


def _atomic_write(path: Path, table: pa.Table) -> None:
    """Write a hidden temporary file beside ``path``, fsync it, rename it onto ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")  # leading dot: readers skip it
    try:
        with open(tmp, "wb") as handle:
            pq.write_table(table, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
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
    return sorted(
        n for n in names if _NAME.fullmatch(n) and any(_parquet_files(folder / f"sweep={n}"))
    )


def trial_ids(root: str | Path, sweep: str) -> list[str]:
    """The trial ids stored for one sweep, sorted."""
    folder = Path(root) / TRIALS / f"sweep={check_name(sweep, 'sweep')}"
    return sorted(path.name.removesuffix(_SUFFIX) for path in _parquet_files(folder))


def read_trials(root: str | Path, sweep: str | None = None) -> pd.DataFrame:
    """All stored trials (of one sweep, or of all), one row each, columns the union over files."""
    return _read(root, TRIALS, sweep, None)


def read_epochs(
    root: str | Path, sweep: str | None = None, trial_id: str | None = None
) -> pd.DataFrame:
    """The per-epoch rows, of one sweep and/or one trial, sorted by sweep, trial and epoch."""
    return _read(root, EPOCHS, sweep, trial_id)


def _parquet_files(folder: Path) -> Iterable[Path]:
    return (p for p in folder.glob(f"*{_SUFFIX}") if _NAME.fullmatch(p.name.removesuffix(_SUFFIX)))


def _read(root: str | Path, table: str, sweep: str | None, trial_id: str | None) -> pd.DataFrame:
    sweeps = [check_name(sweep, "sweep")] if sweep is not None else _sweeps(root, table)
    if trial_id is not None:
        check_name(trial_id, "trial_id")
    parts = []
    for name in sweeps:
        folder = Path(root) / table / f"sweep={name}"
        paths = [folder / f"{trial_id}{_SUFFIX}"] if trial_id else sorted(_parquet_files(folder))
        for path in (p for p in paths if p.is_file()):
            data = _read_file(path)
            parts.append(data.add_column(0, "sweep", pa.array([name] * data.num_rows, pa.string())))
    keys = ["sweep", "trial_id"] + (["epoch"] if table == EPOCHS else [])
    if not parts:
        return pd.DataFrame(columns=[*keys, "schema_version"])
    try:
        merged = pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise StoreError(
            f"{Path(root) / table}: files disagree on a column's type: {error}"
        ) from None
    frame = merged.to_pandas(
        types_mapper={pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}.get
    )
    frame = frame[sorted(frame.columns, key=_column_group)]  # stable: base, config, metric, ...
    return frame.sort_values(keys, kind="stable", ignore_index=True)


def _column_group(name: str) -> int:
    return next((i for i, p in enumerate(_GROUPS, 1) if name.startswith(p)), 0)


def _read_file(path: Path) -> pa.Table:
    data = pq.ParquetFile(path).read()
    if "schema_version" not in data.column_names:
        raise StoreError(f"{path}: no schema_version column; not a file of the tune-lowmem store")
    newest = pc.max(data["schema_version"]).as_py()
    if newest is not None and newest > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: schema_version {newest} is newer than this tune-lowmem reads "
            f"({SCHEMA_VERSION}); upgrade tune-lowmem to read this store"
        )
    return data


# Config fields added after stores were first written: what a row without them trained with.
ADDED_FIELDS = {"sparsity.schedule_units": "absolute", "precision_update": "nearest"}


def trial_config(row: Mapping[str, Any]) -> TrialConfig:
    """The `TrialConfig` of one stored trial row (a `read_trials` row), ready to train or profile."""
    flat: dict[str, Any] = {}
    for key, base in config_fields(row["config.task"]).items():
        value = row.get(f"config.{key}")
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            flat[key] = ADDED_FIELDS.get(key)
        elif base is tuple:
            flat[key] = json.loads(value)
        else:
            flat[key] = base(value)  # pandas may hand back numpy scalars
    return TrialConfig.from_dict(flat)
