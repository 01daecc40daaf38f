"""The outcome vocabulary: what a trial's outcome is called, in one place, so that the search,
the trainable, the store and the analysis name it alike.

- `Direction`: which way an objective is better (its values, "maximize" and "minimize", are what
  every file holds: a space's objectives, a row's ``objectives``);
- the store's column groups (`METRIC`, `MEMORY`, `TIME`) and every outcome column, declared one
  a line with its source (`PREDICTED`: known before training, from the profiler; `MEASURED`:
  known once the trial runs) and its type (`COLUMNS`);
- `column`: the one rule from a name (as a space, a flag, a result or an earlier version names
  it) to its store column;
- the two conversions: memory reports to columns (`memory_columns`), and a stored row back to
  the result its trial reported (`result_from_row`), with what every result holds
  (`trial_result`) and how a result splits into metrics and outcome columns (`split`).

It imports nothing above `validation`, and reads reports and rows through plain mappings and a
protocol, so every layer can import it (the store and the analysis without torch or Ray).
Megabytes are decimal (`MB`): the unit of every ``_mb`` column.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .validation import ConfigError

MB = 10**6  # the paper's WRN-28-2 baseline (batch 100, fp32) is 404.8 MB in it, 386.0 in MiB


class Direction(enum.StrEnum):
    """Which way an objective is better, as Optuna's `StudyDirection`; a member equals its
    value, so a direction read from a file (a plain string) compares equal to it."""

    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"

    @classmethod
    def of(cls, value: Any, field_name: str, short: bool = False) -> Direction:
        """`value` as a direction (with `short`, "max" and "min" too, as flags spell them); a
        `ConfigError` naming `field_name` and the allowed values for anything else."""
        allowed = [*cls, *(d.short for d in cls if short)]
        if value not in allowed:
            raise ConfigError(
                field_name, f"{value!r} is not allowed; allowed: {', '.join(allowed)}"
            )
        return next(d for d in cls if value in (d, d.short))

    @property
    def sign(self) -> float:
        """+1 when larger is better, -1 when smaller is: a value times its sign is a score."""
        return 1.0 if self is Direction.MAXIMIZE else -1.0

    @property
    def short(self) -> str:
        """The flag's spelling: ``max`` or ``min``."""
        return self.value[:3]


MAXIMIZE, MINIMIZE = Direction.MAXIMIZE, Direction.MINIMIZE

# The store's column groups: a task's own metrics, and the outcome's memory and time.
METRIC, MEMORY, TIME = "metric.", "memory.", "time."
PREDICTED, MEASURED = "predicted", "measured"  # an outcome column's source
PARTS = ("model", "optimizer", "activation", "total")  # the paper's parts of a step's memory


@dataclass(frozen=True)
class OutcomeColumn:
    """One outcome column: its name, its source (`PREDICTED` or `MEASURED`) and whether it
    holds a count (int64 in the store) rather than a measure (float64)."""

    name: str
    source: str
    integer: bool = False


COLUMNS: dict[str, OutcomeColumn] = {}  # every outcome column, in the order declared


def _declare(name: str, source: str, integer: bool = False) -> str:
    """Declare an outcome column (one line each, below); returns its name."""
    COLUMNS[name] = OutcomeColumn(name, source, integer)
    return name


# ---- every outcome column, one a line ----------------------------------------------------------
# A training step's memory as the paper counts it (a sparse weight compressed in its layout):
# the profiler's prediction, from shapes before training, and a real step's measurement.
PREDICTED_PARTS = {part: _declare(f"memory.predicted_{part}_mb", PREDICTED) for part in PARTS}
# The run's peak: the most bytes live at once over each training step with its input, the
# techniques' occasional work (a rewiring) and evaluation, workspace included.
PREDICTED_RUN_PEAK = _declare("memory.predicted_run_peak_mb", PREDICTED)
FLOPS = _declare("memory.flops_per_step", PREDICTED, integer=True)  # forward, backward, recompute
MEASURED_PARTS = {part: _declare(f"memory.measured_{part}_mb", MEASURED) for part in PARTS}
# Torch's allocator on a side run at the trial's start: the step that may be the run's peak,
# then one evaluation batch (not the whole run; `memory.allocations.measured_run_peak`).
MEASURED_STEP_EVAL_PEAK = _declare("memory.measured_step_eval_peak_mb", MEASURED)
# Both totals as the step holds them (the parts above count sparse weights as accounted).
PREDICTED_STORED_TOTAL = _declare("memory.predicted_stored_total_mb", PREDICTED)
MEASURED_STORED_TOTAL = _declare("memory.measured_stored_total_mb", MEASURED)
# The prediction as the paper accounts it, sparse weights as CSR whatever their layout.
PAPER_CSR_TOTAL = _declare("memory.paper_csr_total_mb", PREDICTED)
# A CUDA trial's predicted run peak by part (`memory.cuda.CudaPrediction`): of the run peak, the
# allocator's 512-byte blocks beyond the tensors' bytes (rounding), the BLAS workspaces and
# cuDNN's at the peak (empty: not known where it was predicted); beside it, the CUDA context
# and what the allocator reserves for it. Empty in a CPU trial's rows and in older stores.
PREDICTED_CUDA_PARTS = {
    part: _declare(f"memory.predicted_cuda_{part}_mb", PREDICTED)
    for part in ("rounding", "blas", "cudnn", "context", "reserved")
}
# A CUDA trial's peaks as its caching allocator saw them: live tensors, and what it reserved.
CUDA_MAX_ALLOCATED = _declare("memory.cuda_max_allocated_mb", MEASURED)
CUDA_MAX_RESERVED = _declare("memory.cuda_max_reserved_mb", MEASURED)
CUDA_PEAKS = (CUDA_MAX_ALLOCATED, CUDA_MAX_RESERVED)
# Seconds measured on the trial's device (`train.Trainer`): an update at steady state (the
# median of an epoch's updates after its first, those with a technique's occasional work left
# out), an evaluation, an epoch (its updates and evaluation); a trial's row holds the median
# over its epochs, each epoch's row its own.
# Seconds predicted before training for the trial's device (`timing.predict_time`: its dry run
# through the device's probed kernel costs): an update, an evaluation, an epoch.
PREDICTED_UPDATE_S = _declare("time.predicted_update_s", PREDICTED)
PREDICTED_EVALUATION_S = _declare("time.predicted_evaluation_s", PREDICTED)
PREDICTED_EPOCH_S = _declare("time.predicted_epoch_s", PREDICTED)
MEASURED_UPDATE_S = _declare("time.measured_update_s", MEASURED)
MEASURED_EVALUATION_S = _declare("time.measured_evaluation_s", MEASURED)
MEASURED_EPOCH_S = _declare("time.measured_epoch_s", MEASURED)
# -------------------------------------------------------------------------------------------------

MEMORY_OBJECTIVE = PREDICTED_PARTS["total"]  # the memory objective of older sweeps and stores
MEASURED_TOTAL = MEASURED_PARTS["total"]
# What a space may name as an objective besides its task's metrics.
SPACE_OBJECTIVES = (
    *PREDICTED_PARTS.values(),
    PREDICTED_RUN_PEAK,
    FLOPS,
    *MEASURED_PARTS.values(),
    MEASURED_STEP_EVAL_PEAK,
    PREDICTED_UPDATE_S,
)
MEASURED_TIMES = tuple(n for n, c in COLUMNS.items() if n.startswith(TIME) and c.source == MEASURED)


def known_before_training(name: str) -> bool:
    """Whether an outcome column is known before a point trains (the profiler's): a sampler
    may weigh a candidate by it, a budget may screen by it."""
    found = COLUMNS.get(name)
    return found is not None and found.source == PREDICTED


# ---- the names earlier versions gave them --------------------------------------------------------
# The prefixes of memory names that the first version reported ("memory_total_mb",
# "measured_total_mb") and earlier spaces named ("predicted_run_peak_mb") -> today's, after
# ``memory.``; the first version's FLOPs were "flops_per_step".
OLDER_MEMORY_PREFIXES = (
    ("memory_", "predicted_"),
    ("predicted_", "predicted_"),
    ("measured_", "measured_"),
)
# Columns renamed since, with the store's schema version that first wrote the new name: rows of
# an older version are read under it (`store.compat.renamed_columns`), as are names in spaces.
RENAMED = {"memory.measured_run_peak_mb": (MEASURED_STEP_EVAL_PEAK, 2)}


def column(name: str) -> str:
    """The store column of a metric or outcome as a space, a flag, a result or an earlier version
    names it: an outcome column as it is (renamed ones as today's), an earlier version's memory
    name ("memory_total_mb", "predicted_run_peak_mb", "flops_per_step") as today's column, any
    other name a task's metric (``metric.<name>``)."""
    if name in RENAMED:
        return RENAMED[name][0]
    if name.startswith((METRIC, MEMORY, TIME)):
        return name
    if name == "flops_per_step":
        return FLOPS
    for old, new in OLDER_MEMORY_PREFIXES:
        if name.startswith(old) and name.endswith("_mb"):
            return column(f"{MEMORY}{new}{name.removeprefix(old)}")
    return f"{METRIC}{name}"


def is_outcome(name: str) -> bool:
    """Whether a reported or stored name is an outcome column (memory or time)."""
    return name.startswith((MEMORY, TIME))


def split(reported: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a trial reported as (its task's metrics, its outcome columns)."""
    metrics = {k: v for k, v in reported.items() if not is_outcome(k)}
    return metrics, {k: v for k, v in reported.items() if is_outcome(k)}


# ---- the conversions -----------------------------------------------------------------------------


class TimeParts(Protocol):
    """What `time_columns` reads of a time prediction (`timing.TimePrediction`)."""

    update_seconds: float
    evaluation_seconds: float | None
    epoch_seconds: float


def time_columns(predicted: TimeParts | None) -> dict[str, float | None]:
    """A trial's predicted seconds under their columns (None where not predicted)."""
    seconds = (None, None, None)
    if predicted is not None:
        seconds = (predicted.update_seconds, predicted.evaluation_seconds, predicted.epoch_seconds)
    return dict(zip((PREDICTED_UPDATE_S, PREDICTED_EVALUATION_S, PREDICTED_EPOCH_S), seconds))


class CudaParts(Protocol):
    """What `memory_columns` reads of a CUDA trial's prediction (`memory.cuda.CudaPrediction`)."""

    def parts(self) -> dict[str, int | None]: ...


class MemoryParts(Protocol):
    """What `memory_columns` reads of a memory report (`tune_lowmem.memory.MemoryReport`)."""

    model_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    flops_per_step: int
    run_peak_bytes: int | None
    cuda: CudaParts | None

    @property
    def total_bytes(self) -> int: ...


def memory_columns(
    predicted: MemoryParts | None,
    measured: MemoryParts | None = None,
    paper_csr: MemoryParts | None = None,
) -> dict[str, float | int | None]:
    """The memory a trial reports, under its columns (None where not known): each report's
    parts; the FLOPs (the measured step's when measured); the predicted run's peak and the
    measured step-and-evaluation peak; the totals as the step holds them (`memory.stored`: the
    prediction counts tensors as held; a measured step holds the predicted weights, gradients
    and state, which shapes and dtypes fix, and its own measured activations); a CUDA trial's
    predicted run peak by part (`PREDICTED_CUDA_PARTS`); and the paper's CSR accounting of the
    prediction, from `paper_csr`. A CUDA device's peaks (`CUDA_PEAKS`) are
    its allocator's, read where the trial runs (`memory.share.peak_memory_mb`)."""
    values: dict[str, float | int | None] = {
        name: None for name in COLUMNS if name.startswith(MEMORY) and name not in CUDA_PEAKS
    }
    for report, parts, peak in (
        (predicted, PREDICTED_PARTS, PREDICTED_RUN_PEAK),
        (measured, MEASURED_PARTS, MEASURED_STEP_EVAL_PEAK),
    ):
        if report is None:
            continue
        held = (report.model_bytes, report.optimizer_bytes, report.activation_bytes)
        values.update(
            {parts[p]: nbytes / MB for p, nbytes in zip(PARTS, (*held, report.total_bytes))}
        )
        values[FLOPS] = report.flops_per_step
        if report.run_peak_bytes is not None:
            values[peak] = report.run_peak_bytes / MB
    if predicted is not None:
        values[PREDICTED_STORED_TOTAL] = predicted.total_bytes / MB
        if predicted.cuda is not None:  # a CUDA trial's run peak by part
            for part, nbytes in predicted.cuda.parts().items():
                values[PREDICTED_CUDA_PARTS[part]] = None if nbytes is None else nbytes / MB
        if measured is not None:
            fixed = predicted.model_bytes + predicted.optimizer_bytes
            values[MEASURED_STORED_TOTAL] = (fixed + measured.activation_bytes) / MB
    if paper_csr is not None:
        values[PAPER_CSR_TOTAL] = paper_csr.total_bytes / MB
    return values


def trial_result(
    objectives: Iterable[str],
    status: str,
    metrics: Mapping[str, Any],
    outcome: Mapping[str, Any],
    reason: str | None = None,
) -> dict[str, Any]:
    """What a trial reports: every objective key present (None when unknown), its metrics and
    outcome columns, its ``trial_status`` and, when it did not complete, its ``failure_reason``."""
    result = {**dict.fromkeys(objectives), **metrics, **outcome, "trial_status": status}
    return result if reason is None else {**result, "failure_reason": reason}


def result_from_row(row: Mapping[str, Any], objectives: Iterable[str]) -> dict[str, Any]:
    """A stored trial's final result, as it reported it: its metrics by name, every outcome
    column (None in rows of stores older than it), its status and failure reason."""
    metrics = {
        name.removeprefix(METRIC): value
        for name, item in row.items()
        if name.startswith(METRIC) and (value := _present(item)) is not None
    }
    outcome = {name: _present(row.get(name)) for name in COLUMNS}
    reason = _present(row.get("failure_reason"))
    return trial_result(objectives, row["status"], metrics, outcome, reason)


def _present(item: Any) -> Any:
    """A stored value, None where it is missing (None, NaN, pandas' NA)."""
    try:
        return None if item is None or item != item else item  # noqa: PLR0124 - NaN
    except TypeError:  # pandas' NA is no truth value
        return None
