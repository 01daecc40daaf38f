"""Data sets, one module per task; tensors decoded once and kept in memory."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..config import DataConfig

PROJECT_ROOT = Path(__file__).resolve().parents[2]


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
