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
from tune_lowmem.timing import predict_time

from .test_search import TINY_BASE

# bf16 sparse convolutions at microbatch 10: on some CPUs oneDNN takes another workspace at 2 threads
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
    """Memory and time as the trial's threads give them. The time's probe is per thread count,
    so its figures differ between 1 and 2 threads on any machine; the workspace does where the
    CPU's kernels choose by threads, which not every CPU does."""
    times = {}
    for cpu in (1, 2):
        config = space(cpu).trial_config(POINT)
        screened = screen(space(cpu), POINT)
        assert screened.predicted.run_peak_bytes == predict(config, threads=cpu).run_peak_bytes
        times[cpu] = predict_time(config, threads=cpu).update_seconds
        assert screened.time.update_seconds == times[cpu]
        assert torch.get_num_threads() == 2  # the driver's own left as it was
    assert times[1] != times[2]  # else this test could not tell the thread counts apart
