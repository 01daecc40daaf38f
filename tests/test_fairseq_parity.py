"""The project's DynamicConv Transformer computes fairseq's `lightconv_iwslt_de_en` (dynamic):
same weights (copied by tune_lowmem.tasks.translation.fairseq_interop's name mapping), same log-probabilities, same
loss and same parameters after optimizer steps, on real IWSLT'14 batches. Skipped without the
`fairseq` extra (./setup.sh --fairseq)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from tune_lowmem.config import TrialConfig
from tune_lowmem.data import DataConfig, data_root, iwslt14
from tune_lowmem.models.dynamicconv import DynamicConvConfig, DynamicConvTransformer
from tune_lowmem.tasks.translation import DynamicConvIwslt14
from tune_lowmem.tasks.translation.fairseq_interop import (
    INSTALL_HINT,
    fairseq_arguments,
    fairseq_name,
    from_fairseq,
    to_fairseq,
)
from tune_lowmem.tasks.translation.fairseq_tools import build_fairseq

pytest.importorskip("fairseq", reason=INSTALL_HINT)

NO_DROPOUT = {
    "dropout": 0.0,
    "weight_dropout": 0.0,
    "attention_dropout": 0.0,
    "relu_dropout": 0.0,
    "input_dropout": 0.0,
}
SMALL = DynamicConvConfig(
    embed_dim=32,
    ffn_dim=64,
    heads=4,
    encoder_layers=2,
    decoder_layers=2,
    encoder_kernels=(3, 15),
    decoder_kernels=(3, 15),
    **NO_DROPOUT,
)
EPSILON = 0.1  # the recipe's label smoothing
LR = 5e-4  # the recipe's peak learning rate
RECIPE_OPTIMIZER = (
    "--optimizer",
    "adam",
    "--adam-betas",
    "(0.9, 0.98)",
    "--adam-eps",
    "1e-8",
    "--weight-decay",
    "0.0001",
    "--lr",
    repr(LR),
)


@pytest.fixture(scope="module")
def corpus() -> iwslt14.Iwslt14:
    return iwslt14.load(iwslt14.find_folder(data_root(DataConfig())))


@pytest.fixture(scope="module")
def groups(corpus) -> list:
    return iwslt14.batches_by_tokens(corpus.test, 500, seed=0)


@pytest.fixture(scope="module")
def batches(corpus, groups) -> list[iwslt14.Batch]:
    """Three real test batches of ~500 tokens, middling to the longest sentences: every target at
    least as long as the widest decoder kernel (see fairseq_interop on shorter ones)."""
    chosen = [iwslt14.collate(corpus.test, groups[i]) for i in (len(groups) // 2, -2, -1)]
    assert all(b.target.shape[1] >= max(SMALL.decoder_kernels) for b in chosen)
    return chosen


def models(config: DynamicConvConfig, corpus, folder, extra_args=()):
    """The project's model (seeded) and fairseq's, with the project's weights copied across."""
    torch.manual_seed(0)
    ours = DynamicConvTransformer(config, len(corpus.src_dict), len(corpus.tgt_dict), iwslt14.PAD)
    # fairseq 0.12 spreads epsilon over V - 1 words, the paper's 2019 fairseq (and the project)
    # over V: eps' = eps (V - 1) / V gives the same loss, term for term.
    vocab = len(corpus.tgt_dict)
    smoothing = (
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        repr(EPSILON * (vocab - 1) / vocab),
    )
    cfg, task, theirs = build_fairseq(
        config,
        corpus.src_dict.symbols,
        corpus.tgt_dict.symbols,
        folder,
        extra_args=(*smoothing, *extra_args),
    )
    theirs.load_state_dict(to_fairseq(ours.state_dict()), strict=True)
    return ours, (cfg, task, theirs)


def sample(batch: iwslt14.Batch) -> dict:
    """A project batch as fairseq's translation task hands it to the criterion."""
    net_input = {
        "src_tokens": batch.src_tokens,
        "src_lengths": batch.src_lengths,
        "prev_output_tokens": batch.prev_output_tokens,
    }
    return {
        "id": batch.ids,
        "nsentences": len(batch),
        "ntokens": batch.ntokens,
        "net_input": net_input,
        "target": batch.target,
    }


def record(name: str, difference: torch.Tensor) -> float:
    """The largest absolute difference, printed for the record (pytest -s)."""
    value = float(difference.abs().max())
    print(f"largest |project - fairseq| {name}: {value:.3g}")
    return value


@pytest.fixture(scope="module")
def small(corpus, tmp_path_factory):
    return models(SMALL, corpus, tmp_path_factory.mktemp("fairseq-small"))


def test_the_mapping_covers_every_weight(small):
    ours, (_, _, theirs) = small
    assert fairseq_arguments(SMALL)[:2] == ["--arch", "lightconv_iwslt_de_en"]
    mine, fairseqs = ours.state_dict(), theirs.state_dict()
    for name, tensor in mine.items():
        assert torch.equal(tensor, fairseqs[fairseq_name(name)]), name
    unused = {k for k in fairseqs if k.endswith(".conv_bias")}  # fairseq 0.12's, never used
    assert len(unused) == SMALL.encoder_layers + SMALL.decoder_layers
    assert {fairseq_name(k) for k in mine} | unused | {"encoder.version", "decoder.version"} == set(
        fairseqs
    )
    back = from_fairseq(fairseqs, shared_output=False)
    assert back.keys() == mine.keys() and all(torch.equal(back[k], v) for k, v in mine.items())


@pytest.mark.parametrize("path", ["auto", "unfold"])
def test_training_mode_log_probs_and_loss_agree(small, batches, path):
    ours, (cfg, task, theirs) = small
    criterion = task.build_criterion(cfg.criterion)
    ours.train(), theirs.train()  # training mode; every dropout is 0
    ours.set_conv_path(path)
    for batch in batches:
        logits = ours(batch.src_tokens, batch.prev_output_tokens)
        mine = F.log_softmax(logits, dim=-1)
        fairseqs = theirs.get_normalized_probs(theirs(**sample(batch)["net_input"]), log_probs=True)
        real, target = batch.target.ne(iwslt14.PAD), batch.target[..., None]
        per_token = (mine.gather(-1, target) - fairseqs.gather(-1, target)).squeeze(-1)[real]
        assert record("per-token log-prob", per_token) < 2e-5
        assert record("log-prob (every word)", (mine - fairseqs)[real]) < 2e-5
        loss, nll = iwslt14.label_smoothed_nll_loss(logits, batch.target, EPSILON)
        their_loss, sample_size, logging = criterion(theirs, sample(batch))
        assert sample_size == batch.ntokens
        # summed over the batch in fp32: a few ulps of the sum, per token (or 1e-6, if larger)
        ulps = 4 * torch.finfo(torch.float32).eps / batch.ntokens
        assert record("loss per token", (loss - their_loss) / batch.ntokens) < max(
            1e-6, ulps * abs(float(their_loss))
        )
        assert record("nll per token", (nll - logging["nll_loss"]) / batch.ntokens) < max(
            1e-6, ulps * abs(float(logging["nll_loss"]))
        )
    ours.set_conv_path("auto")


def test_short_targets_score_as_fairseq_generate_does(small, corpus, groups):
    """Targets shorter than a decoder kernel: the project's teacher-forced log-probabilities are
    fairseq's incremental decoder's, step by step; fairseq's own training forward differs there
    (it renormalises the kernel over the visible taps; see fairseq_interop)."""
    ours, (_, _, theirs) = small
    batch = iwslt14.collate(corpus.test, groups[0])
    assert batch.target.shape[1] < max(SMALL.decoder_kernels)
    ours.eval(), theirs.eval()
    with torch.no_grad():
        mine = F.log_softmax(ours(batch.src_tokens, batch.prev_output_tokens), dim=-1)
        encoder_out = theirs.encoder(batch.src_tokens, batch.src_lengths)
        state: dict = {}
        steps = [
            theirs.decoder(
                batch.prev_output_tokens[:, : t + 1],
                encoder_out=encoder_out,
                incremental_state=state,
            )[0]
            for t in range(batch.target.shape[1])
        ]
        incremental = F.log_softmax(torch.cat(steps, dim=1), dim=-1)
        training = theirs.get_normalized_probs(theirs(**sample(batch)["net_input"]), log_probs=True)
    real = batch.target.ne(iwslt14.PAD)
    assert record("log-prob vs fairseq's incremental decoder", (mine - incremental)[real]) < 2e-5
    assert float((mine - training)[real].abs().max()) > 1e-3  # the documented difference


def test_optimizer_steps_give_the_same_parameters(corpus, batches, tmp_path):
    """Two updates from the same state: the project's optimizer (DynamicConvIwslt14's) against
    fairseq's Adam built from the recipe's flags: the gradients agree, and from the same
    parameters, gradients and optimizer state both optimizers step to the same parameters."""
    from fairseq.optim import build_optimizer

    ours, (cfg, task, theirs) = models(SMALL, corpus, tmp_path, RECIPE_OPTIMIZER)
    criterion = task.build_criterion(cfg.criterion)
    trial = TrialConfig.from_dict(
        {"task": "dct-iwslt14", "device": "cpu", "model": dataclasses.asdict(SMALL)}
    )
    optimizer = DynamicConvIwslt14(trial, torch.device("cpu")).build_optimizer(ours)
    fairseq_optimizer = build_optimizer(
        cfg.optimizer, [p for p in theirs.parameters() if p.requires_grad]
    )
    theirs_by_name = dict(theirs.named_parameters())
    ours.train(), theirs.train()
    for batch in batches[:2]:
        for group in optimizer.param_groups:
            group["lr"] = LR
        fairseq_optimizer.set_lr(LR)
        optimizer.zero_grad(), fairseq_optimizer.zero_grad()
        logits = ours(batch.src_tokens, batch.prev_output_tokens)
        (
            iwslt14.label_smoothed_nll_loss(logits, batch.target, EPSILON)[0] / batch.ntokens
        ).backward()
        their_loss, sample_size, _ = criterion(theirs, sample(batch))
        (their_loss / sample_size).backward()  # what fairseq's trainer does with the summed loss
        pairs = [(p, theirs_by_name[fairseq_name(name)]) for name, p in ours.named_parameters()]
        assert (
            record("gradient", torch.stack([(p.grad - q.grad).abs().max() for p, q in pairs]))
            < 1e-6
        )
        for p, q in pairs:  # the same state: Adam would magnify float noise in tiny gradients
            q.grad.copy_(p.grad)
        optimizer.step(), fairseq_optimizer.step()
        assert (
            record("parameter after step", torch.stack([(p - q).abs().max() for p, q in pairs]))
            < 1e-7
        )


def test_paper_size_forward_agrees(corpus, batches, tmp_path):
    """The full lightconv_iwslt_de_en (7 + 6 layers, width 512, kernels up to 31), one batch."""
    paper = DynamicConvConfig(**NO_DROPOUT)
    ours, (_, _, theirs) = models(paper, corpus, tmp_path)
    ours.train(), theirs.train()
    batch = batches[-2].rows(torch.arange(2))
    assert batch.target.shape[1] >= max(paper.decoder_kernels)
    with torch.no_grad():
        mine = F.log_softmax(ours(batch.src_tokens, batch.prev_output_tokens), dim=-1)
        fairseqs = theirs.get_normalized_probs(theirs(**sample(batch)["net_input"]), log_probs=True)
    real = batch.target.ne(iwslt14.PAD)
    assert record("paper-size log-prob", (mine - fairseqs)[real]) < 5e-5
