"""The sweep's Optuna study in a journal file: every point asked (with its params), and told.

Optuna's `JournalFileBackend` appends one JSON line per operation, under a lock, with fsync. A
write cut short (a killed driver, a full disk) leaves a torn last line: Optuna skips it on read,
but the next append would glue onto it and make every later line unreadable. So the driver opens
the journal through `open_journal`, which first cuts such a tail off (keeping its bytes beside
the journal, in ``optuna.journal.torn-<UTC time>``, said in one line) and clears a lock file that
a stopped driver left; an append that fails raises `store.WriteFailed`, naming the file.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from ..progress import say
from ..store import WriteFailed
from .place import sweep_folder

JOURNAL = "optuna.journal"
LOCK_SUFFIX = ".lock"  # what Optuna's file locks create beside the journal
TORN_SUFFIX = ".torn-"


def _checked_backend():
    """Optuna's file backend whose failed appends name the file (built on first use: optuna is
    imported by the processes that need it only)."""
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    class CheckedJournal(JournalFileBackend):
        def __init__(self, path: Path):
            super().__init__(str(path), lock_obj=JournalFileOpenLock(str(path)))
            self.path = path

        def append_logs(self, logs) -> None:
            try:
                super().append_logs(logs)
            except OSError as error:
                raise WriteFailed(self.path, error) from error

    return CheckedJournal


def storage(path: str | Path):
    """An Optuna storage on the journal at `path` (created if missing)."""
    from optuna.storages import JournalStorage

    return JournalStorage(_checked_backend()(Path(path)))


def open_journal(path: Path):
    """The storage the driver writes: a torn tail repaired and a stale lock cleared first (only
    the sweep's driver writes its journal, and there is one driver per sweep)."""
    repair(path)
    lock = path.with_name(path.name + LOCK_SUFFIX)
    if lock.is_symlink() or lock.exists():
        lock.unlink()
        say(f"{lock}: removed the lock a stopped driver left")
    return storage(path)


def repair(path: Path) -> Path | None:
    """Cut a torn last line off the journal, keeping its bytes in a file beside it; return that
    file (None: nothing torn). Torn: bytes after the last newline, or a last line not JSON."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep == len(data) and data:
        start = data.rfind(b"\n", 0, len(data) - 1) + 1
        try:
            json.loads(data[start:])
        except ValueError:
            keep = start
    if keep == len(data):
        return None
    kept = path.with_name(f"{path.name}{TORN_SUFFIX}{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}")
    try:
        with open(kept, "wb") as handle:  # the torn bytes first: nothing is lost if this fails
            handle.write(data[keep:])
            os.fsync(handle.fileno())
        with open(path, "r+b") as handle:
            handle.truncate(keep)
            os.fsync(handle.fileno())
    except OSError as error:
        raise WriteFailed(Path(error.filename or kept), error) from error
    say(
        f"{path}: cut a torn last line ({len(data) - keep} bytes, from an interrupted write) "
        f"and kept it in {kept.name}; the sweep goes on"
    )
    return kept


def sweep_study(root: str | Path, sweep: str):
    """The sweep's Optuna study, read from its journal: every point asked, and what it was told."""
    import optuna

    path = sweep_folder(root, sweep) / JOURNAL
    return optuna.load_study(study_name=sweep, storage=storage(path))
