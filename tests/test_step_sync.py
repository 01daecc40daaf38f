"""A training step a GPU need not wait on: one host read per step, masks re-applied only when they
change, one multi-tensor unscale; with results identical to the straightforward step."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_wrn_config
from tests.test_sparsity import CHURN, two_layer_toy
from tune_lowmem.optim import FairseqAdam
from tune_lowmem.techniques.precision import DynamicLossScaler
from tune_lowmem.techniques.sparsity import DynamicSparsity, Sparsity
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


def _run(config, every_step: bool, steps: int):
    trainer = Trainer(config)
    engine = trainer.technique(Sparsity).engine
    if every_step:  # the straightforward rule: every mask on weights and state after each step
        original = engine.after_step

        def after_step(epoch, update):
            original(epoch, update)
            engine.apply_masks()

        engine.after_step = after_step
    losses = []
    for index, batch in enumerate(trainer.task.train_batches(0)):
        losses.append(trainer.train_step(batch)["loss"])
        if index + 1 == steps:
            break
    return trainer, engine, losses


@pytest.mark.parametrize(
    "setting",
    [
        {},
        {"precision": "fp16", **SMALL_HALF},
        {"precision": "bf16", "precision_update": "stochastic", **SMALL_HALF},
        {"precision": "bf16", "precision_update": "kahan", **SMALL_HALF},
        {"fused_step": "exact"},
        {"fused_step": "heavy-ball", "microbatch.size": 10},
    ],
    ids=str,
)
def test_masks_applied_only_at_rewiring_give_the_results_of_applying_them_every_step(setting):
    config = tiny_wrn_config(**CHURN, **setting)
    lazy, lazy_engine, lazy_losses = _run(config, every_step=False, steps=7)
    eager, eager_engine, eager_losses = _run(config, every_step=True, steps=7)
    assert lazy_engine.rewirings == 3 and lazy_engine.last_pruned > 0
    assert lazy_losses == eager_losses
    for (name, a), b in zip(lazy.model.state_dict().items(), eager.model.state_dict().values()):
        assert torch.equal(a, b), name
    for param_a, param_b in zip(lazy.model.parameters(), eager.model.parameters()):
        for key, value in lazy.optimizer.state[param_a].items():
            assert torch.equal(value, eager.optimizer.state[param_b][key])
    assert all(torch.equal(lazy_engine.masks[n], m) for n, m in eager_engine.masks.items())


def _adam_run(adam: type, every_step: bool) -> tuple[torch.nn.Module, DynamicSparsity]:
    model, sparsity = two_layer_toy(period_schedule="constant", constant_period=3, fraction=0.2)
    optimizer = adam(model.parameters(), lr=1e-2, weight_decay=1e-2)
    sparsity.attach(optimizer)
    x = torch.randn(32, 100, generator=torch.Generator().manual_seed(1))
    for update in range(8):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
        sparsity.after_step(0, update)
        if every_step:
            sparsity.apply_masks()
    return model, sparsity


@pytest.mark.parametrize("adam", [torch.optim.AdamW, FairseqAdam], ids=lambda c: c.__name__)
def test_adam_keeps_masked_positions_zero_between_rewirings(adam):
    (lazy, lazy_sparsity), (eager, _) = _adam_run(adam, False), _adam_run(adam, True)
    assert lazy_sparsity.rewirings == 2
    assert all(torch.equal(a, b) for a, b in zip(lazy.parameters(), eager.parameters()))


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
