"""The DC-Transformer task inside the real training loop, on the shipped IWSLT'14 text."""

import math

import pytest
import torch

from tune_lowmem.config import TrialConfig
from tune_lowmem.techniques.sparsity import Sparsity
from tune_lowmem.train import Trainer


def tiny_dct(**flat) -> TrialConfig:
    base = {
        "task": "dct-iwslt14",
        "device": "cpu",
        "model": {
            "embed_dim": 32,
            "ffn_dim": 64,
            "heads": 4,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_kernels": [3, 7],
            "decoder_kernels": [3, 7],
        },
        "schedule": {
            "max_updates": 30,
            "warmup_updates": 10,
            "lr": 3e-3,
            "max_tokens": 1200,
            "beam_size": 2,
        },
        "data": {"train_subset": 400, "val_size": 50, "test_subset": 20},
    }
    config = TrialConfig.from_dict(base)
    return config.replace(**flat) if flat else config


@pytest.fixture(scope="module")
def short_run():
    flat = {
        "schedule.max_updates": 60,
        "schedule.lr": 5e-3,
        "model.embed_dim": 64,
        "model.ffn_dim": 128,
    }
    return Trainer(tiny_dct(**flat)).run()


def test_short_real_run_lowers_the_loss_and_scores_bleu(short_run):
    first, last = short_run[0], short_run[-1]
    print(
        f"DCT tiny, {last['updates']} updates: train loss {first['train_loss']:.2f} -> {last['train_loss']:.2f}, "
        f"val nll {first['val_nll_loss']:.2f} -> {last['val_nll_loss']:.2f}, test BLEU {last['test_bleu']:.2f}"
    )
    assert last["updates"] == 60
    assert last["val_nll_loss"] < first["val_nll_loss"] - 0.5
    assert (
        last["val_nll_loss"] < math.log(5832) - 1.5
    )  # far below a uniform guess over the vocabulary
    assert 0.0 <= last["test_bleu"] <= 100.0 and "val_bleu" in last


def one_step_parameters(config: TrialConfig) -> dict[str, torch.Tensor]:
    trainer = Trainer(config)
    trainer.train_step(next(iter(trainer.task.train_batches(0))))
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def no_dropout(**flat) -> TrialConfig:
    zero = {f"model.{p}": 0.0 for p in ("dropout", "weight_dropout", "attention_dropout")}
    return tiny_dct(**zero, **flat)


def test_token_microbatches_give_the_full_batch_update():
    full = one_step_parameters(no_dropout())
    micro = one_step_parameters(no_dropout(**{"microbatch.size": 250}))
    for name in full:
        torch.testing.assert_close(micro[name], full[name], rtol=1e-4, atol=1e-6, msg=name)


def test_per_layer_checkpointing_gives_the_same_update():
    full = one_step_parameters(no_dropout())
    checkpointed = one_step_parameters(no_dropout(checkpoint="residual-1"))
    for name in full:
        torch.testing.assert_close(checkpointed[name], full[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_steps_keep_layer_norm_fp32(precision):
    trainer = Trainer(tiny_dct(precision=precision))
    out = trainer.train_step(next(iter(trainer.task.train_batches(0))))
    assert math.isfinite(out["loss"])
    for name, p in trainer.model.named_parameters():
        expected = (
            torch.float32
            if "layer_norm" in name
            else trainer.model.encoder.embed_tokens.weight.dtype
        )
        assert p.dtype == expected, name
    assert trainer.model.encoder.embed_tokens.weight.dtype != torch.float32


def test_sparse_transformer_keeps_its_density():
    trainer = Trainer(
        tiny_dct(
            **{
                "sparsity.density": 0.4,
                "sparsity.period_schedule": "constant",
                "sparsity.constant_period": 2,
            }
        )
    )
    batches = iter(trainer.task.train_batches(0))
    for _ in range(5):
        trainer.train_step(next(batches))
    metrics = trainer.technique(Sparsity).engine.metrics()
    assert metrics["sparsity_rewirings"] >= 2
    assert metrics["sparsity_density"] == pytest.approx(0.4, abs=1e-3)
    names = set(trainer.technique(Sparsity).engine.names)
    assert not any("embed" in n or "layer_norm" in n for n in names)
    engine = trainer.technique(Sparsity).engine
    for name, p in trainer.model.named_parameters():
        if name in names:  # packed: one value per position of the layer's mask
            assert p.numel() == int(engine.mask(name).sum())


def test_inverse_sqrt_schedule():
    task = Trainer(tiny_dct(**{"schedule.lr_multiplier": 2.0})).task
    assert task.learning_rate(0, 0) == pytest.approx(1e-7)
    assert task.learning_rate(0, 10) == pytest.approx(6e-3)
    assert task.learning_rate(0, 40) == pytest.approx(6e-3 * 0.5)


def test_evaluation_at_auto_runs_at_the_training_microbatch_with_the_same_losses():
    """Auto evaluates at the training microbatch's token budget (the minibatch's without one),
    and the validation losses are per-token sums: the same at the minibatch's budget within
    float reassociation."""
    micro = Trainer(tiny_dct(**{"microbatch.size": 300}))
    whole = Trainer(tiny_dct())
    assert micro.task.eval_tokens() == 300 and whole.task.eval_tokens() == 1200
    asked = Trainer(tiny_dct(**{"microbatch.size": 300, "schedule.eval_max_tokens": 600}))
    assert asked.task.eval_tokens() == 600
    micro.model.eval()  # as `Trainer.run` evaluates: no dropout
    small = micro.task.evaluate(micro.model, final=False)
    large = whole.task.evaluate(micro.model, final=False)
    assert small.keys() == large.keys()
    for name, value in large.items():
        assert small[name] == pytest.approx(value, rel=1e-5)
    batch = micro.task.synthetic_evaluation_batch(torch.Generator().manual_seed(0))
    assert batch.num_tokens <= 300
