"""fairseq's Adam rule (tune_lowmem.optim), checked by hand without fairseq installed."""

from __future__ import annotations

import math

import pytest
import torch

from tune_lowmem import optim
from tune_lowmem.optim import FairseqAdam


def test_first_steps_follow_fairseqs_formula():
    lr, (b1, b2), eps, wd = 0.1, (0.9, 0.98), 1e-3, 0.01
    param = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    grads = [torch.tensor([1e-3, -0.5, 2e-3]), torch.tensor([2e-3, 0.3, -1e-3])]
    optimizer = FairseqAdam([param], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    p, m, v = param.detach().clone().double(), torch.zeros(3).double(), torch.zeros(3).double()
    for t, grad in enumerate(grads, 1):
        param.grad = grad.clone()
        optimizer.step()
        g = grad.double()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        p = p - lr * wd * p - lr * math.sqrt(1 - b2**t) / (1 - b1**t) * m / (v.sqrt() + eps)
        assert torch.allclose(param.detach().double(), p, rtol=0, atol=1e-6)
    # torch's AdamW divides by sqrt(v / (1 - b2^t)) + eps instead: a visibly other step for small
    # gradients (the first weight), which is why the project does not use it.
    other = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    adamw = torch.optim.AdamW([other], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for grad in grads:
        other.grad = grad.clone()
        adamw.step()
    assert abs(float(other.detach()[0] - param.detach()[0])) > 1e-3


def test_state_is_adamw_shaped_and_half_weights_get_fp32_moments():
    param = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
    optimizer = FairseqAdam([param], lr=1e-2)
    assert isinstance(optimizer, torch.optim.AdamW)  # the memory profiler counts its two buffers
    param.grad = torch.full((4,), 0.5, dtype=torch.float16)
    optimizer.step()
    state = optimizer.state[param]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32
    assert param.dtype == torch.float16 and float(param[0].detach()) == pytest.approx(
        1 - 1e-2, abs=1e-3
    )


def test_half_weights_stay_finite_where_half_moments_would_divide_by_zero():
    """An unused embedding row's zero gradient and a small one (whose square is under fp16's
    range): fairseq's step in fp32 moves them by 0 and by about lr, rounded to fp16."""
    param = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    optimizer = FairseqAdam([param], lr=1e-3)
    param.grad = torch.tensor([0.0, 1e-4, 0.5], dtype=torch.float16)
    optimizer.step()
    wide = torch.nn.Parameter(torch.ones(3))
    reference = FairseqAdam([wide], lr=1e-3)
    wide.grad = param.grad.float()
    reference.step()
    assert torch.isfinite(param).all()
    assert torch.equal(param.detach(), wide.detach().half())
    assert float(param[0].detach()) == 1.0 and float(param[1].detach()) < 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_the_update_runs_chunk_by_chunk_with_the_whole_parameters_values(monkeypatch, dtype):
    """A parameter of 10 elements updated 4 at a time: three chunks, none over 4 elements, and
    bit for bit the weights and moments of one update of the whole parameter."""
    torch.manual_seed(0)
    start, grads = torch.randn(2, 5).to(dtype), [torch.randn(2, 5).to(dtype) for _ in range(3)]

    def trained(chunk: int) -> tuple[torch.Tensor, dict, list[int]]:
        monkeypatch.setattr(optim, "CHUNK", chunk)
        param = torch.nn.Parameter(start.clone())
        optimizer = FairseqAdam([param], lr=1e-2, weight_decay=0.1)
        sizes = []
        rule = optimizer.moments.apply
        optimizer.moments.apply = lambda p, g, s, r: rule(
            p, g, s, lambda *t: (sizes.append(t[0].numel()), r(*t))
        )
        for grad in grads:
            param.grad = grad.clone()
            optimizer.step()
        return param.detach(), optimizer.state[param], sizes

    whole, whole_state, whole_sizes = trained(1 << 30)
    chunked, chunked_state, chunked_sizes = trained(4)
    assert whole_sizes == [10] * 3 and chunked_sizes == [4, 4, 2] * 3
    assert torch.equal(chunked, whole)
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(chunked_state[key], whole_state[key])
