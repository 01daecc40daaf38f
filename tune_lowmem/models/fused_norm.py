"""BN-ReLU-conv units that store only their input, recomputing the rest in the backward pass.

PyTorch's own BN -> ReLU -> conv keeps two activation-sized tensors for the backward pass: the
BN input and the ReLU output (which the conv saves as its input). Two exact replacements:

- `bn_relu_conv` (`BatchNormReluConv`): one unit; keeps the BN input and the per-channel batch
  statistics, recomputes the normalised activation and its ReLU in the backward pass. No extra
  convolution: the recomputation is elementwise.
- `fused_block` (`FusedBlock`): a whole pre-activation residual block (BN-ReLU-conv-BN-ReLU-conv
  plus identity or BN-ReLU-1x1-conv shortcut); keeps only the block input and the statistics of
  both BNs. Its forward computes conv1 twice (its output's BN statistics first, then the
  output chunk by chunk), so the middle activation never exists whole. Its backward recomputes
  the middle activation and works in one activation-sized buffer that holds, in turn, the
  middle activation, its gradient and the input's gradient; to overwrite in place it computes
  a convolution's input gradient twice (once for the BN reductions, once for the result): in
  all, 1 more convolution per block forward and 3 more per backward (2 in a shortcut block).

A conv may hold its weight packed (a sparse layer's nonzero values: `techniques.packed`): the
units then take the stored tensor, build the dense weight with the conv's `unpacked` while they
compute, and give back its gradient through the conv's `packed` (`stored_weight`), so the dense
weight is never saved between forward and backward; the block's backward builds each dense weight
where it is used (conv1's twice) and gathers each gradient as soon as it is complete, so a dense
weight is alive only while its convolution's part of the backward runs.

Both work on batch chunks, so a normalised tensor never exists at full size: the extra memory is
a few chunk-sized temporaries. The results and every gradient are those of the plain modules in
training mode (batch statistics) up to floating-point rounding; the running statistics are
updated as `nn.BatchNorm2d` updates them (`batch_statistics`). BN arithmetic is fp32 (or fp64)
whatever the activations' dtype, as PyTorch's half-precision batch norm computes it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .conv_grad import conv_gradients

DEFAULT_CHUNKS = 16
CHANNELS = (0, 2, 3)  # the dimensions a BN statistic reduces over


def batch_statistics(
    x: torch.Tensor, bn: nn.BatchNorm2d, chunks: int = DEFAULT_CHUNKS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel batch mean and 1/sqrt(var + eps) of `x` (fp32, or x's dtype if wider),
    updating `bn`'s running statistics as its own forward would."""
    return _statistics(x.chunk(chunks), bn, x.dtype)


def _statistics(parts, bn: nn.BatchNorm2d, dtype: torch.dtype):
    """`batch_statistics` of the tensor whose batch chunks `parts` yields, in one pass (sums
    of values and squares accumulated in fp64, so the variance does not cancel)."""
    with torch.no_grad():
        total = squares = count = 0
        for part in parts:
            count += part.numel() // part.shape[1]
            part = part.double()
            total = total + part.sum(CHANNELS)
            squares = squares + part.square().sum(CHANNELS)
        mean = total / count
        var = (squares / count - mean.square()).clamp_(min=0)
        if bn.training and bn.track_running_stats:
            bn.num_batches_tracked.add_(1)
            factor = bn.momentum if bn.momentum is not None else 1.0 / bn.num_batches_tracked.item()
            unbiased = var * (count / max(count - 1, 1))
            bn.running_mean.mul_(1 - factor).add_(mean.to(bn.running_mean.dtype), alpha=factor)
            bn.running_var.mul_(1 - factor).add_(unbiased.to(bn.running_var.dtype), alpha=factor)
        wide = torch.promote_types(dtype, torch.float32)
        return mean.to(wide), torch.rsqrt(var + bn.eps).to(wide)


def geometry(conv: nn.Conv2d) -> tuple:
    """The conv's (stride, padding, dilation, groups, weight codec); refuses what the units do
    not compute."""
    if conv.bias is not None or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        raise ValueError("conv: only bias-free, zero-padded convolutions with numeric padding")
    return conv.stride, conv.padding, conv.dilation, conv.groups, stored_weight(conv)


def stored_weight(conv: nn.Conv2d) -> tuple:
    """How the conv stores its weight: (stored tensor -> dense weight, dense gradient -> the
    stored tensor's gradient); the identity for a plain conv."""
    return getattr(conv, "unpacked", _same), getattr(conv, "packed", _same)


def _same(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def bn_relu_conv(
    x: torch.Tensor,
    bn: nn.BatchNorm2d,
    conv: nn.Conv2d,
    stats: tuple[torch.Tensor, torch.Tensor],
    chunks: int = DEFAULT_CHUNKS,
) -> torch.Tensor:
    """conv(relu(bn(x))) in training mode with the batch statistics `stats` (`batch_statistics`
    of `x`: pass the same ones to every conv that reads this BN-ReLU, so the running statistics
    are updated once)."""
    return BatchNormReluConv.apply(
        x, bn.weight, bn.bias, conv.weight, *stats, geometry(conv), chunks
    )


def fused_block(
    x: torch.Tensor,
    bn1: nn.BatchNorm2d,
    conv1: nn.Conv2d,
    bn2: nn.BatchNorm2d,
    conv2: nn.Conv2d,
    shortcut: nn.Conv2d | None,
    chunks: int = DEFAULT_CHUNKS,
) -> torch.Tensor:
    """conv2(relu(bn2(conv1(relu(bn1(x)))))) + (x or shortcut(relu(bn1(x)))), training mode."""
    shapes = (geometry(conv1), geometry(conv2), None if shortcut is None else geometry(shortcut))
    return FusedBlock.apply(
        x,
        *batch_statistics(x, bn1, chunks),
        bn1.weight,
        bn1.bias,
        conv1.weight,
        bn2.weight,
        bn2.bias,
        conv2.weight,
        None if shortcut is None else shortcut.weight,
        bn2,
        shapes,
        chunks,
    )


def chunkwise(fn, x: torch.Tensor, chunks: int = DEFAULT_CHUNKS) -> torch.Tensor:
    """`fn` of each batch chunk of `x`, written into one output as it comes (one chunk's
    temporaries alive at a time): a per-image function at the batch the fused units run at."""
    return _gather(((start, stop, fn(part)) for start, stop, part in _chunks(x, chunks)), len(x))


class BatchNormReluConv(torch.autograd.Function):
    """Forward: conv(relu(bn(x))) chunk by chunk. Saved: x and the statistics."""

    @staticmethod
    def forward(ctx, x, weight, bias, conv_weight, mean, invstd, shape, chunks):
        ctx.save_for_backward(x, weight, bias, conv_weight, mean, invstd)
        ctx.shape, ctx.chunks = shape, chunks
        norm = (weight, bias, mean, invstd)
        dense = _dense(conv_weight, shape)
        return _gather(_unit_chunks(_chunks(x, chunks), norm, dense, shape), len(x))

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, bias, conv_weight, mean, invstd = ctx.saved_tensors
        norm = (weight, bias, mean, invstd)
        grad_x, grad_weight, grad_bias, (grad_conv,) = _unit_backward(
            x, norm, [(_dense(conv_weight, ctx.shape), ctx.shape, grad_out)], ctx.chunks
        )
        grad_conv = _stored_grad(grad_conv, ctx.shape)
        return grad_x, grad_weight, grad_bias, grad_conv, None, None, None, None


class FusedBlock(torch.autograd.Function):
    """Forward: the block chunk by chunk; the middle activation is computed twice (for its BN
    statistics, then for the output) and never exists whole. Saved: the block input, the weights
    and both BNs' statistics. Backward: see the module docstring."""

    @staticmethod
    def forward(
        ctx, x, mean1, invstd1, w1, b1, conv1, w2, b2, conv2, shortcut, bn2, shapes, chunks
    ):
        norm1 = (w1, b1, mean1, invstd1)
        stored = (w1, b1, conv1, w2, b2, conv2, shortcut)
        dense1 = _dense(conv1, shapes[0])
        conv2 = _dense(conv2, shapes[1])
        shortcut = None if shortcut is None else _dense(shortcut, shapes[2])

        def mid():  # the middle activation chunk by chunk: computed twice, never whole
            return _unit_chunks(_chunks(x, chunks), norm1, dense1, shapes[0])

        mean2, invstd2 = _statistics((part for _, _, part in mid()), bn2, x.dtype)
        out = _gather(_unit_chunks(mid(), (w2, b2, mean2, invstd2), conv2, shapes[1]), len(x))
        if shortcut is None:
            out += x
        else:
            _gather(_unit_chunks(_chunks(x, chunks), norm1, shortcut, shapes[2]), len(x), out)
        ctx.save_for_backward(x, mean1, invstd1, *stored, mean2, invstd2)
        ctx.shapes, ctx.chunks = shapes, chunks
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, mean1, invstd1, w1, b1, stored1, w2, b2, stored2, stored3, mean2, invstd2 = (
            ctx.saved_tensors
        )
        shapes, chunks = ctx.shapes, ctx.chunks
        norm1, norm2 = (w1, b1, mean1, invstd1), (w2, b2, mean2, invstd2)
        # a packed conv's dense weight is built where it is used and let go after (conv1's twice),
        # and its gradient gathered at once: no dense weight waits while another conv computes
        conv1 = _dense(stored1, shapes[0])
        buffer = _gather(_unit_chunks(_chunks(x, chunks), norm1, conv1, shapes[0]), len(x))
        del conv1
        buffer, grad_w2, grad_b2, (grad_conv2,) = _unit_backward(
            buffer, norm2, [(_dense(stored2, shapes[1]), shapes[1], grad_out)], chunks, into=buffer
        )  # now its gradient
        grad_conv2 = _stored_grad(grad_conv2, shapes[1])
        convs = [(_dense(stored1, shapes[0]), shapes[0], buffer)]
        if stored3 is not None:
            convs.append((_dense(stored3, shapes[2]), shapes[2], grad_out))
        identity = len(convs) == 1
        grad_x, grad_w1, grad_b1, grad_convs = _unit_backward(
            x,
            norm1,
            convs,
            chunks,
            into=buffer if identity else None,
            residual=grad_out if identity else None,
        )
        del convs
        grad_conv1 = _stored_grad(grad_convs.pop(0), shapes[0])
        grad_shortcut = None if identity else _stored_grad(grad_convs.pop(0), shapes[2])
        return (
            grad_x,
            None,
            None,
            grad_w1,
            grad_b1,
            grad_conv1,
            grad_w2,
            grad_b2,
            grad_conv2,
            grad_shortcut,
            None,
            None,
            None,
        )


def _dense(stored: torch.Tensor, shape: tuple) -> torch.Tensor:
    """The dense weight of a conv's stored weight (`geometry`'s codec)."""
    return shape[4][0](stored)


def _stored_grad(dense: torch.Tensor, shape: tuple) -> torch.Tensor:
    """A dense weight gradient as the gradient of the conv's stored weight."""
    return shape[4][1](dense)


def _wide(t: torch.Tensor) -> torch.Tensor:
    """t in at least fp32 (itself if it is already), the precision BN arithmetic runs in."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _chunks(x: torch.Tensor, chunks: int):
    """(start, stop, view) of each batch chunk of x."""
    start = 0
    for part in x.chunk(chunks):
        yield start, start + part.shape[0], part
        start += part.shape[0]


def _normalised(part, mean, invstd):
    return (_wide(part) - mean[:, None, None]).mul_(invstd[:, None, None])


def _activation(part, norm, keep_normalised=True):
    """relu(bn(part)) in part's dtype (computed in fp32), and part normalised (or None: then the
    fp32 work happens in that one chunk-sized buffer)."""
    weight, bias, mean, invstd = norm
    xhat = _normalised(part, mean, invstd)
    y = (
        xhat.mul(_wide(weight)[:, None, None])
        if keep_normalised
        else xhat.mul_(_wide(weight)[:, None, None])
    )
    y = y.add_(_wide(bias)[:, None, None]).relu_().to(part.dtype)
    return y, xhat if keep_normalised else None


def _unit_chunks(parts, norm, conv_weight, shape):
    """(start, stop, conv(relu(bn(part)))) of each (start, stop, part) of `parts`."""
    for start, stop, part in parts:
        y = _activation(part, norm, keep_normalised=False)[0]
        yield start, stop, F.conv2d(y, conv_weight, None, *shape[:4])
        del y  # not held while the next chunk is computed


def _gather(results, batch: int, out=None):
    """The chunks of `results` [(start, stop, chunk)] as one tensor, or added to `out`."""
    for start, stop, result in results:
        if out is None:
            out = result.new_zeros((batch, *result.shape[1:]))
        out[start:stop] += result
    return out


def _masked_grad(y, convs, start, stop, grad_convs=None):
    """The gradient w.r.t. relu(bn(x)) of one chunk, summed over the convs reading it and masked
    by the ReLU; adds each conv's weight gradient to `grad_convs` if given (`_widened`)."""
    grad = None
    for index, (weight, shape, grad_out) in enumerate(convs):
        out = grad_out[start:stop]
        if grad_convs is not None:
            total = _widened(grad_convs, index)
            part = conv_gradients(y, weight, out, shape[:4], (False, True))[1]
            grad_convs[index] = part if total is None else total.add_(part)
            del total, part  # the chunk's own gradient not held through the input gradient
        part = conv_gradients(y, weight, out, shape[:4], (True, False))[0]
        grad = part if grad is None else grad.add_(part)
    return grad.masked_fill_(y <= 0, 0)


def _widened(sums: list, index: int) -> torch.Tensor | None:
    """sums[index] (a weight gradient summed over chunks so far, None before the first) taken out
    of `sums` and in at least fp32, to add the next chunk's to. The first chunk's gradient is kept
    as it comes (fp32 zeros plus it, rounded back, are its own bits) and widened only here, before
    the second is made: a one-chunk backward (a microbatch of one image) holds no fp32 copy of a
    dense weight, and a narrow sum is let go as it widens."""
    total, sums[index] = sums[index], None
    return None if total is None else _wide(total)


def _unit_backward(x, norm, convs, chunks, into=None, residual=None):
    """Gradients of BN-ReLU followed by `convs` [(weight, shape, grad of its output)]: w.r.t. x
    (plus `residual` if given), BN weight and bias, and each conv weight. With `into` (which may
    alias x or a conv's output gradient) the input gradient is written there chunk by chunk and
    the masked gradient is computed twice; otherwise it is kept in a new buffer in between."""
    weight, bias, mean, invstd = norm
    keep = into is None
    grad_x = torch.empty_like(x) if keep else into
    grad_convs = [None] * len(convs)
    sum_g, sum_gx = torch.zeros_like(mean), torch.zeros_like(mean)
    for start, stop, part in _chunks(x, chunks):
        y, xhat = _activation(part, norm)
        grad = _masked_grad(y, convs, start, stop, grad_convs)
        sum_g += _wide(grad).sum(CHANNELS)
        sum_gx += xhat.mul_(grad).sum(CHANNELS)
        if keep:
            grad_x[start:stop] = grad
    del y, xhat, grad  # the last chunk's: not held through the second pass
    count = x.numel() // x.shape[1]
    scale = (_wide(weight) * invstd)[:, None, None]
    mean_g, mean_gx = (sum_g / count)[:, None, None], (sum_gx / count)[:, None, None]
    for start, stop, part in _chunks(x, chunks):
        grad = (
            grad_x[start:stop]
            if keep
            else _masked_grad(_activation(part, norm, False)[0], convs, start, stop)
        )
        result = _normalised(part, mean, invstd).mul_(mean_gx)
        result = _wide(grad).sub_(mean_g).sub_(result).mul_(scale)
        if residual is not None:
            result += residual[start:stop]
        grad_x[start:stop] = result
    del grad, result
    grad_convs.reverse()  # each fp32 sum let go as it is cast, not all held to the end
    grad_convs = [grad_convs.pop().to(w.dtype) for w, _, _ in convs]
    return grad_x, sum_gx.to(weight.dtype), sum_g.to(bias.dtype), grad_convs
