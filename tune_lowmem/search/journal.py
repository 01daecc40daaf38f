"""The sweep's Optuna study in a journal file: every point asked (with its params), and told.

Optuna's `JournalFileBackend` appends one JSON line per operation, under a lock, with fsync. A
write cut short (a killed driver, a full disk) leaves a torn last line: Optuna skips it on read,
but the next append would glue onto it and make every later line unreadable. So the driver opens
the journal through `open_journal`, which first cuts such a tail off (keeping its bytes beside
the journal, in ``optuna.journal.torn-<UTC time>``, said in one line) and clears a lock file that
a stopped driver left; an append that fails raises `store.WriteFailed`, naming the file.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

from ..store import WriteFailed
from .place import sweep_folder
from .progress import say

JOURNAL = "optuna.journal"
LOCK_SUFFIX = ".lock"  # what Optuna's file locks create beside the journal
TORN_SUFFIX = ".torn-"


class CheckedJournal(JournalFileBackend):
    """Optuna's journal file, locked by a plain file (a symbolic link that a copied or moved
    folder carries would point at the old place), whose failed appends name the file, and which
    can hold a group of appends back to write them at once (`one_write`)."""

    def __init__(self, path: Path):
        super().__init__(str(path), lock_obj=JournalFileOpenLock(str(path)))
        self.path = path
        self.read = 0  # lines of the file read here: where Optuna's reader knows the offset
        self.held: list[dict[str, Any]] | None = None  # appends `one_write` holds back

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        """The file's logs from `log_number_from`, then those held back (the storage reads what
        it wrote at once). Read from the last line read here: Optuna's reader seeks only to a
        line it has read, and held logs, once written, it has not, so asking for the log after
        them would read the whole file again at every ask (a cost growing with the sweep)."""
        start = min(log_number_from, self.read)
        for number, log in enumerate(super().read_logs(start), start=start):
            self.read = number + 1
            if number >= log_number_from:
                yield log
        if self.held:
            yield from self.held[max(0, log_number_from - self.read) :]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        if self.held is not None:
            self.held.extend(logs)
            return
        try:
            super().append_logs(logs)
        except OSError as error:
            raise WriteFailed(self.path, error) from error

    @contextlib.contextmanager
    def one_write(self) -> Iterator[None]:
        """The appends made inside, written at its end in one write: a driver killed meanwhile
        leaves none of them (a point half asked, its params cut short, would count as asked)."""
        self.held = []
        try:
            yield
        finally:
            held, self.held = self.held, None
        self.append_logs(held)


def storage(path: str | Path) -> JournalStorage:
    """An Optuna storage on the journal at `path` (created if missing)."""
    return JournalStorage(CheckedJournal(Path(path)))


def open_journal(path: Path) -> CheckedJournal:
    """The journal the driver writes: a torn tail repaired and a stale lock cleared first (only
    the sweep's driver writes its journal, and there is one driver per sweep)."""
    repair(path)
    lock = path.with_name(path.name + LOCK_SUFFIX)
    if lock.is_symlink() or lock.exists():
        lock.unlink()
        say(f"{lock}: removed the lock a stopped driver left")
    return CheckedJournal(path)


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
