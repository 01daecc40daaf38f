"""Reading the store, tolerant of what it may meet: stores of earlier versions (read by the rules
of `compat`), files of other tools' writing, a file a compaction removes while it is read, and
unreadable or clashing files (named once on stderr and left out). One copy per trial id: its own
file before a compacted one, the newest compacted one before older ones."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..config import TrialConfig, config_kinds
from ..outcome import MEMORY, RENAMED, TIME
from .compat import JSON_LISTS, later_fields, lists_from_json, renamed_columns
from .records import (
    _BASE_COLUMNS,
    _COMPACTED,
    _EPOCH_COLUMNS,
    _GROUPS,
    _KEYS,
    _LIST,
    _NAME,
    _OWN_FILE_RANK,
    _SUFFIX,
    EPOCHS,
    OUTCOME_TYPES,
    SCHEMA_VERSION,
    STATUSES,
    TRIALS,
    StoreError,
    _one_line,
    check_name,
    note_once,
)


def list_sweeps(root: str | Path) -> list[str]:
    """Names of the sweeps that have at least one stored trial."""
    return _sweeps(root, TRIALS)


def _sweeps(root: str | Path, table: str) -> list[str]:
    folder = Path(root) / table
    names = (path.name.removeprefix("sweep=") for path in folder.glob("sweep=*"))
    return sorted(n for n in names if _NAME.fullmatch(n) and _data_files(folder / f"sweep={n}"))


def trial_ids(root: str | Path, sweep: str) -> list[str]:
    """The trial ids stored for one sweep, sorted. Asked once per trial while a sweep runs, so a
    compacted file's ids are read once (`_compacted_ids`), not at every call."""
    folder = Path(root) / TRIALS / f"sweep={check_name(sweep, 'sweep')}"
    while True:  # listed again when a compaction removes a file before it is read
        ids = {path.name.removesuffix(_SUFFIX) for path in _parquet_files(folder)}
        try:
            for path in _compacted_files(folder):
                ids.update(_compacted_ids(str(path), _identity(path)))
        except FileNotFoundError:
            continue
        return sorted(ids)


@functools.lru_cache(maxsize=64)
def _compacted_ids(path: str, identity: tuple[int, int, int]) -> tuple[str, ...]:
    """A compacted file's trial ids; it is never rewritten, so its identity keys the cache."""
    return tuple(pq.read_table(path, columns=["trial_id"])["trial_id"].to_pylist())


def _identity(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


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
        old_list = column.name in JSON_LISTS and _normal(column.type) == pa.string()
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
            names = [n for n in names if n in keys or _wanted(n, columns) or _renamed(n, columns)]
        data = parquet.read(columns=names)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as error:
        return schema, None, f"not a readable Parquet file ({_one_line(error)})"
    problem = _schema_problem(data, schema, table, path.name.removesuffix(_SUFFIX))
    if problem is None:
        data = renamed_columns(data)
        if columns is not None:  # the checks' own columns go again unless they were asked for
            data = data.select([n for n in data.column_names if n in _KEYS or _wanted(n, columns)])
        try:
            return schema, lists_from_json(data), None
        except (ValueError, TypeError):
            problem = "a list column holds text that is not a JSON list"
    return schema, None, problem


def _wanted(name: str, columns: Sequence[str]) -> bool:
    return any(name == c or (c.endswith(".") and name.startswith(c)) for c in columns)


def _renamed(name: str, columns: Sequence[str]) -> bool:
    """An older name of a column asked for: read, to be read under today's (`compat`)."""
    return name in RENAMED and _wanted(RENAMED[name][0], columns)


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
    if name.startswith("metric.") or (name.startswith(TIME) and base is _EPOCH_COLUMNS):
        return numbers
    if base is _EPOCH_COLUMNS:
        return None
    if name.startswith((MEMORY, TIME)):
        return (OUTCOME_TYPES.get(name, pa.float64()), *numbers)
    if name.startswith("version."):
        return (pa.string(), pa.null())
    if name.startswith("config."):  # the task's own types: checked against the other files
        return (pa.bool_(), pa.int64(), pa.float64(), pa.string(), pa.null(), _LIST)
    return None


def _say_skipped(path: Path, problem: str) -> None:
    """A bad file, named once per command: the command goes on without it."""
    note_once(f"skipped {path}: {problem}; the file is left as it is")


def config_values(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row's config as flat dotted keys to plain values (lists as lists, no numpy
    scalars, null as None): what `TrialConfig.from_dict` reads back, known
    without importing the row's task (and so without torch)."""
    values = {}
    later = later_fields()
    for column, value in row.items():
        if not column.startswith("config."):
            continue
        if isinstance(value, str) and column in JSON_LISTS:  # a store older than list columns
            value = json.loads(value)
        if isinstance(value, np.ndarray):
            value = value.tolist()
        key = column.removeprefix("config.")
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            value = later.get(key)  # a field added since: what the row trained with
        elif isinstance(value, np.generic):
            value = value.item()
        values[key] = value
    return values


def trial_config(row: Mapping[str, Any]) -> TrialConfig:
    """The `TrialConfig` of one stored trial row (a `read_trials` row), ready to train or profile."""
    flat: dict[str, Any] = {}
    later = later_fields()
    for key, kind in config_kinds(row["config.task"]).items():
        value = row.get(f"config.{key}")
        if isinstance(value, str) and kind.is_list:  # a row of a store older than list columns
            value = json.loads(value)
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            if key in later:  # added since the row was written: what it trained with
                flat[key] = later[key]
            continue  # unset: the field's default
        elif kind.is_list:
            flat[key] = [kind.scalar(v) for v in value]
        else:
            flat[key] = kind.scalar(value)  # pandas may hand back numpy scalars
    return TrialConfig.from_dict(flat)
