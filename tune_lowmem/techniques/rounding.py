"""How pure bf16 (no fp32 master weights) writes each weight update: stochastically rounded, or
Kahan-compensated, instead of rounded to nearest.

Pure bf16 rounds every `w + update` to the nearest bf16, whose spacing near |w| is |w| / 128:
once the learning rate is cut, most updates are smaller than half a step and vanish, and
training stalls. Two remedies, both run the unchanged optimizer with the half weights and
gradients promoted to fp32 for the duration of the step (`promoted_step`: the update is computed
exactly; optimizer state stays bf16), then write the weight back to bf16 differently:

- stochastic (`stochastic_step`): round up or down with probability equal to the distance from
  the neighbour, so the stored weight is right in expectation: 16 random bits are added below
  the bf16 mantissa of the fp32 result and the low 16 bits are cut (public integer views).
  No persistent extra state.
- kahan (`kahan_step`): round to nearest and keep what rounding lost in a compensation buffer
  per half weight (bf16, in the optimizer's state as `KAHAN_STATE`, so checkpoints, the
  measurement and the prediction count it), added to the next update: nothing is lost, updates
  far below the spacing add up exactly. +2 bytes per half weight (one more bf16 state buffer).

Transient memory: while the step runs, every bf16 weight and its gradient are held in fp32
(+4 bytes per half weight; kahan also keeps the bf16 weight, +2; the activations are already
freed then).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

LOW_BITS = 1 << 16  # fp32 bits below the bf16 mantissa
HIGH_MASK = -LOW_BITS  # as int32: 0xFFFF0000, keeps sign, exponent and the 7 bf16 mantissa bits
KAHAN_STATE = "kahan_compensation"  # the optimizer-state key of Kahan's compensation buffer

# (the parameter, its fp32 value after the step) -> its new bf16 value
WriteBack = Callable[[nn.Parameter, torch.Tensor], torch.Tensor]


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


def promoted_step(
    optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter], write_back: WriteBack
) -> None:
    """`optimizer.step()` with the bf16 `parameters` and gradients in fp32; `write_back` turns
    each fp32 result into the new bf16 weight."""
    half = stepped_half(parameters)
    for p in half:
        p.data = p.data.float()
        p.grad = p.grad.float()
    optimizer.step()
    for p in half:
        p.data = write_back(p, p.data)
        p.grad = p.grad.to(torch.bfloat16)
        for key, state in optimizer.state.get(p, {}).items():  # first step: state created fp32
            if torch.is_tensor(state) and state.shape == p.shape and state.dtype != torch.bfloat16:
                optimizer.state[p][key] = state.to(torch.bfloat16)


def stepped_half(parameters: list[nn.Parameter]) -> list[nn.Parameter]:
    """The bf16 parameters the coming step updates."""
    return [p for p in parameters if p.dtype == torch.bfloat16 and p.grad is not None]


def stochastic_step(
    optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter], generator: torch.Generator
) -> None:
    """`optimizer.step()` with the bf16 `parameters` updated in fp32, then stochastically rounded."""
    promoted_step(optimizer, parameters, lambda p, new: stochastic_round_bf16(new, generator))


def kahan_step(optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter]) -> None:
    """`optimizer.step()` with the bf16 `parameters` updated in fp32, the update plus the carried
    compensation rounded to nearest, and what that rounding lost carried to the next step."""
    before = {p: p.data for p in stepped_half(parameters)}  # the bf16 weights, kept for the step
    promoted_step(
        optimizer, parameters, lambda p, new: kahan_add(optimizer.state[p], before[p], new)
    )


def kahan_add(state: dict, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Kahan summation of the update new - old into the bf16 weight `old`: w' = bf16(w + u + c),
    c' = the part of u + c that did not reach w' (in fp32, stored in bf16 in `state`)."""
    if KAHAN_STATE not in state:
        state[KAHAN_STATE] = torch.zeros_like(old)
    compensation = state[KAHAN_STATE]
    start = old.float()
    update = new - start + compensation.float()
    rounded = (start + update).to(torch.bfloat16)
    compensation.copy_(update - (rounded.float() - start))
    return rounded
