"""8-bit blockwise quantization of optimizer state, after bitsandbytes' 8-bit optimizers
(Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization").

A tensor is cut into blocks of `BLOCK` consecutive elements; each block keeps its absolute
maximum (fp32, the block's scale) and one byte per element: the index of the nearest value of a
256-value code after division by the scale. The code is bitsandbytes' dynamic tree code
(`dynamic_code`): a decimal exponent from 10^-6 to 10^0 and a linear fraction whose resolution
grows with the magnitude, so values from about 1e-7 of the block's maximum up to it keep a few
percent of relative precision, where a linear code would round everything under 1/256 to zero.
Signed for Adam's first moment, unsigned for the second (stored as its square root, which halves
the range of exponents the code must span). Byte 0 always means 0.0, so masking the bytes with a
sparse weight's mask (`techniques.sparsity`) zeroes the values.

Memory: one byte per element plus 4 bytes per block of 256 (1.016 bytes per element).
"""

from __future__ import annotations

import functools
import itertools
import math

import torch
import torch.nn.functional as F

BLOCK = 256
SCALES = "_scales"  # the suffix of a blockwise-quantized state's per-block scales
EXPONENTS = 7  # decimal exponents 10^-6 .. 10^0, as bitsandbytes' default


def blocks(numel: int) -> int:
    """How many scales `numel` quantized elements keep."""
    return math.ceil(numel / BLOCK)


@functools.cache
def dynamic_code(signed: bool) -> tuple[float, ...]:
    """The 256 sorted values of the dynamic tree code on [-1, 1] (signed) or [0, 1]: per decimal
    exponent e = -6 .. 0, the midpoints of an even split of [0.1, 1] x 10^e into 2^(e + 6)
    pieces (twice as many unsigned), mirrored when signed, plus 0 and 1."""
    values = [0.0, 1.0]
    for step in range(EXPONENTS):
        pieces = 2 ** (step + (0 if signed else 1))
        edges = [0.1 + 0.9 * k / pieces for k in range(pieces + 1)]
        scale = 10.0 ** (step - EXPONENTS + 1)
        means = [scale * (a + b) / 2 for a, b in itertools.pairwise(edges)]
        values += means + ([-m for m in means] if signed else [])
    assert len(values) == 256
    return tuple(sorted(values))


class Code:
    """One code (signed or not) with byte 0 meaning 0.0: the byte is the sorted index less the
    index of 0, modulo 256. Its tables are built per call on the data's device (1 KB each), so
    that it also runs on the profiler's fake tensors."""

    def __init__(self, signed: bool):
        self.sorted = dynamic_code(signed)
        self.zero = self.sorted.index(0.0)
        self.bytes_to_values = self.sorted[self.zero :] + self.sorted[: self.zero]
        self.midpoints = tuple((a + b) / 2 for a, b in itertools.pairwise(self.sorted))

    def quantize_(self, values: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> None:
        """Write the fp32 `values` (flat) into `codes` (uint8, flat) and their blocks' `scales`."""
        count = values.numel()
        padded = F.pad(values, (0, blocks(count) * BLOCK - count)).view(-1, BLOCK)
        scales.copy_(padded.abs().amax(dim=1))
        normed = padded / scales.clamp_min(torch.finfo(torch.float32).tiny)[:, None]
        midpoints = torch.tensor(self.midpoints, device=values.device)
        index = torch.bucketize(normed.view(-1)[:count], midpoints)
        codes.copy_(index.sub_(self.zero).remainder_(256))

    def dequantize(self, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        """The fp32 values of `codes` (flat) with their blocks' `scales`."""
        table = torch.tensor(self.bytes_to_values, device=codes.device)
        per_element = scales.repeat_interleave(BLOCK)[: codes.numel()]
        return table[codes.long()].mul_(per_element)


SIGNED, UNSIGNED = Code(signed=True), Code(signed=False)
