"""What a store row is: its columns and their types, the record a trial hands the store (built
from what the trial reported by `SweepRows.row`), the names that become file names, and the
store's errors. How older stores read is `compat`'s."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..config import ConfigError
from ..outcome import COLUMNS, MEMORY, TIME, Direction, column, split

# 2: time columns (`time.*`), and `memory.measured_run_peak_mb` renamed (`compat.renamed_columns`)
SCHEMA_VERSION = 2


STATUSES = ("completed", "failed", "infeasible", "stopped")  # stopped: by early stopping


# Every outcome column (`outcome.COLUMNS`: memory in MB and a step's FLOPs, time in seconds)
# with its type; a column newer than a store's older rows reads empty there.
OUTCOME_TYPES: dict[str, pa.DataType] = {
    name: pa.int64() if found.integer else pa.float64() for name, found in COLUMNS.items()
}
# A record's memory and time, keyed as `TrialRecord` takes them: without the group's prefix.
MEMORY_COLUMNS = {
    k.removeprefix(MEMORY): t for k, t in OUTCOME_TYPES.items() if k.startswith(MEMORY)
}
TIME_COLUMNS = {k.removeprefix(TIME): t for k, t in OUTCOME_TYPES.items() if k.startswith(TIME)}


VERSIONED_PACKAGES = {
    "tune_lowmem": "tune-lowmem",
    "torch": "torch",
    "ray": "ray",
    "optuna": "optuna",
    "sacrebleu": "sacrebleu",  # completes the signature of metric.*_sacrebleu
}


TRIALS, EPOCHS, MODELS = "trials", "epochs", "models"


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


_NAME_RULE = "letters, digits, '-', '_' and '.', starting with a letter or digit, at most 200"


_SUFFIX = ".parquet"


_COMPACTED = re.compile(r"\+compacted-(\d{20})-[0-9a-f]{8}\.parquet")


_OWN_FILE_RANK = 2**62  # a trial's own file outranks every compacted copy of its row


_GROUPS = (
    "config.",
    "metric.",
    MEMORY,
    TIME,
    "version.",
)  # column order of what the readers return


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
    status: str  # one of STATUSES
    config: Mapping[str, Any]  # flat, as `TrialConfig.to_flat()` gives it
    metrics: Mapping[str, float | None] = field(default_factory=dict)  # final values by name
    memory: Mapping[str, float | int | None] = field(default_factory=dict)  # keys of MEMORY_COLUMNS
    time: Mapping[str, float | None] = field(default_factory=dict)  # keys of TIME_COLUMNS
    failure_reason: str | None = None  # required when failed or infeasible
    started_at: datetime | None = None  # timezone-aware
    finished_at: datetime | None = None
    epochs_completed: int = 0
    node_id: str | None = None  # the Ray node that ran it last (None: never placed on one)
    sampler: str | None = None  # the sweep's sampler (a name of `plugins.SAMPLERS`)
    # the number of the Optuna trial that proposed it (None: the sampler did not, as for the
    # sweep's baseline or a trial outside a sweep)
    point: int | None = None
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
        for group, given, known in (
            (MEMORY, self.memory, MEMORY_COLUMNS),
            (TIME, self.time, TIME_COLUMNS),
        ):
            unknown = sorted(set(given) - set(known))
            if unknown:
                raise ConfigError(group + unknown[0], f"unknown part; allowed: {', '.join(known)}")
        for name in ("started_at", "finished_at"):
            moment = getattr(self, name)
            if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
                raise ConfigError(
                    name, f"{moment!r} is not allowed; a timezone-aware datetime is required"
                )
        _check_count("epochs_completed", self.epochs_completed)
        for name, direction in self.objectives.items():
            Direction.of(direction, f"objectives.{name}")
        if self.point is not None:
            _check_count("point", self.point)

    def outcome(self) -> dict[str, float | int | None]:
        """Its memory and time under their columns, every outcome column present."""
        groups = {MEMORY: self.memory, TIME: self.time}
        return {
            name: groups[group].get(name.removeprefix(group))
            for name in OUTCOME_TYPES
            for group in groups
            if name.startswith(group)
        }


@dataclass(frozen=True)
class SweepRows:
    """What every row of one sweep holds beside its trial's own values: the sweep, its Optuna
    sampler and its objectives (reported metric name -> direction). `row` builds a trial's
    record from what the trial reported."""

    sweep: str
    sampler: str | None = None
    objectives: Mapping[str, str] = field(default_factory=dict)

    def row(
        self,
        trial_id: str,
        status: str,
        config: Mapping[str, Any],
        metrics: Mapping[str, Any] | None = None,
        outcome: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> TrialRecord:
        """The record of one trial from what it reported: the metrics that are numbers, and its
        outcome (memory and time, whether in `metrics` or `outcome`, which wins) under their
        columns (`outcome.column`: older names read as today's); `fields` are the rest of
        `TrialRecord`'s (failure_reason, started_at, point, ...)."""
        reported, found = split(metrics or {})
        found.update(outcome or {})
        columns = {column(k): v for k, v in found.items()}
        numbers = {
            k: v
            for k, v in reported.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        return TrialRecord(
            sweep=self.sweep,
            trial_id=trial_id,
            status=status,
            config=config,
            metrics=numbers,
            memory={k.removeprefix(MEMORY): v for k, v in columns.items() if k.startswith(MEMORY)},
            time={k.removeprefix(TIME): v for k, v in columns.items() if k.startswith(TIME)},
            sampler=self.sampler,
            objectives={column(m): d for m, d in self.objectives.items()},  # to choose on
            **fields,
        )


def _check_count(field_name: str, count: Any) -> None:
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ConfigError(field_name, f"{count!r} is not allowed; an integer >= 0 is required")


def check_name(value: Any, field_name: str) -> str:
    """Sweep names and trial ids become file names: only a safe charset gets through."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ConfigError(field_name, f"{value!r} is not allowed; allowed: {_NAME_RULE} characters")
    return value


def _file(root: str | Path, table: str, sweep: str, trial_id: str) -> Path:
    return (
        Path(root)
        / table
        / f"sweep={check_name(sweep, 'sweep')}"
        / f"{check_name(trial_id, 'trial_id')}{_SUFFIX}"
    )


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


_SAID: set[str] = set()


def forget_reported_files() -> None:
    """A new command (the CLI calls this) names each bad file again, once."""
    _SAID.clear()


def note_once(text: str) -> None:
    """One line on stderr, once per command (`forget_reported_files`): the command goes on."""
    if text not in _SAID:
        _SAID.add(text)
        print(f"tune-lowmem: {text}", file=sys.stderr)
