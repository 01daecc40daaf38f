"""Stochastic rounding of the weight update for pure bf16 (no fp32 master weights).

Pure bf16 rounds every `w + update` to the nearest bf16, whose spacing near |w| is |w| / 128:
once the learning rate is cut, most updates are smaller than half a step and vanish, and
training stalls. Rounding stochastically (up with probability equal to the distance from the
lower neighbour) makes the stored weight right in expectation, so small updates still add up.

`stochastic_step` runs the unchanged optimizer with the half weights and gradients promoted
to fp32 for the duration of the step (the update is computed exactly), then rounds each weight
back to bf16 stochastically: 16 random bits are added below the bf16 mantissa of the fp32
result, and the low 16 bits are cut (all on public integer views). Optimizer state stays bf16.
Memory: no persistent extra state; while the step runs, every bf16 weight and its gradient are
held in fp32 (+4 bytes per half weight, transient; activations are already freed then).
"""

from __future__ import annotations

import torch
from torch import nn

LOW_BITS = 1 << 16  # fp32 bits below the bf16 mantissa
HIGH_MASK = -LOW_BITS  # as int32: 0xFFFF0000, keeps sign, exponent and the 7 bf16 mantissa bits


def stochastic_round_bf16(
    values: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """fp32 `values` rounded to bf16, up or down with probability by distance (unbiased)."""
    bits = values.float().contiguous().view(torch.int32)
    noise = torch.randint(
        0, LOW_BITS, bits.shape, dtype=torch.int32, device=bits.device, generator=generator
    )
    rounded = (bits + noise) & HIGH_MASK
    return rounded.view(torch.float32).to(torch.bfloat16)


def stochastic_step(
    optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter], generator: torch.Generator
) -> None:
    """`optimizer.step()` with the bf16 `parameters` updated in fp32, then stochastically rounded."""
    half = [p for p in parameters if p.dtype == torch.bfloat16 and p.grad is not None]
    for p in half:
        p.data = p.data.float()
        p.grad = p.grad.float()
    optimizer.step()
    for p in half:
        p.data = stochastic_round_bf16(p.data, generator)
        p.grad = p.grad.to(torch.bfloat16)
        for key, state in optimizer.state.get(p, {}).items():  # first step: state created fp32
            if torch.is_tensor(state) and state.shape == p.shape and state.dtype != torch.bfloat16:
                optimizer.state[p][key] = state.to(torch.bfloat16)
