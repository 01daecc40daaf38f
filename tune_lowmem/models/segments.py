"""Running a model segment under gradient checkpointing without changing what training does.

`torch.utils.checkpoint` recomputes a segment's forward pass during backward. Dropout is kept
exact by checkpoint's own RNG restore, but a batch norm in training mode would fold the batch's
statistics into its running statistics a second time. `run_checkpointed` freezes them during the
recomputation (momentum 0 keeps running mean and variance, and the step counter is put back),
so a checkpointed model ends a step with the same buffers as the plain one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def run_checkpointed(
    fn: Callable[..., torch.Tensor], modules: Iterable[nn.Module], *args: torch.Tensor
) -> torch.Tensor:
    """``fn(*args)`` as one checkpointed segment; `modules` are those `fn` runs."""
    norms = [m for module in modules for m in module.modules() if _is_batch_norm(m)]
    return checkpoint(
        fn,
        *args,
        use_reentrant=False,
        context_fn=lambda: (contextlib.nullcontext(), _frozen_statistics(norms)),
    )


def _is_batch_norm(module: nn.Module) -> bool:
    return isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm))


@contextlib.contextmanager
def _frozen_statistics(norms: list[nn.Module]) -> Iterator[None]:
    saved = [
        (m.momentum, m.num_batches_tracked.clone() if m.num_batches_tracked is not None else None)
        for m in norms
    ]
    for m in norms:
        m.momentum = 0.0
    try:
        yield
    finally:
        for m, (momentum, tracked) in zip(norms, saved, strict=True):
            m.momentum = momentum
            if tracked is not None:
                m.num_batches_tracked.copy_(tracked)
