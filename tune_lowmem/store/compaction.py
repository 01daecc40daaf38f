"""Compaction: merging a sweep's one-trial files into ``+compacted-<time>-<id>.parquet`` files as
the sweep goes, the way table formats compact small files: the merged file is written atomically
first, and only then are the files it holds removed (each unless a writer replaced it meanwhile)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq

from .read import (
    _compacted_files,
    _data_files,
    _identity,
    _parquet_files,
    _read_files,
    list_sweeps,
)
from .records import (
    _OWN_FILE_RANK,
    _SUFFIX,
    EPOCHS,
    TRIALS,
    check_name,
)
from .write import (
    _atomic_write,
)

COMPACT_MIN_FILES = 64  # small files before `compact` (unforced) merges a sweep


COMPACT_CHUNK = 500  # small files merged at once: what bounds compaction's memory


COMPACT_MAX_PARTS = 8  # compacted files a sweep keeps before `compact` (unforced) merges them


def compact(root: str | Path, sweep: str | None = None, force: bool = False) -> int:
    """Merge each sweep's one-trial files (trials and epochs) into a compacted file once it has
    `COMPACT_MIN_FILES` of them, and its compacted files into one once there are more than
    `COMPACT_MAX_PARTS`; with ``force``, any two files into one. The number of files merged away.

    The driver calls it after every trial, so a sweep's folder holds at most about
    `COMPACT_MIN_FILES` + `COMPACT_MAX_PARTS` files at any moment, and a merge rewrites all of a
    sweep's rows only once every `COMPACT_MIN_FILES` x `COMPACT_MAX_PARTS` trials.

    Safe while a sweep writes: a trial file written after the merge was read stays (its copy
    wins over the merged one), and a second compaction at once waits for none: it skips.
    A store that cannot be written (read-only copy) is left as it is.
    """
    sweeps = [check_name(sweep, "sweep")] if sweep is not None else list_sweeps(root)
    merged = 0
    for name in sweeps:
        for table in (TRIALS, EPOCHS):
            folder = Path(root) / table / f"sweep={name}"
            small, parts = len(_parquet_files(folder)), len(_compacted_files(folder))
            if force and small + parts > 1:
                merged += _compact_folder(folder, table, max_parts=1)
            elif small >= COMPACT_MIN_FILES or parts > COMPACT_MAX_PARTS:
                merged += _compact_folder(folder, table, max_parts=COMPACT_MAX_PARTS)
    return merged


def _compact_folder(folder: Path, table: str, max_parts: int) -> int:
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
        return merged + (_merge(compacted, folder, table) if len(compacted) > max_parts else 0)


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
