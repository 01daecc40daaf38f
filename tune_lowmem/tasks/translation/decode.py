"""Translation and BLEU as fairseq-generate computes the paper's number.

Beam search follows fairseq's SequenceGenerator: the first step expands only the first beam;
each step takes the 2*beam best continuations, finalises those ending in </s> among the best
`beam` (score / length**len_penalty, length counting the </s>), keeps the best `beam` others, and
a sentence is done once it has `beam` finished hypotheses; <pad> is never chosen, </s> not as the
first token, and at the length limit only </s> is allowed. The limit here is per sentence,
a * (source length without </s>) + b (fairseq takes the batch's padded source length).

Two BLEUs, both corpus BLEU from sacrebleu:

- `bleu` (the metrics `val_bleu`, `test_bleu`): *tokenised* BLEU, on BPE-removed text that is
  still Moses-tokenised and lower-cased, with tokenize='none' -- what fairseq-generate
  --remove-bpe prints and the paper reports. References are the dictionary's words with unknown
  words written `<<unk>>` (fairseq's escape_unk), so a generated <unk> never matches. The text is
  tokenised on purpose, so sacrebleu's "forgot to detokenize" warning is switched off (force).
- `detok_bleu` (the metrics `val_sacrebleu`, `test_sacrebleu`): *detokenised* sacreBLEU, the
  number other papers compare: the same hypotheses and references Moses-detokenised (sacremoses)
  and scored with sacrebleu's default 13a tokeniser; its signature is `sacrebleu_signature()`
  (case:lc because IWSLT'14 as prepared is lower-cased; the store's `version.sacrebleu` column
  completes it). It is usually a little lower than tokenised BLEU.
"""

from __future__ import annotations

from dataclasses import dataclass

import sacrebleu
import torch
import torch.nn.functional as F

from ...data.iwslt14 import EOS, PAD, Dictionary, ParallelText, collate
from ...models.dynamicconv import DynamicConvTransformer


def remove_bpe(text: str, symbol: str = "@@ ") -> str:
    """Join subword units: `wor@@ ds` -> `words` (fairseq's post_process for subword_nmt)."""
    return (text + " ").replace(symbol, "").rstrip()


TOKENISED_BLEU = sacrebleu.BLEU(tokenize="none", force=True)
DETOKENISED_BLEU = sacrebleu.BLEU(lowercase=True)  # 13a; the data is lower-cased anyway


def sacrebleu_signature() -> str:
    """The signature of `detok_bleu`, e.g. nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0
    (sacrebleu knows the number of references only after scoring: one reference, as here)."""
    metric = sacrebleu.BLEU(lowercase=True)
    metric.corpus_score(["."], [["."]])
    return str(metric.get_signature())


def _check_lengths(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses: {len(hypotheses)} given for {len(references)} references")


def bleu(hypotheses: list[str], references: list[str]) -> float:
    """Tokenised corpus BLEU (0-100) of already-tokenised text: sacrebleu, tokenize='none'."""
    _check_lengths(hypotheses, references)
    return TOKENISED_BLEU.corpus_score(hypotheses, [references]).score


def detokenise(lines: list[str], lang: str = "en") -> list[str]:
    """Moses detokenisation (sacremoses), entities such as &apos; unescaped."""
    from sacremoses import MosesDetokenizer

    detokenizer = MosesDetokenizer(lang=lang)
    return [detokenizer.detokenize(line.split(), unescape=True) for line in lines]


def detok_bleu(hypotheses: list[str], references: list[str], lang: str = "en") -> float:
    """Detokenised sacreBLEU (0-100) of tokenised text, signature `sacrebleu_signature()`."""
    _check_lengths(hypotheses, references)
    return DETOKENISED_BLEU.corpus_score(
        detokenise(hypotheses, lang), [detokenise(references, lang)]
    ).score


@dataclass(frozen=True)
class Hypothesis:
    """A finished translation: token ids without the final </s>, and sum(log p) / length**len_penalty."""

    tokens: list[int]
    score: float


@torch.no_grad()
def beam_search(
    model: DynamicConvTransformer,
    src_tokens: torch.Tensor,
    beam_size: int = 5,
    len_penalty: float = 1.0,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
) -> list[Hypothesis]:
    """The best hypothesis for each row of left-padded `src_tokens`, all rows searched together
    with incremental decoding."""
    if beam_size < 1:
        raise ValueError(f"beam_size: {beam_size!r} is not allowed; a positive integer is required")
    model.eval()
    n, K, device = src_tokens.shape[0], beam_size, src_tokens.device
    max_len = (max_len_a * (src_tokens.ne(PAD).sum(1) - 1).float() + max_len_b).long()
    rows = torch.arange(n, device=device).repeat_interleave(K)
    encoder_out = model.encode(src_tokens).reorder(rows)
    state = model.start_decoding(encoder_out)
    tokens = torch.full((n * K, 0), EOS, dtype=torch.long, device=device)  # generated so far
    scores = torch.full((n, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # step 0 expands the first beam only
    active = torch.arange(n, device=device)  # sentence of each block of K rows
    finished: list[list[Hypothesis]] = [[] for _ in range(n)]
    counts = torch.zeros(n, dtype=torch.long, device=device)  # len(finished[i]) on the device
    step = 0
    while len(active):
        last = tokens[:, -1] if step else torch.full((len(active) * K,), EOS, device=device)
        lprobs = F.log_softmax(model.decode_step(last, encoder_out, state).float(), dim=-1)
        lprobs[:, PAD] = float("-inf")
        limit = step >= max_len[active]
        at_limit = limit.repeat_interleave(K)
        if step == 0:  # no empty translations, unless the limit allows nothing else
            lprobs[~at_limit, EOS] = float("-inf")
        if limit.any():
            eos = lprobs[at_limit, EOS]
            lprobs[at_limit] = float("-inf")
            lprobs[at_limit, EOS] = eos
        vocab = lprobs.shape[1]
        candidates = (scores.view(-1, 1) + lprobs).view(len(active), K * vocab)
        top_scores, top = candidates.topk(min(2 * K, K * vocab), dim=1)
        beams, words = top // vocab, top % vocab
        ends = words.eq(EOS) & top_scores.isfinite()
        for i, j in ends[:, :K].nonzero().tolist():
            sentence = int(active[i])
            if len(finished[sentence]) < K:
                row = i * K + int(beams[i, j])
                score = float(top_scores[i, j]) / (step + 1) ** len_penalty
                finished[sentence].append(Hypothesis(tokens[row].tolist(), score))
                counts[sentence] += 1
        # The best K continuations that do not end the sentence (at most K of the 2K do).
        rank = torch.arange(top.shape[1], device=device) + 2 * K * ends  # ends sort last
        keep = rank.argsort(dim=1)[:, :K]
        alive = (~(limit | counts[active].ge(K))).nonzero().squeeze(1)
        keep = keep[alive]
        source_rows = (alive.unsqueeze(1) * K + beams[alive].gather(1, keep)).view(-1)
        tokens = torch.cat([tokens[source_rows], words[alive].gather(1, keep).view(-1, 1)], dim=1)
        scores = top_scores[alive].gather(1, keep)
        # The encoder side is the same for all beams of a sentence: it moves only when sentences end.
        memory_rows = None
        if len(alive) < len(active):
            memory_rows = (alive.unsqueeze(1) * K + torch.arange(K, device=device)).view(-1)
            encoder_out = encoder_out.reorder(memory_rows)
        state = state.reorder(source_rows, memory_rows)
        active = active[alive]
        step += 1
    return [max(hypotheses, key=lambda h: h.score) for hypotheses in finished]


@torch.no_grad()
def translate(
    model: DynamicConvTransformer,
    data: ParallelText,
    tgt_dict: Dictionary,
    *,
    beam_size: int = 5,
    len_penalty: float = 1.0,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    batch_size: int = 128,
    device: torch.device | str = "cpu",
) -> list[str]:
    """BPE-removed translations of every source sentence of `data`, in its order; sentences are
    decoded `batch_size` at a time, grouped by source length."""
    order = sorted(range(len(data)), key=lambda i: int(data.src_sizes[i]))
    hypotheses: list[str] = [""] * len(data)
    for start in range(0, len(order), batch_size):
        batch = collate(data, order[start : start + batch_size])
        best = beam_search(
            model, batch.src_tokens.to(device), beam_size, len_penalty, max_len_a, max_len_b
        )
        for sentence, hypothesis in zip(batch.ids.tolist(), best):
            hypotheses[sentence] = remove_bpe(tgt_dict.string(hypothesis.tokens))
    return hypotheses


def references(data: ParallelText, tgt_dict: Dictionary) -> list[str]:
    """The BPE-removed target sentences as fairseq-generate scores them (unknowns as <<unk>>)."""
    return [remove_bpe(tgt_dict.string(data.target(i), unk="<<unk>>")) for i in range(len(data))]
