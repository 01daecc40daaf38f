"""Packed sparse training is today's masked dense training: the same weights, masks, gradients,
optimizer state and buffers after several updates that include rewirings, bit for bit where the
arithmetic is the same (`tests.packed_reference` is the masked dense reference)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_wrn_config
from tests.packed_reference import dense_views, differences, minibatches, reference_views, trainer
from tune_lowmem.config import TrialConfig
from tune_lowmem.techniques.sparsity import Sparsity

UPDATES = 4
REWIRING = {  # rewire after every update, with plenty of churn
    "sparsity.density": 0.3,
    "sparsity.period_schedule": "constant",
    "sparsity.constant_period": 1,
    "sparsity.initial_threshold": 0.05,
    "schedule.batch_size": 8,
}
# (case, config fields): the same arithmetic both ways, so bit for bit
WRN_CASES = [
    ("sgd", {}),
    ("microbatch", {"microbatch.size": 4}),
    ("residual-1", {"checkpoint": "residual-1"}),
    ("residual-2*", {"checkpoint": "residual-2*"}),
    ("residual-2-nested", {"checkpoint": "residual-2-nested"}),
    ("chain-min", {"checkpoint": "chain-min"}),
    ("fused unit", {"model.fused_norm": "unit"}),
    ("fused block + chain-min", {"model.fused_norm": "block", "checkpoint": "chain-min"}),
    ("bf16 kahan", {"precision": "bf16", "precision_update": "kahan"}),
    ("amp-bf16", {"precision": "amp-bf16"}),
    ("fused step exact", {"fused_step": "exact"}),
    ("fused step heavy-ball + microbatch", {"fused_step": "heavy-ball", "microbatch.size": 4}),
    ("csr", {"sparsity.storage": "csr"}),
    ("bitmap", {"sparsity.storage": "bitmap"}),
]


# the same operations, but half precision's elementwise CPU kernels round an element in their vector body
# and in their scalar tail differently (fused multiply-add or not), so where a weight sits in its
# tensor (packed or dense) may change the last bit of an update: equal within rounding. At the
# full learning rate a few updates of a batch-8 WRN amplify one ulp chaotically (10% in some
# gradients after 4 fp16 updates), so these run at a hundredth of it: the rounding stays a few ulps at each tensor's scale
# (`packed_reference.ULPS_AT_SCALE`).
SMALL_STEPS = {"schedule.lr_multiplier": 0.01}
REASSOCIATED = [
    ("fp16 loss scaling", {"precision": "fp16", **SMALL_STEPS}),
    ("bf16", {"precision": "bf16", **SMALL_STEPS}),
    (
        "ladder's best exact",
        {
            "precision": "bf16",
            "checkpoint": "chain-min",
            "model.fused_norm": "block",
            "fused_step": "exact",
            "microbatch.size": 2,
            "sparsity.density": 0.1,
            **SMALL_STEPS,
        },
    ),
]


def run(config, reference, monkeypatch, batches):
    trained = trainer(config, reference, monkeypatch)
    for batch in batches:
        trained.train_step(batch)
    return trained


def compared(config, monkeypatch) -> tuple[dict, dict]:
    """Packed and reference views after `UPDATES` updates on the same minibatches."""
    batches = minibatches(config, UPDATES)
    packed = run(config, False, monkeypatch, batches)
    reference = run(config, True, monkeypatch, batches)
    engine = packed.technique(Sparsity).engine
    assert engine.rewirings == UPDATES - 1 and engine.last_pruned > 0  # rewired, and moved
    return dense_views(packed), reference_views(reference)


@pytest.mark.parametrize(("case", "flat"), WRN_CASES, ids=[case for case, _ in WRN_CASES])
def test_wrn_packed_equals_masked_dense_bit_for_bit(case, flat, monkeypatch):
    packed, reference = compared(tiny_wrn_config(**{**REWIRING, **flat}), monkeypatch)
    assert differences(packed, reference, exact=True) == []


@pytest.mark.parametrize(("case", "flat"), REASSOCIATED, ids=[case for case, _ in REASSOCIATED])
def test_wrn_packed_equals_masked_dense_within_rounding(case, flat, monkeypatch):
    packed, reference = compared(tiny_wrn_config(**{**REWIRING, **flat}), monkeypatch)
    masks = [name for name in packed if name.endswith(":mask")]
    assert masks and differences(packed, reference, exact=False) == []


def test_resume_mid_run_continues_bit_for_bit(monkeypatch):
    """A checkpoint after 2 updates (layers' counts moved by a rewiring) resumes into a fresh
    trainer, whose packed layers take the checkpoint's counts, and continues exactly."""
    config = tiny_wrn_config(**{**REWIRING, "fused_step": "exact"})
    batches = minibatches(config, UPDATES)
    straight = run(config, False, monkeypatch, batches)
    first = run(config, False, monkeypatch, batches[:2])
    resumed = trainer(config, False, monkeypatch)
    before = {n: p.numel() for n, p in resumed.model.named_parameters()}
    resumed.load_state_dict(first.state_dict())
    after = {n: p.numel() for n, p in resumed.model.named_parameters()}
    assert before != after  # the rewiring moved nonzeros between layers
    for batch in batches[2:]:
        resumed.train_step(batch)
    assert differences(dense_views(resumed), dense_views(straight), exact=True) == []


def tiny_dct(**flat):
    return TrialConfig.from_dict(
        {
            "task": "dct-iwslt14",
            "device": "cpu",
            "model": {
                "embed_dim": 16,
                "ffn_dim": 32,
                "heads": 2,
                "encoder_layers": 1,
                "decoder_layers": 1,
                "encoder_kernels": [3],
                "decoder_kernels": [3],
            },
            "schedule": {"max_updates": 30, "warmup_updates": 2, "lr": 1e-2, "max_tokens": 200},
            **{k: v for k, v in REWIRING.items() if k != "schedule.batch_size"},
            **flat,
        }
    )


DCT_CASES = [
    ("adam", {}),
    ("adam microbatch", {"microbatch.size": 100}),
    ("adam checkpoint", {"checkpoint": "residual-1"}),
    ("adam fused step", {"fused_step": "exact"}),
    ("adam bf16 moments", {"adam_state": "bf16"}),
]


@pytest.mark.parametrize(("case", "flat"), DCT_CASES, ids=[case for case, _ in DCT_CASES])
def test_dct_packed_equals_masked_dense_bit_for_bit(case, flat, monkeypatch):
    packed, reference = compared(tiny_dct(**flat), monkeypatch)
    assert differences(packed, reference, exact=True) == []


def test_dct_fp16_packed_equals_masked_dense_within_rounding(monkeypatch):
    """fp16 weights with fp32 Adam moments and loss scaling: the packed layers' half matmuls
    sum in another order than the masked dense ones, as WRN's fp16 case does. The moments are
    fp32 sums of fp16 gradients, so they agree within the fp16 ulps their inputs were computed
    in (measured on an AMD EPYC without AVX-512: 184 fp32 ulps, 0.02 of an fp16 one)."""
    packed, reference = compared(tiny_dct(precision="fp16"), monkeypatch)
    assert all(t.isfinite().all() for t in packed.values() if t.is_floating_point())
    assert differences(packed, reference, exact=False, computed_in=torch.float16) == []


# mobilenet_v3_small's convolutions with a bias (squeeze-excitation) and depthwise groups: its
# gradients are torch.nn.grad's and a bias sum where autograd computes all three in one kernel
# call, which may sum in another order: weights, masks and optimizer state equal within rounding
# (measured: at most 1.5 ulps at a tensor's scale). The last step's gradients of the squeeze-excitation
# biases are sums of near-cancelling terms (0.2 relative apart, at 1e-7 of their weights' scale),
# so gradients are left out here.
TV_CASES = [
    ("mobilenet", {}),
    ("mobilenet checkpoint microbatch", {"checkpoint": "blocks-1", "microbatch.size": 4}),
]


@pytest.mark.parametrize(("case", "flat"), TV_CASES, ids=[case for case, _ in TV_CASES])
def test_torchvision_packed_equals_masked_dense_within_rounding(case, flat, monkeypatch):
    config = TrialConfig.from_dict(
        {
            "task": "tv-cifar10",
            "device": "cpu",
            "model.arch": "mobilenet_v3_small",
            **REWIRING,
            **SMALL_STEPS,
            **flat,
        }
    )
    packed, reference = compared(config, monkeypatch)
    kept = [name for name in packed if not name.endswith(":grad")]
    packed, reference = ({n: views[n] for n in kept} for views in (packed, reference))
    assert differences(packed, reference, exact=False) == []


def test_the_portable_state_is_the_packed_models_with_its_weights_dense(monkeypatch):
    """What an export hands a tool that knows no packed layer (every technique's
    `portable_state`, as `tune-lowmem export` applies them): the plain model's keys, each packed
    weight scattered to its dense shape."""
    import torch

    from tune_lowmem.models.wideresnet import WideResNet
    from tune_lowmem.plugins import techniques
    from tune_lowmem.techniques.packed import SHAPE

    config = tiny_wrn_config(**REWIRING)
    packed = trainer(config, False, monkeypatch)
    state = packed.model.state_dict()
    for technique in techniques():
        state = technique.portable_state(state)
    assert state.keys() == WideResNet.from_config(config.model).state_dict().keys()
    held = packed.model.state_dict()
    weights = [key.removesuffix(SHAPE) + "weight" for key in held if key.endswith(SHAPE)]
    dense = dense_views(packed)
    assert weights and all(held[w].dim() == 1 for w in weights)  # packed: the nonzeros only
    assert all(torch.equal(state[name], dense[name]) for name in state if name in dense)
    assert all(state[w].shape == dense[w].shape and state[w].dim() == 4 for w in weights)
