"""Shared fixtures: tiny configs and the real CIFAR-10 data in ../shared/data."""

from __future__ import annotations

import pytest
import torch

from tune_lowmem.config import TrialConfig
from tune_lowmem.outcome import TIME

torch.set_num_threads(2)


def timed(key: str) -> bool:
    """An epoch's key that says how long it took: what two runs of one seed need not share."""
    return key == "epoch_seconds" or key.startswith(TIME)


def tiny_wrn_config(**flat) -> TrialConfig:
    """WRN-10-1 on a small real CIFAR-10 subset: a trial that runs in seconds on the CPU."""
    base = {
        "model.depth": 10,
        "model.width": 1,
        "schedule.epochs": 1,
        "schedule.batch_size": 20,
        "data.train_subset": 200,
        "data.val_size": 100,
        "data.test_subset": 100,
        "device": "cpu",
    }
    return TrialConfig.from_dict({**base, **flat})


@pytest.fixture
def tiny_config():
    return tiny_wrn_config


@pytest.fixture(scope="module")
def local_ray():
    """A 2-CPU local Ray cluster for one test module, its processes under this one; its GCS
    address."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
