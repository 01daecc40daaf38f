"""Held against accounted: what a training step really holds, beside the paper's accounting.

A weight that a technique holds compressed (a packed sparse layer: its nonzero values plus their
indices in its layout) has a gradient and optimizer state of its values' shape, and its dense form
exists only while its layer computes (the dry run's activation part sees it). So the prediction
(`predict`, the store's `memory.predicted_total_mb`, the searched objective), which counts every
tensor as the step holds it, is what the step holds. `accounted` re-counts the compressed weights
in a named layout (csr: the paper's accounting, the comparison column of the ladder and the
profiler); `held` counts a measured step as held. Without compressed weights they agree. The
store keeps both totals (`stored_totals`), and `analysis.counted` labels every figure: stores
written before sparse layers were packed hold a larger stored figure (the dense weights and bool
masks the step then held) beside the accounted one.
"""

from __future__ import annotations

import dataclasses

from ..config import TrialConfig
from .cuda import trial_target
from .predict import dry_run, occasional_work, parts, shape_key
from .report import MemoryReport


def accounted(
    config: TrialConfig, layout: str = "csr", lengths: tuple[int, int] | None = None
) -> MemoryReport:
    """The predicted memory with compressed weights counted in `layout` (csr: the paper's)."""
    lengths = None if lengths is None else tuple(lengths)
    target = trial_target(config)
    run = dry_run(shape_key(config, lengths, cuda=target is not None), lengths)
    return parts(run, layout, occasional=occasional_work(config), target=target)


def held(measured: MemoryReport, stored_report: MemoryReport) -> MemoryReport:
    """A measured step as it was held: its measured activation part, with the model and optimizer
    parts of `stored_report` (a `predict`) in place of `measure`'s. Weights, gradients, state
    and indices are fixed by the shapes and dtypes, so the dry run's count is the real step's
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
