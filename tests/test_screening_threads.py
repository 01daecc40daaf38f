"""A sweep's driver screens a point at the thread count its trial will compute with: the CPU's
kernels, and so their workspace in the run's peak, depend on it, and the budget and the
known-memory sampler must see the figure the trial stores."""

from __future__ import annotations

import pytest
import torch

from tune_lowmem.memory.predict import predict
from tune_lowmem.memory.workspace import computing_threads
from tune_lowmem.search.screening import screen
from tune_lowmem.space import SearchSpace

from .test_search import TINY_BASE

# bf16 sparse convolutions at microbatch 10: oneDNN's workspace differs between 1 and 2 threads
POINT = {"precision": "bf16", "sparsity.density": 0.1, "microbatch.size": 10}


def space(cpu: int) -> SearchSpace:
    return SearchSpace.from_dict(
        {
            "name": "unit",
            "base": {**TINY_BASE, "checkpoint": "residual-1"},
            "objectives": {"val_accuracy": "maximize", "memory.predicted_run_peak_mb": "minimize"},
            "resources": {"cpu": cpu, "gpu": 0},
            "sampler": "random",
            "num_samples": 1,
            "params": {key: {"type": "choice", "values": [value]} for key, value in POINT.items()},
        }
    )


@pytest.fixture
def two_threads():
    with computing_threads(2):
        yield


def test_the_driver_predicts_at_the_trials_thread_count(two_threads):
    at = {}
    for threads in (1, 2):
        with computing_threads(threads):  # as the trial (`resources.cpu`) computes
            at[threads] = predict(space(1).trial_config(POINT)).run_peak_bytes
    assert at[1] != at[2]  # else this point tests nothing
    for cpu in (1, 2):
        screened = screen(space(cpu), POINT)
        assert screened.predicted.run_peak_bytes == at[cpu]
        assert torch.get_num_threads() == 2  # the driver's own left as it was
