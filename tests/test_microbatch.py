import torch
from torch import nn

from tune_lowmem.data.batch import split_rows
from tune_lowmem.models.wideresnet import WideResNet
from tune_lowmem.techniques import microbatch


def accumulated_grads(model, x, y, size):
    model.zero_grad()
    for xb, yb in split_rows((x, y), size):
        loss = nn.functional.cross_entropy(model(xb), yb, reduction="sum") / x.shape[0]
        loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def data(n=12):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_split_is_aligned_and_complete():
    x, y = data(10)
    parts = split_rows((x, y), 4)
    assert [p[0].shape[0] for p in parts] == [4, 4, 2]
    assert torch.equal(torch.cat([p[1] for p in parts]), y)
    assert split_rows((x, y), None) == [(x, y)]


def test_true_microbatching_equals_full_batch_without_batch_statistics():
    torch.manual_seed(0)
    model = WideResNet(depth=10, width=1).eval()  # BN uses running statistics: no batch coupling
    x, y = data()
    full = accumulated_grads(model, x, y, None)
    micro = accumulated_grads(model, x, y, 3)
    for name in full:
        torch.testing.assert_close(micro[name], full[name], rtol=1e-4, atol=1e-6, msg=name)


def test_true_microbatching_equals_full_batch_for_a_model_without_batch_norm():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 30 * 30, 10))
    x, y = data()
    full = accumulated_grads(model, x, y, None)
    micro = accumulated_grads(model, x, y, 4)
    for name in full:
        torch.testing.assert_close(micro[name], full[name], rtol=1e-4, atol=1e-6)


def test_in_train_mode_batch_norm_statistics_are_per_microbatch():
    bn = nn.BatchNorm2d(3)
    x = torch.cat([torch.zeros(2, 3, 4, 4), torch.ones(2, 3, 4, 4) * 10]) + torch.randn(4, 3, 4, 4)
    whole = bn(x)
    per_micro = torch.cat([bn(part) for (part,) in split_rows((x,), 2)])
    # Each microbatch is normalised by its own mean: each half is centred at zero on its own.
    assert per_micro[:2].mean().abs() < 1e-5 and per_micro[2:].mean().abs() < 1e-5
    assert whole[:2].mean() < -0.5  # the full batch's statistics put the first half far below zero
    assert not torch.allclose(whole, per_micro)


def test_simulated_microbatching_matches_true_microbatching_forward():
    torch.manual_seed(0)
    model = WideResNet(depth=10, width=1)
    x, _ = data()
    true_out = torch.cat([model(xb) for (xb,) in split_rows((x,), 4)])
    running_true = model.blocks[0].bn1.running_mean.clone()
    torch.manual_seed(0)
    simulated = microbatch.apply_simulated(WideResNet(depth=10, width=1), 4)
    assert isinstance(simulated.blocks[0].bn1, microbatch.GroupBatchNorm2d)
    assert set(simulated.state_dict()) == set(model.state_dict())
    torch.testing.assert_close(simulated(x), true_out, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(simulated.blocks[0].bn1.running_mean, running_true)
    # and it differs from plain full-batch statistics
    torch.manual_seed(0)
    assert not torch.allclose(WideResNet(depth=10, width=1)(x), true_out, atol=1e-3)
