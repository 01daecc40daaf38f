"""`models.conv_grad`: a convolution's gradients from the real input and weight, the bits of
`torch.nn.grad`'s without the whole copy of its expanded stand-in."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from tune_lowmem.memory.workspace import cpu_allocator_reports, exported_trace
from tune_lowmem.models.conv_grad import conv_gradients

# (input shape, weight shape, (stride, padding, dilation, groups)), conv1d and conv2d
CASES = [
    ((2, 4, 9, 7), (6, 2, 3, 3), ((2, 1), (1, 2), (1, 2), 2)),
    ((3, 4, 11), (5, 4, 3), ((1,), (1,), (2,), 1)),
]
NN_GRAD = {
    3: (torch.nn.grad.conv1d_input, torch.nn.grad.conv1d_weight),
    4: (torch.nn.grad.conv2d_input, torch.nn.grad.conv2d_weight),
}


def tensors(x_shape, w_shape, geometry, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(x_shape, generator=g).to(dtype)
    weight = torch.randn(w_shape, generator=g).to(dtype)
    conv = torch.nn.functional.conv2d if len(x_shape) == 4 else torch.nn.functional.conv1d
    grad = torch.randn(conv(x, weight, None, *geometry).shape, generator=g).to(dtype)
    return x, weight, grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape, geometry", CASES)
def test_the_gradients_are_torch_nn_grads_bit_for_bit(x_shape, w_shape, geometry, dtype):
    x, weight, grad = tensors(x_shape, w_shape, geometry, dtype)
    conv_input, conv_weight = NN_GRAD[len(x_shape)]
    grad_x, grad_w = conv_gradients(x, weight, grad, geometry)
    assert torch.equal(grad_x, conv_input(x.shape, weight, grad, *geometry))
    assert torch.equal(grad_w, conv_weight(x, weight.shape, grad, *geometry))
    only_x, none = conv_gradients(x, weight, grad, geometry, (True, False))
    assert none is None and torch.equal(only_x, grad_x)
    none, only_w = conv_gradients(x, weight, grad, geometry, (False, True))
    assert none is None and torch.equal(only_w, grad_w)


def peak_bytes(fn) -> int:
    """The most bytes torch's CPU allocator had live at once while `fn` ran, beyond those live
    when it began (its result freed before the profiler stops)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        result = fn()
        del result
    live = peak = 0
    for _, _, nbytes in cpu_allocator_reports(exported_trace(profiler)):
        live += nbytes
        peak = max(peak, live)
    return peak


def test_the_weight_gradient_copies_no_stand_in_weight():
    """torch.nn.grad's weight gradient copies its expanded stand-in weight whole inside the
    kernel; from the real weight, the call's peak is at least that copy lower."""
    x, weight, grad = tensors(
        (1, 32, 8, 8), (64, 32, 3, 3), ((1, 1), (1, 1), (1, 1), 1), torch.float32
    )
    geometry = ((1, 1), (1, 1), (1, 1), 1)
    ours = peak_bytes(lambda: conv_gradients(x, weight, grad, geometry, (False, True)))
    nn_grad = peak_bytes(lambda: torch.nn.grad.conv2d_weight(x, weight.shape, grad, *geometry))
    assert ours <= nn_grad - weight.numel() * weight.element_size()
