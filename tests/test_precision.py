import math

import pytest
import torch
from torch import nn

from tune_lowmem.models.wideresnet import WideResNet
from tune_lowmem.techniques.precision import DynamicLossScaler, cast_model
from tune_lowmem.train import Trainer


@pytest.mark.parametrize(
    ("precision", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)]
)
def test_half_storage_keeps_batch_norm_fp32(precision, dtype):
    model = cast_model(WideResNet(depth=10, width=1), precision)
    for module in model.modules():
        expected = torch.float32 if isinstance(module, nn.BatchNorm2d) else dtype
        for p in module.parameters(recurse=False):
            assert p.dtype == expected, module
    assert model.blocks[0].bn1.running_mean.dtype == torch.float32


def test_fp16_training_keeps_gradients_and_momentum_in_half(tiny_config):
    trainer = Trainer(tiny_config(precision="fp16"))
    batch = next(iter(trainer.task.train_batches(0)))
    out = trainer.train_step(batch)
    assert out["stepped"] == 1.0 and math.isfinite(out["loss"])
    for name, p in trainer.model.named_parameters():
        is_bn = ".bn" in name or name.startswith("bn.")
        expected = torch.float32 if is_bn else torch.float16
        assert p.dtype == expected and p.grad.dtype == expected, name
        assert trainer.optimizer.state[p]["momentum_buffer"].dtype == expected, name


def test_amp_keeps_fp32_master_weights(tiny_config):
    trainer = Trainer(tiny_config(precision="amp-bf16"))
    trainer.train_step(next(iter(trainer.task.train_batches(0))))
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())


def test_overflow_skips_the_step_and_lowers_the_scale(tiny_config):
    trainer = Trainer(tiny_config(precision="fp16"))
    batch = next(iter(trainer.task.train_batches(0)))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    scale = trainer.step_runner.loss_scale
    trainer.step_runner.scaler.scale = 1e30  # the scaled loss overflows fp16 gradients
    out = trainer.train_step(batch)
    assert out["stepped"] == 0.0
    assert trainer.step_runner.skipped_steps == 1
    assert trainer.step_runner.loss_scale == 1e30 * 0.5
    for n, p in trainer.model.named_parameters():
        assert torch.equal(p.detach(), before[n]), n  # no update was applied
    trainer.step_runner.scaler.scale = scale
    assert trainer.train_step(batch)["stepped"] == 1.0


def test_scaler_grows_after_clean_steps():
    scaler = DynamicLossScaler(init_scale=8.0, growth_interval=2)
    p = nn.Parameter(torch.ones(2, dtype=torch.float16))
    for _ in range(2):
        p.grad = torch.full((2,), 16.0, dtype=torch.float16)
        assert scaler.unscale_([p])
    assert torch.equal(p.grad, torch.full((2,), 2.0, dtype=torch.float16))
    assert scaler.scale == 16.0
