"""Adam's moments in less memory than the parameters' dtype: an explicitly LOSSY choice.

`TrialConfig.adam_state` picks how the task's Adam (`optim.FairseqAdam`) keeps its two moments:

- ``param``: in the parameter's dtype, as torch does (the default, exact);
- ``bf16``: LOSSY, in bf16 (2 bytes each instead of 4), where the moments would be fp32 (fp32
  weights, the amp modes, and fp16 weights, whose moments are fp32: `optim.Moments`; pure bf16
  weights' moments are bf16 already); each step widens them to fp32, updates and rounds back to
  nearest, a chunk of `optim.CHUNK` elements at a time;
- ``int8``: LOSSY, 8-bit blockwise-quantized after bitsandbytes' 8-bit Adam
  (`techniques.blockwise`: one byte per element plus an fp32 scale per block of 256, 1.016 bytes
  per element; the second moment kept as its square root under the unsigned dynamic code). Each
  parameter is dequantized to fp32 in chunks of `CHUNK` elements, updated and requantized, so
  the step's transient fp32 copies stay a few MB. As bitsandbytes does, parameters of fewer than
  `MIN_QUANTIZED` elements (biases, norms) keep their moments in their own dtype.

The state is created when the optimizer is attached (every step holds the same, and the
profiler's dry run holds the real buffers, so it counts them exactly); it lives in the
optimizer's `state`, so checkpoints, sparsity's masking and the measurement see it.
"""

from __future__ import annotations

from typing import Any

import torch

from ..optim import FairseqAdam, Moments, Rule, chunks
from ..validation import choice, require
from . import blockwise, settings
from .base import Technique
from .precision import storage_dtype

ADAM_STATES = ("param", "bf16", "int8")
MIN_QUANTIZED = 4096  # bitsandbytes' min_8bit_size: smaller tensors keep their moments unquantized
CHUNK = 256 * blockwise.BLOCK  # elements dequantized at once (a whole number of blocks)
# the 8-bit moments, (state key, its code): the first, and the second's square root
QUANTIZED = (("exp_avg", blockwise.SIGNED), ("exp_avg_sq_root", blockwise.UNSIGNED))


class Bf16Moments(Moments):
    """Moments stored in bf16, updated in fp32 and rounded to nearest (lossy)."""

    def create(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        return {key: t.to(torch.bfloat16) for key, t in super().create(param).items()}

    def apply(self, param: torch.Tensor, grad: torch.Tensor, state: dict, rule: Rule) -> None:
        for piece, grad_piece, *moments in chunks(
            param, grad, state["exp_avg"], state["exp_avg_sq"]
        ):
            wide = [moment.float() for moment in moments]  # a chunk's fp32 copies
            rule(piece, grad_piece, *wide)
            for moment, values in zip(moments, wide, strict=True):
                moment.copy_(values)


class Int8Moments(Moments):
    """Moments as 8-bit codes with per-block scales (lossy; see the module docstring)."""

    def create(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        if param.numel() < MIN_QUANTIZED:
            return super().create(param)
        scales = torch.zeros(blockwise.blocks(param.numel()), device=param.device)
        state = {}
        for key, _ in QUANTIZED:
            state[key] = torch.zeros_like(param, dtype=torch.uint8)
            state[key + blockwise.SCALES] = scales.clone()
        return state

    def apply(self, param: torch.Tensor, grad: torch.Tensor, state: dict, rule: Rule) -> None:
        if "exp_avg_sq" in state:  # a small parameter's moments, unquantized
            super().apply(param, grad, state, rule)
            return
        flat_param, flat_grad = param.view(-1), grad.reshape(-1)
        for start in range(0, param.numel(), CHUNK):
            end = min(start + CHUNK, param.numel())
            pieces = [(code, *self._piece(state, key, start, end)) for key, code in QUANTIZED]
            exp_avg, root = (code.dequantize(codes, scales) for code, codes, scales in pieces)
            exp_avg_sq = root.square_()
            rule(flat_param[start:end], flat_grad[start:end], exp_avg, exp_avg_sq)
            for (code, codes, scales), values in zip(pieces, (exp_avg, exp_avg_sq.sqrt_())):
                code.quantize_(values, codes, scales)

    @staticmethod
    def _piece(state: dict, key: str, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The codes of elements start..end and their blocks' scales (views)."""
        first, last = start // blockwise.BLOCK, blockwise.blocks(end)
        return state[key].view(-1)[start:end], state[key + blockwise.SCALES][first:last]


FORMATS: dict[str, type[Moments]] = {"param": Moments, "bf16": Bf16Moments, "int8": Int8Moments}


class AdamState(Technique):
    """The `adam_state` field: the task's Adam with its moments stored as the field says."""

    NAME = "adam_state"
    SETTINGS = settings.ADAM_STATE

    @classmethod
    def enabled(cls, config) -> bool:
        return config.adam_state != "param"

    @classmethod
    def validate(cls, config, task) -> None:
        state = choice(config.adam_state, ADAM_STATES, "adam_state")
        if state == "param":
            return
        refusal = f"{state!r} is not allowed"
        optimizer = getattr(task, "OPTIMIZER", None)
        require(
            optimizer is not None and issubclass(optimizer, FairseqAdam),
            "adam_state",
            f"{refusal} for task {config.task} (its optimizer is "
            f"{getattr(optimizer, '__name__', 'not declared')}, not Adam); allowed: param",
        )
        require(
            state != "bf16" or storage_dtype(config.precision) != torch.bfloat16,
            "adam_state",
            f"{refusal} with precision {config.precision} (its moments are already bf16); "
            "allowed: param, int8",
        )
        require(
            config.precision_update == "nearest",
            "adam_state",
            f"{refusal} with precision_update {config.precision_update}; allowed: param",
        )

    @classmethod
    def shape_settings(cls, config) -> dict[str, Any]:
        return {"adam_state": config.adam_state}  # the state the dry run's optimizer holds

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Set the optimizer's moment format and create every parameter's state now."""
        require(
            isinstance(optimizer, FairseqAdam),
            "adam_state",
            f"{self.config.adam_state!r} is not allowed with {type(optimizer).__name__}; "
            "allowed: param",
        )
        optimizer.moments = FORMATS[self.config.adam_state]()
        for group in optimizer.param_groups:
            for param in group["params"]:
                optimizer.init_state(param)
