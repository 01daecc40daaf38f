"""Stored or accounted: how a memory figure counts a sparse weight, for every command's labels.

A figure is *accounted* when it counts a sparse weight compressed in the config's
`sparsity.storage` layout (CSR unless set; the searched objective `memory.predicted_total_mb`),
and *stored* when it counts what the step really holds. Sparse layers are trained packed, in
that very layout (values, indices, gradients and state of the nonzeros; the dense weight one
layer at a time), so for runs of this version the two are equal. Stores written before sparse
layers were packed hold a larger stored figure (their step kept dense weights, gradients and
state plus a bool mask per sparse weight) beside the accounted one, and read labelled so.
Activations, and the allocator's own peaks, are held as counted. Without sparse weights the two
are equal. `memory.paper_csr_total_mb` is the prediction as the paper accounts it (sparse weights
as CSR whatever the layout), the comparison column of reproduction sweeps, labelled so. Every
outcome column, time's too, is named here in words (`words`, `how`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..outcome import (
    CUDA_MAX_ALLOCATED,
    CUDA_MAX_RESERVED,
    FLOPS,
    MEASURED,
    MEASURED_PARTS,
    MEASURED_STEP_EVAL_PEAK,
    MEASURED_STORED_TOTAL,
    MEMORY,
    PAPER_CSR_TOTAL,
    PREDICTED,
    PREDICTED_CUDA_PARTS,
    PREDICTED_PARTS,
    PREDICTED_RUN_PEAK,
    PREDICTED_STORED_TOTAL,
    TIME,
)

ACCOUNTED, STORED, PAPER_CSR = "accounted", "stored", "paper's CSR accounting"
# each accounted total -> the column holding the same figure as the step stores it
STORED_TOTALS = {
    PREDICTED_PARTS["total"]: PREDICTED_STORED_TOTAL,
    MEASURED_PARTS["total"]: MEASURED_STORED_TOTAL,
}
_ACCOUNTED_PARTS = {f"{part}_mb" for part in ("model", "optimizer", "total")}
LEGEND = (
    "memory: accounted = sparse weights counted compressed (sparsity.storage: CSR unless set; the "
    "searched objective), which is how packed sparse layers hold them; stored = what the step "
    "holds (equal for packed runs; a run written before packing held dense weights, gradients "
    "and state plus a bool mask per sparse weight)"
)


def counted(column: str) -> str | None:
    """`ACCOUNTED`, `STORED` or `PAPER_CSR` for a memory column in MB; None for anything else
    (FLOPs, a metric)."""
    if not (column.startswith(MEMORY) and column.endswith("_mb")):
        return None
    if column == PAPER_CSR_TOTAL:
        return PAPER_CSR
    source, _, part = column.removeprefix(MEMORY).partition("_")
    accounted = source in ("predicted", "measured") and part in _ACCOUNTED_PARTS
    return ACCOUNTED if accounted else STORED


# What each memory column is, for a reader: (name, how it was obtained)
_PARTS = {
    "run_peak": "peak memory of the whole run",
    "total": "training step memory",
    "stored_total": "training step memory as the step stores it",
    "model": "model memory",
    "optimizer": "optimizer memory",
    "activation": "activation memory",
}
_SOURCES = {
    "predicted": "from the config's shapes, before training",
    "measured": "on a real training step",
}
_OTHERS = {
    MEASURED_STEP_EVAL_PEAK: (
        "measured peak memory of one step and one evaluation batch",
        (
            "torch's allocator on a side run at the trial's start (the step that may be the "
            "run's peak, then an evaluation batch), kernels' workspace included; not the whole run"
        ),
    ),
    PREDICTED_RUN_PEAK: (
        "predicted peak memory of the whole run",
        "from the config's shapes, before training (each step with its minibatch, an evaluation)",
    ),
    PAPER_CSR_TOTAL: (
        "predicted training step memory as the paper counts it",
        "sparse weights as CSR whatever their layout",
    ),
    FLOPS: (
        "floating-point operations per training step",
        "counted over a step's operators: forward, backward and recomputation of a minibatch",
    ),
    PREDICTED_CUDA_PARTS["rounding"]: (
        "predicted CUDA allocator's rounding",
        "of the CUDA run peak: the caching allocator's 512-byte blocks beyond the tensors",
    ),
    PREDICTED_CUDA_PARTS["blas"]: (
        "predicted BLAS workspaces",
        "of the CUDA run peak: cuBLAS's and cuBLASLt's, by torch's rules or probed on the card",
    ),
    PREDICTED_CUDA_PARTS["cudnn"]: (
        "predicted cuDNN workspace",
        "of the CUDA run peak, at its peak: probed on the card, or the trial's limit",
    ),
    PREDICTED_CUDA_PARTS["context"]: (
        "CUDA context",
        "beside the CUDA run peak, outside the allocator: measured on a card",
    ),
    PREDICTED_CUDA_PARTS["reserved"]: (
        "predicted GPU memory reserved",
        "for the CUDA run peak: the reserve per allocated byte measured on a card",
    ),
    CUDA_MAX_ALLOCATED: ("peak GPU memory of live tensors", "the CUDA allocator's"),
    CUDA_MAX_RESERVED: ("peak GPU memory reserved", "the CUDA allocator's"),
}


# How a time column's figure (``time.<source>_<what>_s``) was obtained, by its source.
_TIMED = {
    MEASURED: "on the trial's own device, the median over its epochs",
    PREDICTED: "from the config's dry run and the device's own kernel timings, before training",
}
_STEADY = "at steady state (an epoch's updates after its first, those before a rewiring left out)"


def words(column: str) -> str:
    """An outcome column as a reader names it, e.g. ``memory.predicted_total_mb`` -> "predicted
    training step memory (MB)", ``time.measured_update_s`` -> "measured seconds per update":
    axes and headings say what the figure is, not where it is kept."""
    name, _ = _said(column)
    return f"{name} (MB)" if column.endswith("_mb") else name


def how(column: str) -> str:
    """How an outcome figure was obtained and how it counts a sparse weight, in plain words:
    "from the config's shapes, before training; accounted"."""
    _, obtained = _said(column)
    return f"{obtained}; {counted(column)}" if counted(column) else obtained


def _said(column: str) -> tuple[str, str]:
    if column.startswith(TIME):
        source, _, what = column.removeprefix(TIME).removesuffix("_s").partition("_")
        steady = f"; an update {_STEADY}" if (source, what) == (MEASURED, "update") else ""
        return f"{source} seconds per {what}", _TIMED.get(source, "as reported") + steady
    if column in _OTHERS:
        return _OTHERS[column]
    source, _, part = column.removeprefix(MEMORY).removesuffix("_mb").partition("_")
    if source in _SOURCES and part in _PARTS:
        return f"{source} {_PARTS[part]}", _SOURCES[source]
    return column.removeprefix(MEMORY).removesuffix("_mb").replace("_", " "), "as reported"


def labelled(column: str, *words: str) -> str:
    """A header: the column, then ``words`` and how it counts, in parentheses when any."""
    said = [*words, *([counted(column)] if counted(column) else [])]
    return f"{column} ({', '.join(said)})" if said else column


def stored_beside(columns: Iterable[str]) -> list[str]:
    """The stored counterparts of the accounted totals among `columns`, in their order."""
    return [STORED_TOTALS[c] for c in columns if c in STORED_TOTALS]


def differing(frame: pd.DataFrame, column: str, suffix: str = "") -> np.ndarray:
    """Per row: the stored figure is known and differs from the accounted `column` (a sparse
    configuration); all False where the store has no stored figure for it."""
    stored = f"{STORED_TOTALS.get(column)}{suffix}"
    if stored not in frame:
        return np.zeros(len(frame), dtype=bool)
    return differ(frame[f"{column}{suffix}"], frame[stored])


def differ(accounted: pd.Series, stored: pd.Series) -> np.ndarray:
    """Per row: the stored figure is known and is not the accounted one."""
    held = stored.to_numpy(dtype=float, na_value=np.nan)
    same = np.isclose(held, accounted.to_numpy(dtype=float, na_value=np.nan), rtol=1e-9, atol=0)
    return ~np.isnan(held) & ~same


def unknown(frame: pd.DataFrame, column: str, suffix: str = "") -> int:
    """Rows with an accounted `column` but no stored figure (written before stores kept one)."""
    stored = frame.get(f"{STORED_TOTALS[column]}{suffix}", pd.Series(np.nan, index=frame.index))
    known = ~frame[f"{column}{suffix}"].isna()
    return int((known & stored.isna()).sum())


def note(frame: pd.DataFrame, columns: Iterable[str], shown: bool, suffix: str = "") -> str:
    """The legend line of a table of `columns` (rows of `frame`): what the labels mean, and
    whether the stored figures are `shown` beside the accounted ones or equal to them."""
    totals = [c for c in columns if c in STORED_TOTALS and f"{c}{suffix}" in frame]
    missing = unknown(frame, totals[0], suffix) if totals else 0  # the first total's rows
    if shown:
        said = "stored is shown beside accounted; they are equal for dense configurations"
    elif missing < len(frame):
        said = "stored = accounted for every configuration here where it is known"
    else:
        said = "stored figures are not in this store"
    if missing:
        said += (
            f"; {missing} configuration(s) were written by an earlier version without a stored "
            "figure: accounted only"
        )
    return f"{LEGEND}. {said[0].upper()}{said[1:]}."
