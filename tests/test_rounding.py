"""Pure bf16's weight update, stochastically rounded (unbiased) or Kahan-compensated: small
updates are not lost."""

import pytest
import torch
from torch import nn

from tests.conftest import tiny_wrn_config
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.techniques.rounding import (
    KAHAN_STATE,
    kahan_step,
    stochastic_round_bf16,
    stochastic_step,
)
from tune_lowmem.train import Trainer


def test_rounds_to_a_neighbour_with_the_right_mean():
    gen = torch.Generator().manual_seed(0)
    # 1 + 2^-9 lies a quarter of the way from bf16's 1 to its next value 1 + 2^-7
    x = torch.full((200_000,), 1 + 2**-9)
    for sign in (1.0, -1.0):
        rounded = stochastic_round_bf16(sign * x, gen)
        assert set(rounded.float().abs().unique().tolist()) == {1.0, 1 + 2**-7}
        assert rounded.float().mean().item() == pytest.approx(sign * (1 + 2**-9), abs=2e-5)
    exact = torch.tensor([0.0, 1.0, -3.5, 2**-20])  # values bf16 holds come back unchanged
    assert torch.equal(stochastic_round_bf16(exact, gen).float(), exact)


def sgd_on_half_ones(stochastic: bool) -> tuple[nn.Parameter, torch.optim.Optimizer]:
    """500 SGD steps of lr 0.1 x gradient 1e-3 on bf16 weights of 1: updates of 1e-4, far under
    half of bf16's spacing at 1 (2^-8), so nearest rounding loses every one of them."""
    weight = nn.Parameter(torch.ones(4000, dtype=torch.bfloat16))
    optimizer = torch.optim.SGD([weight], lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    for _ in range(500):
        weight.grad = torch.full_like(weight, 1e-3 * (1 - 0.9))  # momentum's steady state: 1e-3
        stochastic_step(optimizer, [weight], gen) if stochastic else optimizer.step()
    return weight, optimizer


def test_small_updates_add_up_only_when_rounded_stochastically():
    nearest, _ = sgd_on_half_ones(stochastic=False)
    assert torch.equal(nearest.float(), torch.ones(4000))  # the stall
    weight, optimizer = sgd_on_half_ones(stochastic=True)
    expected = 1 - 0.1 * 1e-3 * sum(1 - 0.9 ** (k + 1) for k in range(500))  # momentum's ramp
    # 0.951: off by the bf16 momentum buffer's own rounding (0.4% of the update) at most
    assert weight.float().mean().item() == pytest.approx(expected, abs=3e-3)
    assert weight.dtype == weight.grad.dtype == torch.bfloat16
    assert optimizer.state[weight]["momentum_buffer"].dtype == torch.bfloat16


@pytest.mark.parametrize("update", ["stochastic", "kahan"])
def test_training_with_a_rounded_update_keeps_half_storage_and_resumes_exactly(update):
    small = {
        "schedule.epochs": 2,
        "data.train_subset": 80,
        "data.val_size": 20,
        "data.test_subset": 20,
    }
    config = tiny_wrn_config(**small, precision="bf16", precision_update=update)
    states = []
    straight = Trainer(config).run(on_epoch=lambda m, t: states.append(t.state_dict()))
    resumed = Trainer(config)
    resumed.load_state_dict(states[0])
    assert resumed.run()[-1]["train_loss"] == straight[-1]["train_loss"]
    nearest = Trainer(tiny_wrn_config(**small, precision="bf16")).run()
    assert nearest[-1]["train_loss"] != straight[-1]["train_loss"]  # the option is in effect
    for name, p in resumed.model.named_parameters():
        assert p.dtype == (torch.float32 if "bn" in name else torch.bfloat16), name
        assert resumed.optimizer.state[p]["momentum_buffer"].dtype == p.dtype, name


START = torch.linspace(0.5, 4.0, 2000).to(torch.bfloat16)  # bf16 spacing 2^-8 .. 2^-6


def sgd_drift(update: str, steps: int = 1000) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Plain SGD (lr 1) with gradients of 1e-4 to 3e-4, far under half of bf16's spacing at the
    weights, on bf16 weights and on the same weights in fp32 (the reference)."""
    grad = torch.linspace(1e-4, 3e-4, 2000)
    reference = nn.Parameter(START.float())
    weight = nn.Parameter(START.clone())
    optimizers = [torch.optim.SGD([p], lr=1.0) for p in (reference, weight)]
    for _ in range(steps):
        reference.grad, weight.grad = grad.clone(), grad.to(torch.bfloat16)
        optimizers[0].step()
        if update == "kahan":
            kahan_step(optimizers[1], [weight])
        else:
            optimizers[1].step()
    return weight.detach().float(), reference.detach(), optimizers[1].state[weight]


def test_kahan_tracks_fp32_where_nearest_loses_every_update():
    nearest, reference, _ = sgd_drift("nearest")
    kahan, _, state = sgd_drift("kahan")
    travelled = (reference - START.float()).abs().mean().item()  # 0.2 on average
    nearest_error = (nearest - reference).abs().mean().item()
    kahan_error = (kahan - reference).abs().mean().item()
    assert torch.equal(nearest, START.float())  # the stall: every update was lost
    assert nearest_error == pytest.approx(travelled, rel=1e-4)
    # nearest lost all of the 0.2 travelled; Kahan is off by 0.0034 on average (1.7%: bf16's
    # rounding of the weight itself, and of the bf16 compensation), never by more than a spacing
    assert kahan_error < 0.03 * nearest_error
    assert ((kahan - reference).abs() <= reference.abs() * 2.0**-7).all()
    assert (kahan + state[KAHAN_STATE].float() - reference).abs().mean() < 0.03 * travelled


def test_kahan_keeps_a_half_compensation_per_half_weight_counted_by_the_profiler(tiny_config):
    from tune_lowmem.memory.measure import measure
    from tune_lowmem.memory.predict import predict

    config = tiny_config(
        **{"precision": "bf16", "precision_update": "kahan", "schedule.batch_size": 32}
    )
    trainer = Trainer(config)
    trainer.train_step(next(iter(trainer.task.train_batches(0))))
    for name, p in trainer.model.named_parameters():
        state = trainer.optimizer.state[p]
        assert (KAHAN_STATE in state) == (p.dtype == torch.bfloat16), name
        if KAHAN_STATE in state:
            assert state[KAHAN_STATE].dtype == torch.bfloat16
            assert state[KAHAN_STATE].shape == p.shape
    half_bytes = sum(2 * p.numel() for p in trainer.model.parameters() if p.dtype == torch.bfloat16)
    plain = predict(tiny_config(**{"precision": "bf16", "schedule.batch_size": 32}))
    predicted, measured = predict(config), measure(config)
    assert predicted.optimizer_bytes == plain.optimizer_bytes + half_bytes
    assert predicted.optimizer_bytes == measured.optimizer_bytes
    assert predicted.model_bytes == measured.model_bytes
    assert predicted.total_bytes == pytest.approx(measured.total_bytes, rel=0.05)


def test_stored_and_accounted_figures_count_kahans_buffers_as_predict_does():
    """Sparse and compensated: the accounted CSR figure is `predict`'s, and the stored one holds
    the dense compensation buffers (2 bytes per bf16 weight) beside the nearest-rounding step's."""
    from tune_lowmem.memory.predict import predict
    from tune_lowmem.memory.stored import accounted

    sparse = {"precision": "bf16", "sparsity.density": 0.3}
    config = tiny_wrn_config(**sparse, precision_update="kahan")
    nearest = tiny_wrn_config(**sparse)
    assert accounted(config, "csr") == predict(config) != predict(nearest)
    half_bytes = sum(
        2 * p.numel() for p in Trainer(config).model.parameters() if p.dtype == torch.bfloat16
    )
    assert predict(config).optimizer_bytes == predict(nearest).optimizer_bytes + half_bytes


def test_stochastic_and_kahan_need_pure_bf16():
    with pytest.raises(
        ConfigError, match=r"^precision_update: 'stochastic' is not allowed with precision amp-bf16"
    ):
        TrialConfig.from_dict({"precision": "amp-bf16", "precision_update": "stochastic"})
    with pytest.raises(
        ConfigError,
        match=r"^precision_update: 'kahan' is not allowed with precision fp16",
    ):
        TrialConfig.from_dict({"precision": "fp16", "precision_update": "kahan"})
    with pytest.raises(
        ConfigError,
        match=r"^precision_update: 'exact' is not allowed; allowed: nearest, stochastic, kahan",
    ):
        TrialConfig.from_dict({"precision": "bf16", "precision_update": "exact"})
