"""Data sets, one module per task; tensors decoded once and kept in memory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..validation import choice, nonnegative_int, optional_positive_int

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SPLITS = ("search", "final")


@dataclass(frozen=True)
class DataConfig:
    """Where the data is and how much of it a trial uses."""

    root: str | None = None  # None: $TUNE_LOWMEM_DATA, else ../shared/data beside the project
    train_subset: int | None = None  # use only this many training examples (quick runs)
    # held out from training for search: CIFAR-10 images (the paper: 5,000); IWSLT'14 sentence
    # pairs, only when the folder has no valid split of its own (the shipped iwslt14-small)
    val_size: int = 5000
    test_subset: int | None = None
    split: str = "search"  # search: train 45k / validate 5k; final: train on all 50k
    augment: bool = True  # 4-pixel pad, random crop, horizontal flip

    def validate(self, prefix: str) -> None:
        optional_positive_int(self.train_subset, f"{prefix}.train_subset")
        optional_positive_int(self.test_subset, f"{prefix}.test_subset")
        nonnegative_int(self.val_size, f"{prefix}.val_size")
        choice(self.split, SPLITS, f"{prefix}.split")


def data_root(config: DataConfig) -> Path:
    """The data folder: the config's, else $TUNE_LOWMEM_DATA, else ../shared/data beside the project."""
    if config.root is not None:
        return Path(config.root).expanduser().resolve()
    if "TUNE_LOWMEM_DATA" in os.environ:
        return Path(os.environ["TUNE_LOWMEM_DATA"]).expanduser().resolve()
    return (PROJECT_ROOT.parent / "shared" / "data").resolve()


def cache_dir() -> Path:
    """Where decoded tensors are kept between runs ($TUNE_LOWMEM_CACHE, else ~/.cache/tune-lowmem)."""
    path = Path(os.environ.get("TUNE_LOWMEM_CACHE", Path.home() / ".cache" / "tune-lowmem"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`tensor` on `device`. A host tensor bound for a GPU goes through pinned memory without
    blocking the host, so the copy queues behind the GPU's work instead of waiting for it (the
    pinned buffer is kept by torch until the copy is done)."""
    device = torch.device(device)
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
