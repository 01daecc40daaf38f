"""SGD fused into the backward pass: exact against torch.optim.SGD where it claims to be, no
gradient buffer kept, and bf16 state as a lossy but close option."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tune_lowmem.techniques.fused_step import FusedSGD

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
