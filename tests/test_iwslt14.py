"""IWSLT'14 data as fairseq reads it: vocabulary, caching, token batches, microbatches, loss."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from tune_lowmem.data import DataConfig, data_root, iwslt14
from tune_lowmem.data.iwslt14 import (
    BOS,
    EOS,
    PAD,
    UNK,
    Dictionary,
    collate,
    label_smoothed_nll_loss,
)

from .test_dynamicconv import tiny_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNE_LOWMEM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def shipped(cache) -> iwslt14.Iwslt14:
    return iwslt14.load(iwslt14.find_folder(data_root(DataConfig())))


def test_dictionary_follows_fairseqs_conventions():
    d = Dictionary.build(["b a c a", "c a d"], padding_factor=8)
    assert (d.indices["<s>"], d.indices["<pad>"], d.indices["</s>"], d.indices["<unk>"]) == (
        BOS,
        PAD,
        EOS,
        UNK,
    )
    assert d.symbols[4:8] == ["a", "c", "b", "d"]  # by count, ties alphabetical
    assert len(d) == 8  # already a multiple of 8: no padding words
    assert d.encode("a zz d") == [4, UNK, 7, EOS]
    assert d.string([4, UNK, 7, EOS, 5]) == "a <unk> d"
    assert d.string([PAD, 4, UNK], unk="<<unk>>") == "a <<unk>>"
    assert Dictionary.build(["b a c a", "c a d"], threshold=2, padding_factor=1).symbols[4:] == [
        "a",
        "c",
    ]
    assert Dictionary.build(["w"], padding_factor=8).symbols[5:] == [
        f"madeupword{i:04d}" for i in range(3)
    ]


def test_shipped_small_folder_trains_on_valid_and_tests_on_test(shipped):
    folder = Path(iwslt14.find_folder(data_root(DataConfig())))
    assert len(shipped.train) == 7283 and len(shipped.test) == 6750 and shipped.valid is None
    first = (folder / "valid.de").read_text().splitlines()[0]
    assert shipped.src_dict.string(shipped.train.source(0)) == first
    assert shipped.train.source(0)[-1] == EOS
    # The vocabulary is the training split's: words only in test.* become <unk> there.
    assert len(shipped.src_dict) % 8 == 0 and len(shipped.tgt_dict) % 8 == 0
    assert (shipped.test.tgt == UNK).any() and not (shipped.train.tgt == UNK).any()


def test_loading_twice_reads_the_cache(shipped, cache, monkeypatch):
    assert len(list(cache.glob("iwslt14-*.pt"))) == 1
    monkeypatch.setattr(
        iwslt14, "_encode", lambda *a: pytest.fail("encoded again instead of reading the cache")
    )
    again = iwslt14.load(iwslt14.find_folder(data_root(DataConfig())))
    assert again.src_dict.symbols == shipped.src_dict.symbols
    assert torch.equal(again.test.tgt, shipped.test.tgt) and torch.equal(
        again.train.src_offsets, shipped.train.src_offsets
    )


def _write_folder(folder: Path) -> Path:
    folder.mkdir()
    for split, n in (("train", 6), ("valid", 2), ("test", 3)):
        (folder / f"{split}.de").write_text("".join(f"{split} ha@@ llo {i}\n" for i in range(n)))
        (folder / f"{split}.en").write_text("".join(f"{split} he@@ llo {i}\n" for i in range(n)))
    return folder


def test_full_folder_has_three_splits_and_a_joined_vocabulary_option(tmp_path, cache):
    folder = _write_folder(tmp_path / "iwslt14.tokenized.de-en")
    assert iwslt14.find_folder(tmp_path) == folder
    corpus = iwslt14.load(folder)
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (6, 2, 3)
    assert "ha@@" in corpus.src_dict.indices and "he@@" not in corpus.src_dict.indices
    assert (
        corpus.src_dict.string(corpus.valid.source(0)) == "<unk> ha@@ llo 0"
    )  # "valid" is not a training word
    joined = iwslt14.load(folder, joined=True)
    assert joined.src_dict is joined.tgt_dict and {"ha@@", "he@@"} <= set(joined.src_dict.indices)
    with pytest.raises(FileNotFoundError, match="data.root: no IWSLT'14 folder"):
        iwslt14.find_folder(tmp_path / "nowhere")


def test_collate_pads_as_fairseq_does(shipped):
    batch = collate(shipped.train, [3, 0, 10])
    assert batch.src_lengths.tolist() == sorted(batch.src_lengths.tolist(), reverse=True)
    for row, sentence in enumerate(batch.ids.tolist()):
        src, tgt = shipped.train.source(sentence), shipped.train.target(sentence)
        S, T = batch.src_tokens.shape[1], len(tgt)
        assert torch.equal(batch.src_tokens[row, S - len(src) :], src)
        assert (batch.src_tokens[row, : S - len(src)] == PAD).all()
        assert torch.equal(batch.target[row, :T], tgt) and (batch.target[row, T:] == PAD).all()
        assert batch.prev_output_tokens[row, 0] == EOS
        assert torch.equal(batch.prev_output_tokens[row, 1:T], tgt[:-1])
    assert batch.ntokens == int(batch.target.ne(PAD).sum())
    assert batch.num_tokens == 3 * max(batch.src_tokens.shape[1], batch.target.shape[1])


def test_token_batches_respect_the_budget_cover_every_sentence_once_and_group_lengths(shipped):
    data = shipped.train
    batches = iwslt14.batches_by_tokens(data, 4000, seed=0)
    sizes = np.maximum(data.src_sizes, data.tgt_sizes)
    assert all(len(b) * sizes[b].max() <= 4000 for b in batches)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(data)))
    # Grouped by length: the batches are consecutive runs of the source-length order.
    assert all(
        data.src_sizes[a].max() <= data.src_sizes[b].min() for a, b in itertools.pairwise(batches)
    )
    assert sum(collate(data, b).num_tokens for b in batches) < 1.3 * sizes.sum()  # little padding
    again = iwslt14.batches_by_tokens(data, 4000, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))
    with pytest.raises(ValueError, match="schedule.max_tokens: 50 is not allowed"):
        iwslt14.batches_by_tokens(data, 50, seed=0)


def test_epoch_order_is_a_seeded_shuffle(shipped):
    batches = iwslt14.batches_by_tokens(shipped.train, 4000, seed=0)
    first, second = iwslt14.epoch_order(batches, 1, 0), iwslt14.epoch_order(batches, 2, 0)
    key = lambda order: [int(b[0]) for b in order]
    assert sorted(key(first)) == sorted(key(batches)) and key(first) != key(second)
    assert key(first) == key(iwslt14.epoch_order(batches, 1, 0))


def test_microbatches_respect_the_budget_and_cover_the_batch(shipped):
    batch = collate(shipped.train, iwslt14.batches_by_tokens(shipped.train, 4000, seed=0)[10])
    micro = iwslt14.split_microbatches(batch, 250)
    assert len(micro) > 10 and all(m.num_tokens <= 250 for m in micro)
    assert torch.equal(torch.cat([m.ids for m in micro]), batch.ids)
    assert sum(m.ntokens for m in micro) == batch.ntokens
    assert iwslt14.split_microbatches(batch, 10_000) == [batch]
    # A pair longer than the budget cannot be cut: it goes alone.
    longest = int(torch.maximum(batch.src_lengths, batch.target.ne(PAD).sum(1)).max())
    tight = iwslt14.split_microbatches(batch, longest - 1)
    assert all(m.num_tokens <= longest - 1 or len(m) == 1 for m in tight)
    assert sum(len(m) for m in tight) == len(batch) and any(
        m.num_tokens > longest - 1 for m in tight
    )


def test_summed_microbatch_gradients_equal_the_full_batch_gradient(shipped):
    """Each microbatch's summed loss divided by the full batch's ntokens: the gradients add up to
    the full batch's, since layer norm (unlike batch norm) mixes no sentences."""
    torch.manual_seed(0)
    model = tiny_model(vocab=max(len(shipped.src_dict), len(shipped.tgt_dict))).eval()
    ids = iwslt14.batches_by_tokens(shipped.train, 600, seed=0)[20]
    batch = collate(shipped.train, ids)

    def gradients(parts):
        model.zero_grad()
        for part in parts:
            logits = model(part.src_tokens, part.prev_output_tokens)
            loss, _ = label_smoothed_nll_loss(logits, part.target, 0.1)
            (loss / batch.ntokens).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    micro = iwslt14.split_microbatches(batch, 150)
    assert len(micro) >= 4
    full, summed = gradients([batch]), gradients(micro)
    for name in full:
        torch.testing.assert_close(summed[name], full[name], rtol=1e-4, atol=1e-6, msg=name)


def test_label_smoothed_loss_matches_a_hand_computation():
    # Row 0: p = (1/4, 1/4, 1/2), target 2; row 1: uniform, target 0; row 2: padding (= 1), ignored.
    logits = torch.tensor([[[0.0, 0.0, math.log(2)], [5.0, 5.0, 5.0], [9.0, -9.0, 0.0]]])
    target = torch.tensor([[2, 0, PAD]])
    eps = 0.1
    loss, nll = label_smoothed_nll_loss(logits, target, eps, ignore_index=PAD)
    hand_nll = math.log(2) + math.log(3)
    hand_smooth = (2 * math.log(4) + math.log(2)) + 3 * math.log(3)
    assert nll.item() == pytest.approx(hand_nll, rel=1e-6)
    assert loss.item() == pytest.approx((1 - eps) * hand_nll + eps / 3 * hand_smooth, rel=1e-6)
    assert label_smoothed_nll_loss(logits, target, 0.0, ignore_index=PAD)[
        0
    ].item() == pytest.approx(hand_nll, rel=1e-6)
