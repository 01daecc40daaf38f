"""CIFAR-10 as uint8 tensors in host memory, with the standard augmentation drawn per minibatch.

Sources: torchvision's CIFAR10 folder (`cifar-10-batches-py`, downloaded when the network
allows) or the JPEG layout `cifar10-jpeg/{train,test}/<class>/NNNN.jpg` (also as its .tar.gz).
JPEGs are decoded once and cached as a .npz keyed by the source's content (the same data laid
again elsewhere or later is not decoded again); no epoch ever decodes an image. The splits stay on the host and
minibatches are served as rows of a split with their augmentation drawn (`Minibatch`): the task
gathers and augments each microbatch's images, moves them to its device and normalises them there
(`normalize`), so a device holds one microbatch of input at a time and never the minibatch or the
data set.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import DataConfig, cache_dir, data_root, to_device
from .batch import HOST_DATA

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
TRAIN_SIZE = 50_000


@dataclass(frozen=True)
class Arrays:
    """Images as uint8 (N, 32, 32, 3) and labels as int64 (N,)."""

    images: np.ndarray
    labels: np.ndarray


def load(root: Path) -> tuple[Arrays, Arrays]:
    """Train and test arrays from the first source found under `root`."""
    batches = root / "cifar-10-batches-py"
    if batches.is_dir():
        return _from_torchvision(root)
    for candidate in (root / "cifar10-jpeg", root / "cifar10-jpeg.tar.gz"):
        if candidate.exists():
            return _cached(candidate)
    if not root.is_dir():  # a mistyped data.root: no folder is made for a download into it
        raise FileNotFoundError(
            f"data.root: {root} is not a folder; a folder holding CIFAR-10 is required"
        )
    try:
        return _from_torchvision(root, download=True)
    except Exception as error:  # no network, or no permission to write there
        raise FileNotFoundError(
            f"data.root: no CIFAR-10 under {root} (looked for cifar-10-batches-py, cifar10-jpeg, "
            f"cifar10-jpeg.tar.gz) and torchvision's download failed: {error}"
        ) from error


def _from_torchvision(root: Path, download: bool = False) -> tuple[Arrays, Arrays]:
    from torchvision.datasets import CIFAR10

    parts = [CIFAR10(str(root), train=train, download=download) for train in (True, False)]
    return tuple(Arrays(np.asarray(p.data), np.asarray(p.targets, dtype=np.int64)) for p in parts)


def content_key(source: Path) -> str:
    """A hash of the source's bytes: the archive's, or a folder's JPEGs with their paths inside
    it (and lengths, so no two layouts run together), in name order. Not its path or file times."""
    digest = hashlib.sha256()
    if source.is_dir():
        for file in sorted(source.glob("*/*/*.jpg")):
            name, data = file.relative_to(source).as_posix().encode(), file.read_bytes()
            digest.update(b"%d:%s%d:" % (len(name), name, len(data)) + data)
    else:
        with source.open("rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def _cached(source: Path) -> tuple[Arrays, Arrays]:
    path = cache_dir() / f"cifar10-{content_key(source)}.npz"
    if not path.exists():
        train, test = _decode_jpegs(source)
        tmp = path.with_suffix(f".tmp{id(path)}.npz")
        np.savez(
            tmp, train_x=train.images, train_y=train.labels, test_x=test.images, test_y=test.labels
        )
        tmp.replace(path)
    with np.load(path) as z:
        return Arrays(z["train_x"], z["train_y"]), Arrays(z["test_x"], z["test_y"])


def _decode_jpegs(source: Path) -> tuple[Arrays, Arrays]:
    from PIL import Image

    found: dict[str, list[tuple[str, int, np.ndarray]]] = {"train": [], "test": []}

    def add(name: str, data: bytes) -> None:
        parts = Path(name).parts
        split, label = parts[-3], CLASSES.index(parts[-2])
        image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.uint8)
        found[split].append((name, label, image))

    if source.is_dir():
        for file in sorted(source.glob("*/*/*.jpg")):
            add(str(file), file.read_bytes())
    else:
        with tarfile.open(source) as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(".jpg"):
                    add(member.name, tar.extractfile(member).read())
    arrays = []
    for split in ("train", "test"):
        items = sorted(found[split], key=lambda item: item[0])
        arrays.append(
            Arrays(
                np.stack([i[2] for i in items]), np.asarray([i[1] for i in items], dtype=np.int64)
            )
        )
    return arrays[0], arrays[1]


@dataclass
class Split:
    """One part of the data on the host: normalised-ready uint8 images (N, 3, 32, 32) and labels."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclass
class Cifar10:
    """The train / validation / test splits a trial uses, per its DataConfig."""

    train: Split
    val: Split | None
    test: Split

    @classmethod
    def from_config(cls, config: DataConfig, seed: int) -> Cifar10:
        """search: a seeded 45,000/5,000 train/validation split; final: all 50,000 train, no validation."""
        train, test = load(data_root(config))
        order = np.random.default_rng(seed).permutation(len(train.labels))
        if config.split == "search" and config.val_size > 0:
            val_idx, train_idx = order[: config.val_size], order[config.val_size :]
        else:
            val_idx, train_idx = order[:0], order
        if config.train_subset is not None:
            train_idx = train_idx[: config.train_subset]
        test_idx = np.arange(len(test.labels))
        if config.test_subset is not None:
            test_idx = np.random.default_rng(seed + 1).permutation(test_idx)[: config.test_subset]

        def split(arrays: Arrays, idx: np.ndarray) -> Split:
            images = torch.from_numpy(arrays.images[np.sort(idx)]).permute(0, 3, 1, 2).contiguous()
            labels = torch.from_numpy(arrays.labels[np.sort(idx)])
            return Split(images, labels)

        return cls(
            split(train, train_idx),
            split(train, val_idx) if len(val_idx) else None,
            split(test, test_idx),
        )


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, 3, H, W) to float32, per-channel mean and standard deviation removed: in place on
    the one float copy (the same values as ``(x / 255 - mean) / std``, one batch of floats held)."""
    mean = torch.tensor(MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=images.device).view(1, 3, 1, 1)
    return images.float().div_(255.0).sub_(mean).div_(std)


def draw_augmentation(count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each of `count` images' crop offsets into its 4-pixel padded copy, (count, 2) rows then
    columns in 0..8, and whether it is flipped, (count,) bool: drawn for a whole minibatch."""
    rows = torch.randint(0, 9, (count,), generator=generator)
    cols = torch.randint(0, 9, (count,), generator=generator)
    flips = torch.rand(count, generator=generator) < 0.5
    return torch.stack([rows, cols], dim=1), flips


def augment(images: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor) -> torch.Tensor:
    """4-pixel zero pad, the 32x32 crop at each image's `offsets` and its horizontal flip where
    `flips`, on uint8 (N, 3, 32, 32): each image's own, so any rows' slice augments alike."""
    n, _, h, w = images.shape
    device = images.device
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    offsets, flips = to_device(offsets, device), to_device(flips, device)
    rows = (offsets[:, 0, None] + torch.arange(h, device=device))[:, None, :, None]
    cols = (offsets[:, 1, None] + torch.arange(w, device=device))[:, None, None, :]
    batch = torch.arange(n, device=device)[:, None, None, None]
    channel = torch.arange(3, device=device)[None, :, None, None]
    cropped = padded[batch, channel, rows, cols]
    return torch.where(flips[:, None, None, None], cropped.flip(3), cropped)


@dataclass(frozen=True)
class Minibatch:
    """A training minibatch as the rows of a host split it takes and their augmentation, drawn
    when it is made: `images` gathers and augments only its own rows, so a microbatch of it
    (`data.batch.split_rows`) copies a microbatch's images and never the minibatch's, which on a
    CPU trial (the host is the device) would be held through the whole step."""

    split: Split = field(metadata=HOST_DATA)  # the data set's host copy, referred to
    index: torch.Tensor  # (n,) rows of `split`
    labels: torch.Tensor  # (n,) int64, gathered
    offsets: torch.Tensor | None  # (n, 2) crop offsets (`draw_augmentation`); None: no augment
    flips: torch.Tensor | None  # (n,) bool

    def images(self) -> torch.Tensor:
        """The rows' augmented uint8 images (N, 3, 32, 32): the values augmenting the minibatch
        whole gives them."""
        images = self.split.images[self.index]
        return images if self.offsets is None else augment(images, self.offsets, self.flips)


def minibatch(
    split: Split, index: torch.Tensor, generator: torch.Generator, augment_images: bool
) -> Minibatch:
    """The rows `index` of `split` as a minibatch, with their augmentation drawn now."""
    drawn = draw_augmentation(len(index), generator) if augment_images else (None, None)
    return Minibatch(split, index, split.labels[index], *drawn)


def train_batches(
    split: Split, batch_size: int, epoch: int, seed: int, augment_images: bool = True
) -> Iterator[Minibatch]:
    """One epoch of shuffled minibatches of the host split (`Minibatch.images` gives their
    augmented uint8 images, `normalize` makes those the model's input); the same for the same
    (seed, epoch).

    The last incomplete batch is dropped so that every step sees exactly `batch_size` images.
    """
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(len(split), generator=generator)
    for start in range(0, len(split) - batch_size + 1, batch_size):
        yield minibatch(split, order[start : start + batch_size], generator, augment_images)


def eval_batches(split: Split, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The split in order, `batch_size` uint8 images at a time (views of the host copy)."""
    for start in range(0, len(split), batch_size):
        yield split.images[start : start + batch_size], split.labels[start : start + batch_size]
