"""Adam's moments in bf16 or 8 bits (lossy, close to exact Adam), Adam fused into the backward
pass (exact against the unfused optimizer), and the profiler counting that state exactly."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.test_memory import tiny_dct
from tests.test_translation_task import tiny_dct as tiny_dct_on_data
from tune_lowmem.cli import main
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.memory import accounting
from tune_lowmem.memory.measure import measure
from tune_lowmem.memory.predict import predict
from tune_lowmem.optim import FairseqAdam
from tune_lowmem.techniques import blockwise
from tune_lowmem.techniques.adam_state import FORMATS, MIN_QUANTIZED
from tune_lowmem.techniques.fused_adam import FusedAdam
from tune_lowmem.techniques.sparsity import Sparsity
from tune_lowmem.train import Trainer

SETTINGS = {"lr": 1e-2, "betas": (0.9, 0.98), "eps": 1e-8, "weight_decay": 1e-4}


def model_and_batches(seed=0):
    """Two layers, one small enough to keep unquantized moments, one quantized (> 1 chunk)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(300, 300), nn.Tanh(), nn.Linear(300, 4))
    generator = torch.Generator().manual_seed(seed + 1)
    batches = [
        (torch.randn(8, 300, generator=generator), torch.randint(0, 4, (8,), generator=generator))
        for _ in range(4)
    ]
    return model, batches


def backward(model, batch, microbatches=1):
    x, y = batch
    for part_x, part_y in zip(x.chunk(microbatches), y.chunk(microbatches), strict=True):
        (F.cross_entropy(model(part_x), part_y, reduction="sum") / len(x)).backward()


def adam_trained(state="param", fused=False, microbatches=1):
    model, batches = model_and_batches()
    optimizer = FairseqAdam(model.parameters(), moments=FORMATS[state](), **SETTINGS)
    step = FusedAdam(optimizer) if fused else None
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        if step is not None:
            step.begin_step(microbatches)
        backward(model, batch, microbatches)
        optimizer.step()  # finds no gradient left when fused
    return model, optimizer


def test_code_rounds_to_the_nearest_value_and_keeps_small_ones():
    values = torch.cat([torch.logspace(-7, 0, 300), -torch.logspace(-6, 0, 212)])
    for code, data in ((blockwise.SIGNED, values), (blockwise.UNSIGNED, values.abs())):
        assert len(set(code.sorted)) == 256 and code.bytes_to_values[0] == 0.0
        codes = torch.empty(data.numel(), dtype=torch.uint8)
        scales = torch.empty(blockwise.blocks(data.numel()))
        code.quantize_(data, codes, scales)
        back = code.dequantize(codes, scales)
        assert torch.equal(scales, data.view(-1, 256).abs().amax(1))
        per_element = scales.repeat_interleave(256)
        table = torch.tensor(code.sorted)
        nearest = table[((data / per_element)[:, None] - table).abs().argmin(1)] * per_element
        torch.testing.assert_close(back, nearest, rtol=1e-6, atol=0)
        kept = data.abs() >= 1e-6 * per_element  # within the code's exponents: never flushed
        assert torch.equal(back[kept].sign(), data[kept].sign())
        codes.mul_(torch.zeros_like(codes, dtype=torch.bool))  # a sparse weight's mask
        assert not code.dequantize(codes, scales).any()


def test_quantized_state_is_a_byte_per_element_plus_a_scale_per_block():
    model, optimizer = adam_trained("int8")
    big, small = model[0].weight, model[2].bias
    assert big.numel() >= MIN_QUANTIZED > small.numel()
    state = optimizer.state[big]
    assert {k: (t.dtype, t.numel()) for k, t in state.items() if k != "step"} == {
        "exp_avg": (torch.uint8, big.numel()),
        "exp_avg_scales": (torch.float32, blockwise.blocks(big.numel())),
        "exp_avg_sq_root": (torch.uint8, big.numel()),
        "exp_avg_sq_root_scales": (torch.float32, blockwise.blocks(big.numel())),
    }
    assert optimizer.state[small]["exp_avg_sq"].dtype == torch.float32  # too small to quantize


@pytest.mark.parametrize("state", ["bf16", "int8"])
def test_lossy_moments_stay_close_to_exact_adam(state):
    exact, _ = adam_trained("param")
    lossy, _ = adam_trained(state)
    differences = [
        (a - b).abs().max().item() for a, b in zip(lossy.parameters(), exact.parameters())
    ]
    assert 0 < max(differences) < 0.25 * SETTINGS["lr"]  # a quarter of one step, after 4


@pytest.mark.parametrize("state", ["param", "bf16", "int8"])
@pytest.mark.parametrize("microbatches", [1, 2])
def test_fused_adam_equals_the_unfused_optimizer(state, microbatches):
    expected, reference = adam_trained(state, microbatches=microbatches)
    model, optimizer = adam_trained(state, fused=True, microbatches=microbatches)
    for ours, theirs in zip(model.parameters(), expected.parameters(), strict=True):
        assert torch.equal(ours, theirs)
        assert ours.grad is None  # applied and dropped in the backward pass
        for key, value in optimizer.state[ours].items():
            assert torch.equal(value, reference.state[theirs][key])


def trained(steps=2, **flat):
    trainer = Trainer(tiny_dct_on_data(**flat))
    batches = iter(trainer.task.train_batches(0))
    for _ in range(steps):
        trainer.train_step(next(batches))
    return trainer


def test_fused_step_of_the_dct_in_the_trainer_and_its_checkpoint():
    """Equal to the unfused step in the real loop, masks included; a checkpoint keeps the
    moments' dtypes, the step counts and the learning rate, and resuming continues exactly."""
    flat = {"adam_state": "int8", "fused_step": "exact", "sparsity.density": 0.4}
    expected = trained(**{**flat, "fused_step": "none"})
    trainer = trained(**flat)
    for ours, theirs in zip(trainer.model.parameters(), expected.model.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    for name in trainer.technique(Sparsity).engine.names:
        weight = trainer.model.get_parameter(name)  # packed: the nonzeros' values
        assert trainer.optimizer.state[weight]["exp_avg"].shape == weight.shape  # 8-bit, nonzeros
    state = trainer.state_dict()
    batch = next(iter(trainer.task.train_batches(1)))
    trainer.train_step(batch)
    resumed = Trainer(tiny_dct_on_data(**flat))
    resumed.load_state_dict(state)
    dtypes = {t.dtype for s in resumed.optimizer.state.values() for t in s.values()}
    assert dtypes == {t.dtype for t in accounting.state_tensors(trainer.optimizer)}
    resumed.train_step(batch)
    for ours, theirs in zip(resumed.model.parameters(), trainer.model.parameters(), strict=True):
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize(
    "flat",
    [
        {"adam_state": "int8", "precision": "fp16"},
        {"adam_state": "int8", "fused_step": "exact", "sparsity.density": 0.4},
        {"adam_state": "bf16", "checkpoint": "residual-1", "microbatch.size": 240},
    ],
)
def test_profiler_counts_the_state_exactly(flat):
    """Predicted optimizer bytes (gradients held plus state) equal the real optimizer's after
    real steps, with sparse weights' state counted as nonzeros (scales: blocks of nonzeros)."""
    config = tiny_dct(**flat)
    predicted, measured = predict(config), measure(config)
    assert predicted.optimizer_bytes == measured.optimizer_bytes
    plain = predict(config.replace(adam_state="param", fused_step="none"))
    assert predicted.optimizer_bytes < plain.optimizer_bytes


def test_int8_state_counts_a_byte_per_element_and_a_scale_per_block():
    model, optimizer = adam_trained("int8")
    weight, *rest = model.parameters()  # only a large weight is quantized (MIN_QUANTIZED)
    assert weight.numel() >= MIN_QUANTIZED > max(p.numel() for p in rest)
    quantized = 2 * (weight.numel() + 4 * blockwise.blocks(weight.numel()))  # two moments
    fp32 = sum(2 * 4 * p.numel() for p in rest)
    steps = 4 * len(list(model.parameters()))  # each parameter's fp32 step count
    assert accounting.state_bytes(model, optimizer) == quantized + fp32 + steps


WRN = {"task": "wrn-cifar10", "device": "cpu"}
DCT = {"task": "dct-iwslt14", "device": "cpu"}


@pytest.mark.parametrize(
    "flat,message",
    [
        (
            {**DCT, "adam_state": "fp8"},
            "adam_state: 'fp8' is not allowed; allowed: param, bf16, int8",
        ),
        (
            {**WRN, "adam_state": "int8"},
            (
                "adam_state: 'int8' is not allowed for task wrn-cifar10 (its optimizer is SGD, "
                "not Adam); allowed: param"
            ),
        ),
        (
            {**DCT, "adam_state": "bf16", "precision": "bf16"},
            (
                "adam_state: 'bf16' is not allowed with precision bf16 (its moments are already "
                "bf16); allowed: param, int8"
            ),
        ),
        (
            {**DCT, "adam_state": "int8", "precision": "bf16", "precision_update": "kahan"},
            "adam_state: 'int8' is not allowed with precision_update kahan; allowed: param",
        ),
        (
            {**DCT, "fused_step": "heavy-ball"},
            (
                "fused_step: 'heavy-ball' is not allowed for task dct-iwslt14 (its optimizer is "
                "Adam); allowed: none, exact"
            ),
        ),
        (
            {**DCT, "fused_step": "exact", "momentum_dtype": "bf16"},
            "momentum_dtype: 'bf16' is not allowed for task dct-iwslt14",
        ),
        ({**DCT, "fused_step": "exact", "precision": "fp16"}, "loss scaling"),
    ],
)
def test_refused_where_it_does_not_fit(flat, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        TrialConfig.from_dict(flat)


def test_profile_refuses_in_one_line_with_exit_status_2(capsys):
    argv = ["profile", "--set", "task=dct-iwslt14", "--set", "adam_state=fp8"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("adam_state: 'fp8' is not allowed; allowed: param, bf16, int8")
    assert len(err.splitlines()) == 1
