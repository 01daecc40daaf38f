"""Stored against accounted: what a training step really holds, beside the paper's accounting.

Sparse layers are trained densely with masks, so a sparse weight's compressed size (CSR, or a
bitmap: `config.STORAGE_LAYOUTS`) is an accounting of what a sparse kernel would
keep, not what the step holds. `predict` (the store's `memory.predicted_total_mb`) counts the
paper's way, CSR; `stored` counts what the masked step holds, from the same dry run: dense
weights, their gradients where the step keeps them and dense optimizer state, plus the bool
masks (one byte per position of a sparse weight); `accounted` re-counts the sparse weights in
another layout; `held` counts a measured step as stored. Without sparsity all of them agree.
The store keeps both totals (`stored_totals`), and `analysis.counted` labels every figure.
"""

from __future__ import annotations

import dataclasses

import torch

from ..config import TrialConfig
from .predict import dry_run, parts, planned_nonzeros, shape_key
from .report import MemoryReport

MASK_BYTES = torch.empty((), dtype=torch.bool).element_size()


def stored(config: TrialConfig, lengths: tuple[int, int] | None = None) -> MemoryReport:
    """The predicted memory the step holds (sparse weights dense, masks included)."""
    run = dry_run(shape_key(config, lengths), lengths)
    masks = sum(
        run.model.get_parameter(name).numel() * MASK_BYTES
        for name in planned_nonzeros(config, run.model, lengths)
    )
    return parts(run, {}, extra_model_bytes=masks)


def accounted(
    config: TrialConfig, layout: str = "csr", lengths: tuple[int, int] | None = None
) -> MemoryReport:
    """The predicted memory with sparse weights counted in `layout` (csr: `predict`'s figure)."""
    run = dry_run(shape_key(config, lengths), lengths)
    return parts(run, planned_nonzeros(config, run.model, lengths), layout)


def held(measured: MemoryReport, stored_report: MemoryReport) -> MemoryReport:
    """A measured step as it was held: its measured activation part, with the model and optimizer
    parts of `stored_report` in place of `measure`'s accounted ones. Dense weights, gradients,
    state and masks are fixed by the shapes and dtypes, so the dry run's count is the real step's
    (`tests/test_memory_labels.py` checks it against a real trainer's tensors)."""
    return dataclasses.replace(
        measured,
        model_bytes=stored_report.model_bytes,
        optimizer_bytes=stored_report.optimizer_bytes,
    )


def stored_totals(
    stored_report: MemoryReport, measured: MemoryReport | None = None
) -> dict[str, float | None]:
    """The stored totals as the store's columns name them (`<source>_stored_total_mb`), beside
    the accounted `<source>_total_mb` of `MemoryReport.to_dict`; None: not measured."""
    step = None if measured is None else held(measured, stored_report)
    return {
        "predicted_stored_total_mb": stored_report.total_mb,
        "measured_stored_total_mb": None if step is None else step.total_mb,
    }
