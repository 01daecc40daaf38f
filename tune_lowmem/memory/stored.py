"""Stored against accounted: what a training step really holds, beside the paper's accounting.

Sparse layers are trained packed (`techniques.packed`): a sparse weight is its nonzero values
plus their indices in `sparsity.storage`'s layout, its gradient and optimizer state hold the
nonzeros only, and the dense weight exists while its layer computes (the dry run's activation
part sees it). So the prediction (`predict`, the store's `memory.predicted_total_mb`, the searched
objective), which counts a sparse weight in the config's layout, is what the step holds; `stored`
counts the dry run's own tensors instead of the layouts' formula (the parameters as they are,
plus the packed layers' index buffers) and comes to the same bytes. `accounted` re-counts the
sparse weights in another layout (csr: the paper's accounting, the comparison column of the
ladder and the profiler); `held` counts a measured step as stored. Without sparsity all of them
agree. The store keeps both totals (`stored_totals`), and `analysis.counted` labels every figure:
stores written before sparse layers were packed hold a larger stored figure (the dense weights
and bool masks the step then held) beside the accounted one.
"""

from __future__ import annotations

import dataclasses

from torch import nn

from ..config import TrialConfig
from ..techniques.packed import PackedLayer
from ..techniques.rewiring import rewires
from .predict import dry_run, parts, planned_nonzeros, shape_key
from .report import MemoryReport


def index_bytes(model: nn.Module) -> int:
    """The bytes of the packed layers' index buffers (CSR columns and row pointers, bitmaps)."""
    return sum(
        tensor.nbytes
        for module in model.modules()
        if isinstance(module, PackedLayer)
        for tensor in module.index().values()
    )


def stored(config: TrialConfig, lengths: tuple[int, int] | None = None) -> MemoryReport:
    """The predicted memory the step holds, from the dry run's tensors: parameters (a packed
    layer's values), gradients and optimizer state as they are, plus the index buffers."""
    run = dry_run(shape_key(config, lengths), lengths)
    return parts(run, {}, extra_model_bytes=index_bytes(run.model), rewiring=rewires(config))


def accounted(
    config: TrialConfig, layout: str = "csr", lengths: tuple[int, int] | None = None
) -> MemoryReport:
    """The predicted memory with sparse weights counted in `layout` (csr: the paper's)."""
    run = dry_run(shape_key(config, lengths), lengths)
    nonzeros = planned_nonzeros(config, run.model, lengths)
    return parts(run, nonzeros, layout, rewiring=rewires(config))


def held(measured: MemoryReport, stored_report: MemoryReport) -> MemoryReport:
    """A measured step as it was held: its measured activation part, with the model and optimizer
    parts of `stored_report` in place of `measure`'s. Weights, gradients, state and indices are
    fixed by the shapes and dtypes, so the dry run's count is the real step's
    (`tests/test_memory_labels.py` checks it against a real trainer's tensors)."""
    return dataclasses.replace(
        measured,
        model_bytes=stored_report.model_bytes,
        optimizer_bytes=stored_report.optimizer_bytes,
    )


def stored_totals(
    stored_report: MemoryReport,
    measured: MemoryReport | None = None,
    paper_csr: MemoryReport | None = None,
) -> dict[str, float | None]:
    """The stored totals as the store's columns name them (`<source>_stored_total_mb`), beside
    the accounted `<source>_total_mb` of `MemoryReport.to_dict`, and the paper's CSR accounting
    of the prediction (`accounted(config, "csr")`) as `paper_csr_total_mb`; None: not measured,
    or not given."""
    step = None if measured is None else held(measured, stored_report)
    return {
        "predicted_stored_total_mb": stored_report.total_mb,
        "measured_stored_total_mb": None if step is None else step.total_mb,
        "paper_csr_total_mb": None if paper_csr is None else paper_csr.total_mb,
    }
