"""Beam search against greedy and exhaustive search, BPE removal, and BLEU as the paper scores it."""

from __future__ import annotations

import itertools
import math

import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from tune_lowmem.data.iwslt14 import EOS, PAD, Dictionary, ParallelText
from tune_lowmem.tasks.translation.decode import (
    beam_search,
    bleu,
    detok_bleu,
    detokenise,
    references,
    remove_bpe,
    sacrebleu_signature,
    translate,
)

from .test_dynamicconv import VOCAB, tiny_model, tokens


def _sources() -> torch.Tensor:
    """Three left-padded sources of lengths 6, 4 and 2 (eos included)."""
    src = tokens(3, 6, seed=4)
    src[1, :2] = PAD
    src[2, :4] = PAD
    return src


def _normalised_score(model, src: torch.Tensor, hypothesis: list[int], len_penalty: float) -> float:
    """sum of log p over the hypothesis and its </s>, by one teacher-forced pass, / length**len_penalty."""
    with torch.no_grad():
        lprobs = F.log_softmax(model(src, torch.tensor([[EOS, *hypothesis]]))[0], dim=-1)
    score = sum(float(lprobs[t, w]) for t, w in enumerate([*hypothesis, EOS]))
    return score / (len(hypothesis) + 1) ** len_penalty


def _alone(src: torch.Tensor, row: int) -> torch.Tensor:
    return src[row : row + 1][:, src[row].ne(PAD)]


def _greedy(model, src: torch.Tensor, max_len: int) -> list[int]:
    """Argmax decoding by full re-decoding of the prefix, with the beam search's rules."""
    prefix = torch.tensor([[EOS]])
    for step in range(max_len + 1):
        lprobs = F.log_softmax(model(src, prefix)[0, -1], dim=-1)
        lprobs[PAD] = -math.inf
        if step == 0:
            lprobs[EOS] = -math.inf
        word = EOS if step == max_len else int(lprobs.argmax())
        if word == EOS:
            break
        prefix = torch.cat([prefix, torch.tensor([[word]])], dim=1)
    return prefix[0, 1:].tolist()


def test_beam_one_equals_greedy_for_every_sentence_of_a_batch():
    model = tiny_model(seed=3).eval()
    src = _sources()
    found = beam_search(model, src, beam_size=1, max_len_a=1.0, max_len_b=2)
    for row, hypothesis in enumerate(found):
        alone = _alone(src, row)
        assert hypothesis.tokens == _greedy(model, alone, max_len=len(alone[0]) - 1 + 2)


def test_batched_beam_search_equals_one_sentence_at_a_time():
    model = tiny_model(seed=3).eval()
    src = _sources()
    together = beam_search(model, src, beam_size=4, max_len_b=5)
    alone = [beam_search(model, _alone(src, r), beam_size=4, max_len_b=5)[0] for r in range(3)]
    assert [h.tokens for h in together] == [h.tokens for h in alone]
    for a, b in zip(together, alone):
        assert a.score == pytest.approx(b.score, rel=1e-5)


@pytest.mark.parametrize("len_penalty", [0.5, 1.0, 2.0])
def test_reported_scores_are_the_models_scores_of_the_returned_tokens(len_penalty):
    """Each hypothesis's score, accumulated step by step over reordered beams, equals one
    teacher-forced scoring of its tokens: the beams kept their own histories and states."""
    model = tiny_model(seed=3).eval()
    src = _sources()
    for row, hypothesis in enumerate(
        beam_search(model, src, beam_size=4, len_penalty=len_penalty, max_len_b=6)
    ):
        expected = _normalised_score(model, _alone(src, row), hypothesis.tokens, len_penalty)
        assert hypothesis.score == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("len_penalty", [0.0, 1.0, 3.0])
def test_wide_beam_finds_the_best_length_normalised_hypothesis(len_penalty):
    """Vocabulary of 6 (4 usable words), at most 2 words: a beam of 32 sees all 20 hypotheses,
    so it must return the best of score / length**len_penalty (length counts the </s>)."""
    model = tiny_model(seed=1, vocab=6).eval()
    src = torch.tensor([[4, 5, 4, EOS]])
    words = [0, 3, 4, 5]  # all but <pad> and </s>
    candidates = [list(h) for n in (1, 2) for h in itertools.product(words, repeat=n)]
    scores = {tuple(h): _normalised_score(model, src, h, len_penalty) for h in candidates}
    best = max(scores, key=scores.get)
    (found,) = beam_search(
        model, src, beam_size=32, len_penalty=len_penalty, max_len_a=0.0, max_len_b=2
    )
    assert tuple(found.tokens) == best and found.score == pytest.approx(scores[best], rel=1e-5)


def test_hypotheses_stop_at_the_length_limit():
    model = tiny_model(seed=3).eval()
    src = _sources()
    found = beam_search(model, src, beam_size=3, max_len_a=0.5, max_len_b=1)
    limits = [int(0.5 * (int(n) - 1) + 1) for n in src.ne(PAD).sum(1)]
    assert all(1 <= len(h.tokens) <= limit for h, limit in zip(found, limits))
    assert all(EOS not in h.tokens and PAD not in h.tokens for h in found)
    with pytest.raises(ValueError, match="beam_size: 0 is not allowed"):
        beam_search(model, src, beam_size=0)


def test_translate_removes_bpe_and_keeps_the_data_order():
    symbols = ["<s>", "<pad>", "</s>", "<unk>", "ha@@", "llo", "welt", "x"] + [
        f"w{i}" for i in range(VOCAB - 8)
    ]
    vocab = Dictionary(symbols)
    src = ["ha@@ llo welt", "x", "welt ha@@ llo x x"]
    tgt = ["ha@@ llo", "welt x", "neu@@ x"]
    data = ParallelText.encode(src, tgt, vocab, vocab)
    model = tiny_model(seed=3).eval()
    found = translate(model, data, vocab, beam_size=2, max_len_b=3, batch_size=2)
    direct = [
        beam_search(model, data.source(i).unsqueeze(0), beam_size=2, max_len_b=3)[0]
        for i in range(3)
    ]
    assert found == [remove_bpe(vocab.string(h.tokens)) for h in direct]
    assert references(data, vocab) == ["hallo", "welt x", "<<unk>> x"]


def test_remove_bpe_joins_subwords():
    assert remove_bpe("wir ha@@ ben ge@@ sch@@ rie@@ ben .") == "wir haben geschrieben ."
    assert remove_bpe("ende@@") == "ende"
    assert remove_bpe("") == ""


def test_bleu_on_tokenised_text():
    text = ["das ist ein test .", "noch ein satz"]
    assert bleu(text, text) == pytest.approx(100.0)
    # By hand: n-gram precisions 5/6, 4/5, 3/4, 2/3, no brevity penalty -> (1/3)^(1/4).
    assert bleu(["a b c d e f"], ["a b c d e g"]) == pytest.approx(100 * (1 / 3) ** 0.25, abs=1e-6)
    # All n-grams right but short: brevity penalty exp(1 - 6/4).
    assert bleu(["a b c d"], ["a b c d e f"]) == pytest.approx(100 * math.exp(-0.5), abs=1e-6)
    # Tokenisation is left alone: "hello." is one token here, as in the Moses-tokenised data.
    hyps, refs = ["he said hello. to me now"], ["he said hello . to me now"]
    ours = bleu(hyps, refs)
    assert ours == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score)
    assert ours < sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score
    with pytest.raises(ValueError, match="hypotheses: 1 given for 2 references"):
        bleu(["a"], ["a", "b"])


def test_tokenised_bleu_does_not_tell_the_user_to_detokenize(caplog):
    """The tokenisation is deliberate: sacrebleu's warning (100 lines ending in ' .') stays off."""
    text = [f"sentence number {i} ends in a tokenised period ." for i in range(120)]
    with caplog.at_level("WARNING", logger="sacrebleu"):
        assert bleu(text, text) == pytest.approx(100.0)
    assert not [r for r in caplog.records if "detokenize" in r.getMessage()]


def test_detokenised_sacrebleu_and_its_signature():
    assert detokenise(
        ["we &apos;re all born . it &apos;s &quot; art &quot; , isn &apos;t it ?"]
    ) == ["we're all born. it's \"art\", isn't it?"]
    hyps, refs = ["so we &apos;re all here"], ["so we &apos;re all here now"]
    assert detok_bleu(refs, refs) == pytest.approx(100.0)
    expected = sacrebleu.corpus_bleu(detokenise(hyps), [detokenise(refs)], lowercase=True).score
    assert detok_bleu(hyps, refs) == pytest.approx(expected) and detok_bleu(hyps, refs) != bleu(
        hyps, refs
    )
    assert sacrebleu_signature().startswith("nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:")
