"""A convolution's input and weight gradients computed from the real input and weight.

torch.nn.grad's conv*d_input and conv*d_weight stand a one-element tensor expanded to full size in
for the tensor they are not given (the input, or the weight), and the convolution backward kernel
makes its arguments contiguous: a whole copy of that stand-in (a dense weight's size, or an
input's) at the layer's peak, holding nothing. Handed the real tensors, as torch's autograd hands
them for `nn.Conv2d`, `aten.convolution_backward` runs the same kernel for the same gradients
(the tensor not differentiated is read for its shape alone) without the copy.
"""

from __future__ import annotations

import torch


def conv_gradients(
    x: torch.Tensor,
    weight: torch.Tensor,
    grad: torch.Tensor,
    geometry: tuple,
    needs: tuple[bool, bool] = (True, True),
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(input gradient, weight gradient) of a bias-free convolution of `x` with `weight` whose
    output gradient is `grad`; `geometry` is (stride, padding, dilation, groups), `needs` says
    which of the two to compute (the other is None)."""
    stride, padding, dilation, groups = geometry
    grad_x, grad_w, _ = torch.ops.aten.convolution_backward(
        grad,
        x,
        weight,
        None,
        stride,
        padding,
        dilation,
        False,
        [0] * (x.dim() - 2),
        groups,
        (needs[0], needs[1], False),
    )
    return grad_x, grad_w
