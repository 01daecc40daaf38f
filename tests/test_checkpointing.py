import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tune_lowmem.models.wideresnet import WideResNet
from tune_lowmem.techniques import checkpointing

STRATEGIES = ("residual-1", "residual-2", "residual-2*")


def loss_and_grads(strategy: str):
    torch.manual_seed(0)
    model = WideResNet(depth=16, width=1)
    checkpointing.apply(model, strategy)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 3])
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, model


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_checkpointing_keeps_loss_and_gradients(strategy):
    ref_loss, ref_grads, _ = loss_and_grads("none")
    loss, grads, model = loss_and_grads(strategy)
    assert model.grad_checkpointing == strategy
    torch.testing.assert_close(loss, ref_loss)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def backward_flops(strategy: str) -> int:
    model = WideResNet(depth=16, width=1)
    checkpointing.apply(model, strategy)
    x = torch.randn(2, 3, 32, 32)
    out = model(x).sum()
    with FlopCounterMode(display=False) as counter:
        out.backward()
    return counter.get_total_flops()


def test_checkpointing_recomputes_in_backward():
    """Recomputation shows up as extra backward FLOPs, more segments recomputed -> more FLOPs."""
    none = backward_flops("none")
    flops = {s: backward_flops(s) for s in STRATEGIES}
    assert all(f > none for f in flops.values())
    assert flops["residual-2*"] > flops["residual-2"]  # the stem and head are recomputed too


def test_segments_cover_every_module_once():
    model = WideResNet(depth=28, width=2)
    for strategy in ("none",) + STRATEGIES:
        model.set_grad_checkpointing(strategy)
        modules = [m for segment in model.segments() for m in segment]
        assert len(modules) == 14 and len({id(m) for m in modules}) == 14
    model.set_grad_checkpointing("residual-2")
    assert [len(s) for s in model.segments()] == [1, 2, 2, 2, 2, 2, 2, 1]


def test_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="checkpoint: 'every-3'"):
        WideResNet(depth=10, width=1).set_grad_checkpointing("every-3")
