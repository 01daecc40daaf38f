"""Fused BN-ReLU-conv units and nested checkpointing: exact against the plain model, cheaper in
stored activations, and with the recomputation they cost visible in FLOPs."""

import functools

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tests.conftest import tiny_wrn_config
from tune_lowmem.config import ConfigError
from tune_lowmem.memory.predict import predict
from tune_lowmem.memory.tracker import StorageTracker
from tune_lowmem.models.fused_norm import batch_statistics, bn_relu_conv
from tune_lowmem.models.wideresnet import WideResNet

MODES = ("unit", "block")


@functools.cache
def step(dtype=torch.float64, fused="none", strategy="none", batch=6):
    """Loss, gradients and BN buffers after one training forward/backward of WRN-10-2 on 16x16
    images (its first block has a 1x1 shortcut, its others an identity)."""
    torch.manual_seed(0)
    model = WideResNet(depth=10, width=2).to(dtype)
    model.set_fused_norm(fused)
    model.set_grad_checkpointing(strategy)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, 16, 16, generator=generator).to(dtype)
    y = torch.randint(0, 10, (batch,), generator=generator)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    grads = {n: p.grad.double() for n, p in model.named_parameters()}
    return loss.detach().double(), grads, {n: b.double() for n, b in model.state_dict().items()}


@pytest.mark.parametrize("fused", MODES)
@pytest.mark.parametrize("strategy", ["none", "residual-2*", "residual-2*-nested"])
def test_fused_norm_is_exact_in_float64(fused, strategy):
    ref_loss, ref_grads, ref_state = step()
    loss, grads, state = step(fused=fused, strategy=strategy)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=0)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-9, atol=1e-12, msg=name)
    if strategy == "none":  # a checkpointed BN updates its running statistics again when recomputed
        for name in ref_state:
            torch.testing.assert_close(
                state[name], ref_state[name], rtol=1e-12, atol=1e-14, msg=name
            )


@pytest.mark.parametrize(
    "fused,dtype",
    [
        ("unit", torch.float32),
        ("block", torch.float32),
        ("block", torch.bfloat16),
        ("block", torch.float16),
    ],
)
def test_fused_norm_is_as_accurate_as_plain_in_low_precision(fused, dtype):
    """Against the float64 result, the fused model's error is of the plain model's size."""
    _, truth, _ = step()
    _, plain, _ = step(dtype=dtype)
    _, ours, _ = step(dtype=dtype, fused=fused)

    def error(grads):
        return max(((grads[n] - truth[n]).norm() / truth[n].norm()).item() for n in truth)

    assert error(ours) <= 3 * error(plain) + 1e-6


def test_fused_norm_keeps_parameters_and_evaluation():
    plain, fused = WideResNet(depth=10, width=1), WideResNet(depth=10, width=1)
    fused.set_fused_norm("block")
    assert fused.state_dict().keys() == plain.state_dict().keys()
    fused.load_state_dict(plain.state_dict())
    x = torch.randn(3, 3, 32, 32)
    torch.testing.assert_close(fused.eval()(x), plain.eval()(x))
    with pytest.raises(ValueError, match="fused_norm: 'half'"):
        fused.set_fused_norm("half")


def test_evaluation_runs_each_block_in_the_chunks_it_trains_in():
    """In eval mode under no_grad (an evaluation pass) a fused block computes batch chunk by
    chunk, as its training units do, so its convolutions run at a chunk's batch: the outputs
    are the plain model's."""
    plain, fused = WideResNet(depth=10, width=1), WideResNet(depth=10, width=1)
    fused.set_fused_norm("block")
    fused.load_state_dict(plain.state_dict())
    plain_sizes, fused_sizes = batch_sizes_seen(plain), batch_sizes_seen(fused)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(fused.eval()(x), plain.eval()(x))
    assert plain_sizes == [4] and fused_sizes == [1, 1, 1, 1]


def batch_sizes_seen(model: WideResNet) -> list[int]:
    """The batch sizes the first block's first convolution is called with, appended as called."""
    sizes: list[int] = []
    model.blocks[0].conv1.register_forward_hook(
        lambda module, args, out: sizes.append(args[0].shape[0])
    )
    return sizes


def conv_flops(fused: str) -> tuple[int, int, dict[str, int]]:
    """Forward and backward FLOPs of WRN-10-2 (batch 2), and the forward FLOPs of each conv."""
    torch.manual_seed(0)
    model = WideResNet(depth=10, width=2)
    model.set_fused_norm(fused)
    x = torch.randn(2, 3, 32, 32)
    with FlopCounterMode(display=False) as forward:
        out = model(x).sum()
    with FlopCounterMode(display=False) as backward:
        out.backward()
    per_module = {
        name: sum(counts.values())
        for name, counts in forward.get_flop_counts().items()
        if name.endswith(("conv1", "conv2", "shortcut"))
    }
    return forward.get_total_flops(), backward.get_total_flops(), per_module


def test_recomputation_costs_exactly_the_convolutions_it_repeats():
    forward, backward, convs = conv_flops("none")
    assert conv_flops("unit")[:2] == (forward, backward)  # only elementwise work is recomputed
    block_forward, block_backward, _ = conv_flops("block")
    conv1 = {name.removesuffix(".conv1"): f for name, f in convs.items() if name.endswith("conv1")}
    conv2 = sum(f for name, f in convs.items() if name.endswith("conv2"))
    shortcut_blocks = {
        name.removesuffix(".shortcut") for name in convs if name.endswith("shortcut")
    }
    # forward: conv1 twice (BN statistics of its output first, then the output chunk by chunk)
    assert block_forward == forward + sum(conv1.values())
    # backward: conv1 recomputed; conv2's input gradient twice; conv1's too in identity blocks
    twice = sum(f for block, f in conv1.items() if block not in shortcut_blocks)
    assert block_backward == backward + sum(conv1.values()) + conv2 + twice


def test_fused_norm_and_nesting_lower_predicted_activations():
    def activation(**flat):
        return predict(tiny_wrn_config(**{"schedule.batch_size": 8, **flat})).activation_bytes

    paper = activation(checkpoint="residual-2*")
    assert activation(checkpoint="residual-2*-nested") < paper
    assert activation(checkpoint="residual-2*", **{"model.fused_norm": "unit"}) < paper
    assert activation(checkpoint="residual-2*", **{"model.fused_norm": "block"}) < 0.8 * paper


def test_config_refuses_unknown_modes_and_autocast():
    with pytest.raises(ConfigError, match="model.fused_norm: 'all'"):
        tiny_wrn_config(**{"model.fused_norm": "all"})
    with pytest.raises(
        ConfigError, match="model.fused_norm: 'block' is not allowed with precision"
    ):
        tiny_wrn_config(**{"model.fused_norm": "block", "precision": "amp-bf16"})
    simulated = {"microbatch.size": 10, "microbatch.mode": "simulated"}
    with pytest.raises(ConfigError, match="model.fused_norm: 'unit' is not allowed with simulated"):
        tiny_wrn_config(**{"model.fused_norm": "unit", **simulated})


def test_unit_backward_holds_no_fp32_copy_of_a_half_weight():
    """A half unit's backward accumulates its weight gradient in fp32 (4 bytes a weight) beside
    a half chunk result and the half gradient (2 + 2 at most, less in practice); a whole fp32
    copy of the weight besides (4 more) would break the bound. The activations are tiny here."""
    bn = torch.nn.BatchNorm2d(64).bfloat16()
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).bfloat16()
    x = torch.randn(2, 64, 4, 4, dtype=torch.bfloat16, requires_grad=True)
    out = bn_relu_conv(x, bn, conv, batch_statistics(x, bn))
    grad = torch.ones_like(out)
    with StorageTracker([x, out, grad]) as tracker:
        out.backward(grad)
    assert tracker.peak() < 7 * conv.weight.numel()


def test_a_one_chunk_backward_sums_no_weight_gradient_in_fp32():
    """With one image a chunk there is nothing to sum: the unit's weight gradient is its one
    chunk's, in the weight's dtype (2 bytes a weight), with no fp32 sum beside it (4 more); the
    activations are tiny here. Its bits are the one chunk's gradient's."""
    bn = torch.nn.BatchNorm2d(64).bfloat16()
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).bfloat16()
    x = torch.randn(1, 64, 4, 4, dtype=torch.bfloat16, requires_grad=True)
    out = bn_relu_conv(x, bn, conv, batch_statistics(x, bn), chunks=1)
    grad = torch.ones_like(out)
    with StorageTracker([x, out, grad]) as tracker:
        out.backward(grad)
    assert tracker.peak() < 3 * conv.weight.numel()
    mean, invstd = (s[:, None, None] for s in batch_statistics(x.detach(), bn))
    y = (x.detach().float() - mean) * invstd * bn.weight.float()[:, None, None]
    y = (y + bn.bias.float()[:, None, None]).relu().bfloat16()  # as the unit computes it
    expected = torch.nn.grad.conv2d_weight(y, conv.weight.shape, grad, padding=1)
    assert torch.equal(conv.weight.grad, expected)
