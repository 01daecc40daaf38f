"""The profiler's tasks: the config's own task built with ``synthetic=True``, so its minibatches
are random tensors of the real shapes (`Task.synthetic_batch`) and no data set is loaded."""

from __future__ import annotations

import torch

from ..config import TrialConfig
from ..tasks.base import Task


def synthetic_task(
    config: TrialConfig, device: torch.device, lengths: tuple[int, ...] | None = None
) -> Task:
    """`lengths`: the synthetic sequence lengths, for tasks whose batches have them (the
    translation task's (source, target) tokens); `ConfigError` for any other task."""
    task = config.task_type()(config, device, synthetic=True)
    if lengths is not None:
        task.set_synthetic_lengths(tuple(lengths))
    return task
