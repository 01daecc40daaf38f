"""Held against accounted: what a training step really holds, beside the paper's accounting.

A weight that a technique holds compressed (a packed sparse layer: its nonzero values plus their
indices in its layout) has a gradient and optimizer state of its values' shape, and its dense form
exists only while its layer computes (the dry run's activation part sees it). So the prediction
(`predict`, the store's `memory.predicted_total_mb`, the searched objective), which counts every
tensor as the step holds it, is what the step holds. `accounted` re-counts the compressed weights
in a named layout (csr: the paper's accounting, the comparison column of the ladder and the
profiler). Without compressed weights they agree. The store keeps both totals
(`outcome.memory_columns`: a measured step as held is its measured activation part with the
prediction's model and optimizer parts, which the shapes and dtypes fix, so the dry run's count
is the real step's: `tests/test_memory_labels.py` checks it against a real trainer's tensors),
and `analysis.counted` labels every figure: stores written before sparse layers were packed hold
a larger stored figure (the dense weights and bool masks the step then held) beside the
accounted one.
"""

from __future__ import annotations

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
