"""IWSLT'14 German-English as fairseq reads it: vocabularies, token-budget batches, microbatches.

Source: a folder as fairseq's `prepare-iwslt14.sh` writes it (`{train,valid,test}.{de,en}`,
Moses-tokenised, lower-cased, BPE with `@@ ` continuations), or one with only `valid.*` and
`test.*` (the shipped `iwslt14-small`): there the training split is `valid.*` and no validation
split exists. Vocabularies are built from the training split only, as `fairseq-preprocess`
does. Encoded splits are cached with torch.save, keyed by the files' sizes and mtimes.

fairseq's conventions kept: <s>=0, <pad>=1, </s>=2, <unk>=3; every sentence ends with </s>;
sources are left-padded, targets right-padded; prev_output_tokens = </s> + target[:-1]; a batch
of n sentences "costs" n * max(source length, target length) tokens (eos included).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import cache_dir, to_device

BOS, PAD, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
FOLDER_NAMES = ("iwslt14.tokenized.de-en", "iwslt14-small")
CACHE_VERSION = 1


class Dictionary:
    """fairseq's Dictionary: the four specials, then words by descending count (ties
    alphabetical), those under `threshold` dropped, padded with `madeupwordNNNN` to a multiple
    of `padding_factor` (8, fairseq-preprocess's default)."""

    def __init__(self, symbols: list[str]):
        if tuple(symbols[:4]) != SPECIALS:
            raise ValueError(f"symbols: must start with {', '.join(SPECIALS)}")
        self.symbols = list(symbols)
        self.indices = {s: i for i, s in enumerate(self.symbols)}

    @classmethod
    def build(cls, lines: Iterable[str], threshold: int = 0, padding_factor: int = 8) -> Dictionary:
        counts = Counter(word for line in lines for word in line.split())
        words = [
            w for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0])) if c >= threshold
        ]
        symbols = list(SPECIALS) + [w for w in words if w not in SPECIALS]
        symbols += [f"madeupword{i:04d}" for i in range(-len(symbols) % padding_factor)]
        return cls(symbols)

    def __len__(self) -> int:
        return len(self.symbols)

    def encode(self, line: str) -> list[int]:
        """Word ids of a whitespace-tokenised line, unknown words as <unk>, then </s>."""
        return [self.indices.get(w, UNK) for w in line.split()] + [EOS]

    def string(self, ids: Iterable[int], unk: str = "<unk>") -> str:
        """Words of `ids` up to the first </s>, without <s> or <pad>; <unk> written as `unk`."""
        words = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i not in (BOS, PAD):
                words.append(unk if i == UNK else self.symbols[i])
        return " ".join(words)


@dataclass
class ParallelText:
    """Encoded sentence pairs, each side one flat int32 tensor cut at `offsets` (n + 1)."""

    src: torch.Tensor
    src_offsets: torch.Tensor
    tgt: torch.Tensor
    tgt_offsets: torch.Tensor

    @classmethod
    def encode(
        cls, src_lines: list[str], tgt_lines: list[str], src_dict: Dictionary, tgt_dict: Dictionary
    ) -> ParallelText:
        if len(src_lines) != len(tgt_lines):
            raise ValueError(f"data: {len(src_lines)} source but {len(tgt_lines)} target lines")
        return cls(
            *_flat([src_dict.encode(l) for l in src_lines]),
            *_flat([tgt_dict.encode(l) for l in tgt_lines]),
        )

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @property
    def src_sizes(self) -> np.ndarray:
        return np.diff(self.src_offsets.numpy())

    @property
    def tgt_sizes(self) -> np.ndarray:
        return np.diff(self.tgt_offsets.numpy())

    def source(self, i: int) -> torch.Tensor:
        return self.src[self.src_offsets[i] : self.src_offsets[i + 1]].long()

    def target(self, i: int) -> torch.Tensor:
        return self.tgt[self.tgt_offsets[i] : self.tgt_offsets[i + 1]].long()

    def subset(self, ids: Iterable[int]) -> ParallelText:
        ids = list(ids)
        return ParallelText(
            *_flat([self.source(i).tolist() for i in ids]),
            *_flat([self.target(i).tolist() for i in ids]),
        )


def _flat(sentences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = np.zeros(len(sentences) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sentences], out=offsets[1:])
    flat = np.fromiter((i for s in sentences for i in s), dtype=np.int32, count=int(offsets[-1]))
    return torch.from_numpy(flat), torch.from_numpy(offsets)


@dataclass
class Iwslt14:
    """The vocabularies and splits; `valid` is None for a folder without a training split."""

    src_dict: Dictionary
    tgt_dict: Dictionary
    train: ParallelText
    valid: ParallelText | None
    test: ParallelText


def find_folder(root: Path) -> Path:
    """`root` itself if it holds test.de, else the first of FOLDER_NAMES under it that exists."""
    root = Path(root)
    for folder in (root, *(root / name for name in FOLDER_NAMES)):
        if (folder / "test.de").is_file():
            return folder
    raise FileNotFoundError(
        f"data.root: no IWSLT'14 folder at {root} (looked for test.de there and in {', '.join(FOLDER_NAMES)})"
    )


def load(
    folder: Path,
    src_lang: str = "de",
    tgt_lang: str = "en",
    joined: bool = False,
    threshold: int = 0,
) -> Iwslt14:
    """The encoded corpus, from the cache when the files are unchanged.

    joined: one vocabulary over both languages (fairseq's --joined-dictionary), else one each
    (the recipe's choice); threshold: drop training words seen fewer times (--thresholdsrc/tgt).
    """
    folder = Path(folder)
    names = (
        ("train", "valid", "test")
        if (folder / f"train.{src_lang}").is_file()
        else ("valid", "test")
    )
    files = [folder / f"{name}.{lang}" for name in names for lang in (src_lang, tgt_lang)]
    for file in files:
        if not file.is_file():
            raise FileNotFoundError(f"data.root: {file} is missing")
    stamp = ";".join(f"{f.resolve()}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    key = hashlib.sha1(f"{CACHE_VERSION}|{stamp}|{joined}|{threshold}".encode()).hexdigest()[:16]
    path = cache_dir() / f"iwslt14-{key}.pt"
    if path.exists():
        return _from_state(torch.load(path, weights_only=True))
    corpus = _encode(folder, names, src_lang, tgt_lang, joined, threshold)
    tmp = path.with_suffix(f".tmp{id(corpus)}")
    torch.save(_state(corpus), tmp)
    tmp.replace(path)
    return corpus


def _read(file: Path) -> list[str]:
    return file.read_text(encoding="utf-8").splitlines()


def _encode(
    folder: Path, names: tuple[str, ...], src_lang: str, tgt_lang: str, joined: bool, threshold: int
) -> Iwslt14:
    text = {
        name: (_read(folder / f"{name}.{src_lang}"), _read(folder / f"{name}.{tgt_lang}"))
        for name in names
    }
    train_src, train_tgt = text[names[0]]
    if joined:
        src_dict = tgt_dict = Dictionary.build(train_src + train_tgt, threshold)
    else:
        src_dict, tgt_dict = (
            Dictionary.build(train_src, threshold),
            Dictionary.build(train_tgt, threshold),
        )
    parts = {name: ParallelText.encode(*text[name], src_dict, tgt_dict) for name in names}
    valid = parts["valid"] if "train" in names else None
    return Iwslt14(src_dict, tgt_dict, parts[names[0]], valid, parts["test"])


def _state(corpus: Iwslt14) -> dict:
    def part(p: ParallelText | None):
        return None if p is None else [p.src, p.src_offsets, p.tgt, p.tgt_offsets]

    return {
        "src_symbols": corpus.src_dict.symbols,
        "tgt_symbols": corpus.tgt_dict.symbols,
        **{name: part(getattr(corpus, name)) for name in ("train", "valid", "test")},
    }


def _from_state(state: dict) -> Iwslt14:
    src_dict = Dictionary(state["src_symbols"])
    tgt_dict = (
        src_dict
        if state["tgt_symbols"] == state["src_symbols"]
        else Dictionary(state["tgt_symbols"])
    )
    parts = {
        name: None if state[name] is None else ParallelText(*state[name])
        for name in ("train", "valid", "test")
    }
    return Iwslt14(src_dict, tgt_dict, **parts)


# ---- batches -----------------------------------------------------------------------------------


@dataclass
class Batch:
    """Padded LongTensors of n sentence pairs, longest source first (fairseq's collate order)."""

    ids: torch.Tensor  # (n,) sentence indices in the split
    src_tokens: torch.Tensor  # (n, S) left-padded, each ending in </s>
    src_lengths: torch.Tensor  # (n,) eos included
    prev_output_tokens: (
        torch.Tensor
    )  # (n, T) </s> then the target without its last token, right-padded
    target: torch.Tensor  # (n, T) right-padded, each ending in </s>
    ntokens: int  # non-pad target tokens: what the summed loss is divided by

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def num_tokens(self) -> int:
        """fairseq's batch cost: sentences x the longest source or target."""
        return len(self) * max(self.src_tokens.shape[1], self.target.shape[1])

    def to(self, device: torch.device | str) -> Batch:
        tensors = (
            self.ids,
            self.src_tokens,
            self.src_lengths,
            self.prev_output_tokens,
            self.target,
        )
        return Batch(*(to_device(t, device) for t in tensors), self.ntokens)

    def rows(self, index: torch.Tensor) -> Batch:
        """The sub-batch of rows `index`, its padding trimmed to its own longest sentences."""
        src_lengths = self.src_lengths[index]
        target = self.target[index]
        tgt_len = int(target.ne(PAD).sum(1).max())
        src = self.src_tokens[index][:, self.src_tokens.shape[1] - int(src_lengths.max()) :]
        return Batch(
            self.ids[index],
            src,
            src_lengths,
            self.prev_output_tokens[index][:, :tgt_len],
            target[:, :tgt_len],
            int(target.ne(PAD).sum()),
        )


def collate(data: ParallelText, ids: Iterable[int]) -> Batch:
    """The padded batch of sentences `ids`."""
    ids = torch.as_tensor(list(ids), dtype=torch.long)
    sources = [data.source(int(i)) for i in ids]
    src_lengths = torch.tensor([len(s) for s in sources])
    src_lengths, order = src_lengths.sort(descending=True, stable=True)
    ids = ids[order]
    sources = [sources[int(i)] for i in order]
    targets = [data.target(int(i)) for i in ids]
    n, S, T = len(ids), int(src_lengths.max()), max(len(t) for t in targets)
    src_tokens = torch.full((n, S), PAD, dtype=torch.long)
    target = torch.full((n, T), PAD, dtype=torch.long)
    prev = torch.full((n, T), PAD, dtype=torch.long)
    for row, (s, t) in enumerate(zip(sources, targets)):
        src_tokens[row, S - len(s) :] = s
        target[row, : len(t)] = t
        prev[row, 0] = EOS
        prev[row, 1 : len(t)] = t[:-1]
    return Batch(ids, src_tokens, src_lengths, prev, target, int(target.ne(PAD).sum()))


def batches_by_tokens(data: ParallelText, max_tokens: int, seed: int) -> list[np.ndarray]:
    """fairseq's batching: a seeded shuffle, stable sorts by target then source length, then
    consecutive sentences while n * max(source, target length) stays within `max_tokens`."""
    sizes = np.maximum(data.src_sizes, data.tgt_sizes)
    if len(sizes) and sizes.max() > max_tokens:
        raise ValueError(
            f"schedule.max_tokens: {max_tokens} is not allowed; the longest sentence pair has "
            f"{int(sizes.max())} tokens, so at least that many are required"
        )
    order = np.random.RandomState(seed).permutation(len(data))
    order = order[np.argsort(data.tgt_sizes[order], kind="mergesort")]
    order = order[np.argsort(data.src_sizes[order], kind="mergesort")]
    return _greedy_groups(order, sizes[order], max_tokens)


def _greedy_groups(items: np.ndarray, sizes: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Cut `items` (in order) into runs whose count x largest size is at most `max_tokens`;
    an item larger than the budget on its own forms a run alone."""
    groups, start, longest = [], 0, 0
    for pos, size in enumerate(sizes):
        longest_with = max(longest, int(size))
        if pos > start and (pos - start + 1) * longest_with > max_tokens:
            groups.append(items[start:pos])
            start, longest_with = pos, int(size)
        longest = longest_with
    if len(items):
        groups.append(items[start:])
    return groups


def epoch_order(batches: list[np.ndarray], epoch: int, seed: int) -> list[np.ndarray]:
    """The batches in this epoch's order, shuffled from (seed, epoch) as fairseq does per epoch."""
    order = np.random.RandomState(seed + epoch).permutation(len(batches))
    return [batches[i] for i in order]


def split_microbatches(batch: Batch, max_tokens: int) -> list[Batch]:
    """The batch cut into consecutive microbatches of at most `max_tokens` (fairseq's count,
    sentences x longest source or target). A sentence pair longer than the budget cannot be cut
    and becomes a microbatch of its own. Each microbatch keeps its own `ntokens`; to get the
    full batch's gradient, divide every microbatch's summed loss by `batch.ntokens`."""
    sizes = torch.maximum(batch.src_lengths, batch.target.ne(PAD).sum(1)).cpu().numpy()
    groups = _greedy_groups(np.arange(len(batch)), sizes, max_tokens)
    if len(groups) == 1:
        return [batch]
    return [batch.rows(torch.from_numpy(g).to(batch.ids.device)) for g in groups]


# ---- loss --------------------------------------------------------------------------------------


def label_smoothed_nll_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int = PAD
) -> tuple[torch.Tensor, torch.Tensor]:
    """fairseq's label_smoothed_nll_loss as the paper's 2019 fairseq had it, summed over non-pad
    targets, in fp32: loss = (1 - eps) * nll + eps / V * sum_v(-log p_v); returns (loss, nll).
    (fairseq >= 0.10 spreads eps over the V - 1 other words instead: (1 - eps - eps/(V-1)) * nll
    + eps/(V-1) * sum_v(-log p_v), a difference of order eps / V.)"""
    lprobs = F.log_softmax(logits.float(), dim=-1).view(-1, logits.shape[-1])
    target = target.reshape(-1, 1)
    pad = target.eq(ignore_index)
    nll = -lprobs.gather(-1, target).masked_fill(pad, 0.0).sum()
    smooth = -lprobs.sum(-1, keepdim=True).masked_fill(pad, 0.0).sum()
    return (1.0 - epsilon) * nll + epsilon / lprobs.shape[-1] * smooth, nll
