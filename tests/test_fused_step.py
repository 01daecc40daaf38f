"""SGD fused into the backward pass: exact against torch.optim.SGD where it claims to be, no
gradient buffer kept, and bf16 state as a lossy but close option."""

import functools
import itertools
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.conftest import tiny_wrn_config
from tune_lowmem.cli import main
from tune_lowmem.config import ConfigError
from tune_lowmem.memory.measure import measure
from tune_lowmem.memory.predict import predict
from tune_lowmem.techniques.fused_step import FusedSGD, FusedStep
from tune_lowmem.train import Trainer

SETTINGS = {"lr": 0.1, "weight_decay": 5e-4}


def model_and_data(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    generator = torch.Generator().manual_seed(seed + 1)
    batches = [
        (
            torch.randn(6, 3, 8, 8, generator=generator),
            torch.randint(0, 5, (6,), generator=generator),
        )
        for _ in range(3)
    ]
    return model, batches


def backward(model, batch, microbatches):
    x, y = batch
    for part_x, part_y in zip(x.chunk(microbatches), y.chunk(microbatches), strict=True):
        (F.cross_entropy(model(part_x), part_y, reduction="sum") / len(x)).backward()


def reference(momentum, nesterov, microbatches):
    model, batches = model_and_data()
    optimizer = torch.optim.SGD(
        model.parameters(), momentum=momentum, nesterov=nesterov, **SETTINGS
    )
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        backward(model, batch, microbatches)
        optimizer.step()
    return model


def fused(momentum, nesterov, microbatches, **kwargs):
    model, batches = model_and_data()
    optimizer = FusedSGD(
        model.parameters(), momentum=momentum, nesterov=nesterov, **SETTINGS, **kwargs
    )
    optimizer.begin_step(microbatches)
    grads_alive = []
    for p in model.parameters():  # registered after the optimizer's hooks: sees the state after
        p.register_post_accumulate_grad_hook(
            lambda _p: grads_alive.append(sum(q.grad is not None for q in model.parameters()))
        )
    for batch in batches:
        backward(model, batch, microbatches)
    return model, optimizer, grads_alive


@pytest.mark.parametrize(
    "momentum,nesterov,microbatches",
    [
        (0.0, False, 1),
        (0.9, False, 1),
        (0.9, True, 1),
        (0.9, False, 3),
        (0.9, True, 3),
        (0.0, False, 3),
    ],
)
def test_fused_sgd_matches_torch_sgd(momentum, nesterov, microbatches):
    expected = reference(momentum, nesterov, microbatches)
    model, optimizer, grads_alive = fused(momentum, nesterov, microbatches)
    exact = microbatches == 1 or nesterov or momentum == 0  # same operations in the same order
    for ours, theirs in zip(model.parameters(), expected.parameters(), strict=True):
        if exact:
            assert torch.equal(ours, theirs)
        else:
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
        assert ours.grad is None  # nothing left behind after the step
    if microbatches == 1 or optimizer.into_buffer:  # never a gradient beside its update
        assert max(grads_alive) == 0


def test_bf16_state_is_half_the_memory_and_close():
    expected = reference(0.9, True, 1)
    model, optimizer, _ = fused(0.9, True, 1, state_dtype=torch.bfloat16)
    full = sum(p.numel() * 4 for p in model.parameters())
    assert optimizer.state_bytes() == full // 2
    differences = [
        (a - b).abs().max().item() for a, b in zip(model.parameters(), expected.parameters())
    ]
    assert 0 < max(differences) < 1e-2  # lossy, but by rounding only


def test_nesterov_needs_momentum():
    with pytest.raises(ValueError, match="nesterov"):
        FusedSGD(nn.Linear(2, 2).parameters(), lr=0.1, nesterov=True)


# ---- the technique: `fused_step` and `momentum_dtype` through the Trainer ---------------------

REWIRING = {  # rewire after every update, so that regrown weights' momentum is exercised
    "sparsity.density": 0.3,
    "sparsity.period_schedule": "constant",
    "sparsity.constant_period": 1,
    "sparsity.initial_threshold": 0.05,
}


def trained(steps=2, optimizer=None, **flat):
    """A tiny WRN trainer after `steps` updates on the same real minibatches each time;
    `optimizer`, if given, replaces the task's (built from the model's parameters)."""
    trainer = Trainer(tiny_wrn_config(**flat))
    if optimizer is not None:
        trainer.optimizer = optimizer(trainer.model.parameters())
    batches = iter(trainer.task.train_batches(0))
    for _ in range(steps):
        trainer.train_step(next(batches))
    return trainer


@pytest.mark.parametrize(
    "flat",
    [
        {},  # the paper's recipe: momentum 0.9, Nesterov, weight decay 5e-4
        {"microbatch.size": 10},  # Nesterov with microbatches: gradients accumulate first
        REWIRING,
        {**REWIRING, "microbatch.size": 10},
        {"checkpoint": "residual-2*", "model.fused_norm": "block"},
    ],
)
def test_fused_step_in_the_trainer_equals_torch_sgd(flat):
    expected = trained(**flat)
    trainer = trained(fused_step="exact", **flat)
    for ours, theirs in zip(trainer.model.parameters(), expected.model.parameters(), strict=True):
        assert torch.equal(ours, theirs)
        assert ours.grad is None  # applied and dropped in the backward pass
        momentum = trainer.optimizer.state[ours]["momentum_buffer"]  # masked like torch's
        assert torch.equal(momentum, expected.optimizer.state[theirs]["momentum_buffer"])


def test_heavy_ball_accumulates_microbatches_into_the_momentum_buffer():
    """Lossy against the paper's recipe (no Nesterov), equal to torch's SGD without it up to the
    summation order of the microbatch gradients."""
    plain = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9, weight_decay=5e-4)
    expected = trained(optimizer=plain, **{"microbatch.size": 5})
    trainer = trained(fused_step="heavy-ball", **{"microbatch.size": 5})
    assert trainer.technique(FusedStep).fused.into_buffer
    for ours, theirs in zip(trainer.model.parameters(), expected.model.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_bf16_momentum_halves_the_state_and_survives_a_checkpoint():
    trainer = trained(steps=2, fused_step="exact", momentum_dtype="bf16")
    state = trainer.state_dict()
    batch = list(itertools.islice(trainer.task.train_batches(0), 3))[2]
    trainer.train_step(batch)
    resumed = Trainer(tiny_wrn_config(fused_step="exact", momentum_dtype="bf16"))
    resumed.load_state_dict(state)
    buffers = [s["momentum_buffer"] for s in resumed.optimizer.state.values()]
    assert {b.dtype for b in buffers} == {torch.bfloat16}
    resumed.train_step(batch)
    for ours, theirs in zip(resumed.model.parameters(), trainer.model.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    exact = trained(steps=2, fused_step="exact")
    lossy = trained(steps=2, fused_step="exact", momentum_dtype="bf16")
    differences = [
        (a - b).abs().max().item()
        for a, b in zip(lossy.model.parameters(), exact.model.parameters(), strict=True)
    ]
    assert 0 < max(differences) < 1e-2  # lossy, by rounding only


@pytest.mark.parametrize(
    "flat,message",
    [
        (
            {"fused_step": "yes"},
            "fused_step: 'yes' is not allowed; allowed: none, exact, heavy-ball",
        ),
        ({"fused_step": "exact", "precision": "fp16"}, "fused_step: 'exact' is not allowed with "),
        ({"fused_step": "exact", "precision": "amp-fp16"}, "loss scaling"),
        (
            {"fused_step": "exact", "precision": "bf16", "precision_update": "stochastic"},
            "fused_step: 'exact' is not allowed with precision_update stochastic; allowed: none",
        ),
        ({"momentum_dtype": "bf16"}, "momentum_dtype: 'bf16' is not allowed with fused_step none"),
        (
            {"fused_step": "exact", "momentum_dtype": "bf16", "precision": "bf16"},
            "momentum_dtype: 'bf16' is not allowed with precision bf16",
        ),
        ({"momentum_dtype": "fp8"}, "momentum_dtype: 'fp8' is not allowed; allowed: param, bf16"),
    ],
)
def test_refused_where_it_does_not_fit(flat, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        tiny_wrn_config(**flat)


def test_heavy_ball_refused_for_a_task_whose_optimizer_is_adam(capsys):
    argv = ["profile", "--set", "task=dct-iwslt14", "--set", "fused_step=heavy-ball"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "fused_step: 'heavy-ball' is not allowed for task dct-iwslt14 (its optimizer is Adam); "
        "allowed: none, exact" in err
    )
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "flat",
    [
        {"fused_step": "exact"},
        {"fused_step": "heavy-ball", "microbatch.size": 10, **REWIRING},
        {"fused_step": "exact", "momentum_dtype": "bf16"},
    ],
)
def test_profiler_models_the_fused_step(flat):
    """No gradient buffer: the optimizer part is the momentum alone, predicted as measured; the
    gradients that live until their update are in the activation part; totals within 3%."""
    config = tiny_wrn_config(**flat)
    plain = predict(config.replace(fused_step="none", momentum_dtype="param"))
    predicted, measured = predict(config), measure(config)
    half = 2 if flat.get("momentum_dtype") == "bf16" else 1
    assert predicted.optimizer_bytes * 2 * half == plain.optimizer_bytes
    assert predicted.optimizer_bytes == measured.optimizer_bytes
    assert predicted.total_bytes == pytest.approx(measured.total_bytes, rel=0.03)
    assert predicted.activation_bytes == pytest.approx(measured.activation_bytes, rel=0.03)
