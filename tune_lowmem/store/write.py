"""Writing the store: one trial's row (and epochs, and final weights) as its own file, replaced
atomically (a hidden temporary file in the same folder, fsync, `os.replace`), so a reader sees the
old row or the new one, never half a file; values are checked against the columns' types first."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..config import ConfigError, TrialConfig, config_kinds
from ..outcome import is_outcome
from ..schema import Kind, scalar_fits
from . import records
from .compat import first_version_point
from .read import _checked_file
from .records import (
    _BASE_COLUMNS,
    _EPOCH_COLUMNS,
    _KINDS,
    TrialRecord,
    WriteFailed,
    _file,
    check_name,
)


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
        epochs_path = _file(root, records.EPOCHS, record.sweep, record.trial_id)
        _quarantine_if_bad(root, epochs_path, records.EPOCHS)
        _atomic_write(epochs_path, functools.partial(pq.write_table, epoch_table))
    path = _file(root, records.TRIALS, record.sweep, record.trial_id)
    _quarantine_if_bad(root, path, records.TRIALS)
    _atomic_write(path, functools.partial(pq.write_table, trial))
    return path


def model_file(root: str | Path, sweep: str, trial_id: str) -> Path:
    """Where a trial's final weights are (or would be) kept."""
    return _file(root, records.MODELS, sweep, trial_id).with_suffix(".pt")


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
    derived = {
        "schema_version": records.SCHEMA_VERSION,
        "seed_group": _seed_group(config),
        "wall_seconds": wall,
        "objectives": json.dumps(dict(record.objectives)) if record.objectives else None,
    }
    # every other base column is the record's field of its name (a new one: both in `records`)
    columns = {
        name: pa.array([derived[name] if name in derived else getattr(record, name)], kind)
        for name, kind in _BASE_COLUMNS.items()
    }
    columns.update((f"config.{key}", array) for key, array in config.items())
    for name in sorted(record.metrics):
        columns[f"metric.{check_name(name, 'metrics')}"] = _numbers(
            [record.metrics[name]], f"metrics.{name}"
        )
    for name, value in record.outcome().items():
        columns[name] = _column(value, records.OUTCOME_TYPES[name], name)
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
    outcome = [name for name in names if is_outcome(name)]  # an epoch's own time
    unknown = sorted(set(outcome) - set(records.OUTCOME_TYPES))
    if unknown:
        raise ConfigError(f"epochs.{unknown[0]}", "not an outcome column (`outcome.COLUMNS`)")
    given = {
        "schema_version": [records.SCHEMA_VERSION] * len(epochs),
        "trial_id": [trial_id] * len(epochs),
        "epoch": numbers,
    }
    columns = {name: pa.array(given[name], kind) for name, kind in _EPOCH_COLUMNS.items()}
    for name in names:
        values = [row.get(name) for row in epochs]
        if name in outcome:
            columns[name] = _floats(values, f"epochs.{name}")
            continue
        check_name(name, "epochs")
        columns[f"metric.{name}"] = _numbers(values, f"epochs.{name}")
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
    """The same point with another seed gets the same id: a hash of the typed config but seed,
    as the first version hashed it (`compat.first_version_point`), so ids stay the same across
    versions."""
    values = {key: array[0].as_py() for key, array in config.items() if key != "seed"}
    point = first_version_point(values)
    return hashlib.sha256(json.dumps(point, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for column, distribution in records.VERSIONED_PACKAGES.items():
        try:
            versions[column] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            versions[column] = None
    versions["python"] = platform.python_version()
    return versions


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


def _quarantine_if_bad(root: str | Path, path: Path, table: str) -> None:
    """Before a trial's file is written again: an unreadable old copy is moved aside to
    ``DIR/quarantine/<table>/sweep=<name>/`` (named with the time), never overwritten."""
    if not path.is_file() or _checked_file(path, table)[1] is None:
        return
    stamp = datetime.now().astimezone().strftime("%Y%m%dT%H%M%S%f")
    target = Path(root) / records.QUARANTINE / table / path.parent.name / f"{path.name}.{stamp}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, target)
    print(f"tune-lowmem: moved unreadable {path} to {target}", file=sys.stderr)
