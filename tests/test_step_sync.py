"""A training step a GPU need not wait on: one host read per step (a packed sparse step has no
masks to re-apply), one multi-tensor unscale; with results identical to the straightforward step."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_wrn_config
from tests.test_sparsity import CHURN, two_layer_toy
from tune_lowmem.techniques.precision import DynamicLossScaler
from tune_lowmem.torch_private import multiply_
from tune_lowmem.train import Trainer, read_once

SMALL_HALF = {"schedule.batch_size": 4, "microbatch.size": 2}  # half convolutions are slow on CPUs
HOST_READS = ("__float__", "__int__", "__bool__", "__index__", "item", "tolist", "numpy")


@pytest.fixture
def host_reads(monkeypatch):
    """Counts every read of a tensor's value on the host (each one a sync on a GPU)."""
    reads = []
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


@pytest.mark.parametrize(
    "setting",
    [
        {},
        {"precision": "fp16", **SMALL_HALF},
        {"precision": "amp-bf16", **CHURN},
        {"precision": "bf16", "precision_update": "stochastic", **SMALL_HALF},
    ],
    ids=str,
)
def test_a_step_reads_the_device_once(setting, host_reads):
    trainer = Trainer(tiny_wrn_config(**setting))
    batch = next(iter(trainer.task.train_batches(0)))
    host_reads.clear()
    out = trainer.train_step(batch)  # update 0: no rewiring happens after it
    assert host_reads == ["tolist"], host_reads
    assert out["stepped"] == 1.0


def test_rewiring_reads_every_layer_s_mask_sums_at_once(host_reads):
    _, sparsity = two_layer_toy(fraction=0.2)
    host_reads.clear()
    sparsity.rewire()
    sums = [r for r in host_reads if r != "tolist"]
    assert host_reads.count("tolist") == 1 and not sums, host_reads  # (sampling uses nonzero)


def test_read_once_returns_each_value_and_none_as_one():
    assert read_once(torch.tensor(2.5), None, torch.tensor(True)) == [2.5, 1.0, 1.0]


def test_the_multi_tensor_unscale_equals_one_multiply_per_gradient():
    generator = torch.Generator().manual_seed(0)
    grads = [
        torch.randn(shape, generator=generator).half() * 1000 for shape in ((7, 3), (5,), (2, 2, 2))
    ]
    expected = [g * (1.0 / 1024.0) for g in grads]
    multiply_(grads, 1.0 / 1024.0)
    assert all(torch.equal(g, e) for g, e in zip(grads, expected))


def test_the_scaler_takes_the_finiteness_its_caller_read():
    scaler = DynamicLossScaler(init_scale=8.0)
    p = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
    p.grad = torch.full((2,), 16.0, dtype=torch.float16)
    assert not scaler.unscale_([p], finite=False)
    assert scaler.scale == 4.0 and torch.equal(p.grad, torch.full((2,), 16.0, dtype=torch.float16))
    assert scaler.unscale_([p], finite=True)
    assert torch.equal(p.grad, torch.full((2,), 4.0, dtype=torch.float16))
