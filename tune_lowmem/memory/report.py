"""The profiler's answer for one configuration: the paper's three parts of training memory.

Megabytes are decimal (`outcome.MB`, 10**6 bytes): that is the unit in which the paper's
WRN-28-2 baseline (batch 100, fp32) comes to 404.8 MB (in MiB it would be 386.0). The columns a
report fills are `outcome.memory_columns`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import TrialConfig
from ..outcome import MB, MEASURED, PARTS, PREDICTED

SOURCES = (PREDICTED, MEASURED)


@dataclass(frozen=True)
class MemoryReport:
    """Training memory in bytes, counted as the paper counts it (docs/profiler.md):

    - model: the parameters (a sparse weight: nonzero values plus CSR index storage);
    - optimizer: the gradient buffer plus the optimizer state, in the parameters' dtypes;
    - activation: the peak over the training step of tensors that are none of those (stored
      forward activations, gradients w.r.t. activations, recomputed segments), workspace excluded.
    """

    model_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    flops_per_step: int  # forward + backward + recomputation, all microbatches of one minibatch
    source: str  # predicted | measured
    # measured only: the most bytes PyTorch held at once during the step, everything included and
    # dense as stored (masked sparse weights take their full size), the allocator's own view
    peak_bytes: int | None = None
    # predicted (`predict.run_peak`): the run's peak, the most bytes live at once over training
    # steps, occasional work and evaluation, inputs included (a CUDA trial's: its caching
    # allocator's, with its parts in `cuda`); measured (`allocations.measured_run_peak`): the
    # allocator's peak over the steps that may be the run's peak, each with one evaluation
    # batch, on a side run (not the whole run)
    run_peak_bytes: int | None = None
    cuda: Any = None  # predicted for a CUDA trial: its `memory.cuda.CudaPrediction`

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(
                f"source: {self.source!r} is not allowed; allowed: {', '.join(SOURCES)}"
            )

    @property
    def total_mb(self) -> float:
        return self.total_bytes / MB

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.optimizer_bytes + self.activation_bytes

    def ratio_to(self, baseline: MemoryReport) -> float:
        """How many times less memory than `baseline` (the paper's "60.7x")."""
        return baseline.total_bytes / self.total_bytes

    def to_dict(self) -> dict[str, float | int | str | None]:
        """What `tune-lowmem profile --json` prints: ``<source>_<part>_mb`` for each of PARTS,
        the FLOPs, the source, a measurement's ``measured_peak_mb``, the run's peak (the names
        earlier versions gave the columns, which `outcome.column` reads as today's) and a CUDA
        prediction's parts (``predicted_cuda_<part>_mb``)."""
        parts = (self.model_bytes, self.optimizer_bytes, self.activation_bytes, self.total_bytes)
        values: dict[str, float | int | str | None] = {
            f"{self.source}_{part}_mb": nbytes / MB for part, nbytes in zip(PARTS, parts)
        }
        values.update(flops_per_step=self.flops_per_step, source=self.source)
        if self.peak_bytes is not None:
            values[f"{self.source}_peak_mb"] = self.peak_bytes / MB
        if self.run_peak_bytes is not None:
            values[f"{self.source}_run_peak_mb"] = self.run_peak_bytes / MB
        if self.cuda is not None:
            values.update(self.cuda.to_mb())
        return values


def baseline_config(config: TrialConfig) -> TrialConfig:
    """The same model, task and batch trained without any technique: every technique's settings
    at their defaults (fp32, dense, no checkpointing, no microbatching: the paper's baseline,
    404.8 MB for WRN-28-2)."""
    sections = {name: getattr(config, name) for name in ("model", "schedule", "data")}
    return TrialConfig(task=config.task, seed=config.seed, device=config.device, **sections)
