"""Checks of the command line's places and machines, made before a Ray cluster starts or is
joined: a store that cannot be written, an address nobody answers at, a trial bigger than the
cluster (which Ray would wait for forever), a CUDA device on a machine without one. Each failure
is a `ConfigError` naming the flag or field.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .validation import ConfigError, require

CONNECT_TIMEOUT_S = 5.0


def writable_folder(path: str | Path, flag: str) -> Path:
    """`path` is a folder, or can be made one, that this user may write; nothing is created."""
    path = Path(path).expanduser().resolve()
    require(not path.exists() or path.is_dir(), flag, f"{path} is a file; a folder is required")
    existing = next(p for p in (path, *path.parents) if p.exists())
    require(existing.is_dir(), flag, f"{existing} is a file; a folder is required")
    require(
        os.access(existing, os.W_OK | os.X_OK),
        flag,
        f"{existing} is read-only; a writable folder is required",
    )
    return path


def store_folder(path: str | Path, flag: str) -> Path:
    """A store to read: a folder (a missing one holds no trials, as the readers then say)."""
    path = Path(path).expanduser().resolve()
    require(
        not path.exists() or path.is_dir(),
        flag,
        f"{path} is a file; the store's folder is required",
    )
    return path


def reachable(address: str | None, flag: str = "--address") -> None:
    """A HOST:PORT or ray://HOST:PORT that answers a TCP connection (``auto`` and None are Ray's
    to resolve: `connection_refused` turns its error into one line)."""
    if address is None or address == "auto":
        return
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    require(
        bool(sep and host and port.isdigit() and 0 < int(port) < 65536),
        flag,
        f"{address!r} is not allowed; auto, HOST:PORT or ray://HOST:PORT is required",
    )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(flag, f"nothing answers at {address} ({reason})") from None


def connection_refused(
    address: str | None, error: BaseException, flag: str = "--address"
) -> ConfigError:
    """Ray's own refusal to connect, as one line."""
    text = " ".join(str(error).split())[:300]
    return ConfigError(flag, f"cannot join a Ray cluster at {address or 'auto'}: {text}")


def local_resources() -> dict[str, float]:
    """What a local Ray cluster of this machine has: its usable CPUs and its CUDA devices."""
    import torch

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"CPU": float(cpus or 1), "GPU": float(torch.cuda.device_count())}


def fits(space: Any, available: Mapping[str, float], where: str) -> None:
    """One trial's request fits in `available` (Ray's resource names), else it would wait forever."""
    resources = space.resources
    cpus = available.get("CPU", 0.0)
    require(
        resources.cpu <= cpus,
        "resources.cpu",
        f"{resources.cpu} is not allowed; {where} has {cpus:g} CPUs, and a trial asking for more "
        "would wait forever",
    )
    gpus = available.get("GPU", 0.0)
    needed = 1.0 if resources.gpu == "auto" else float(resources.gpu)  # auto: a share of one GPU
    if needed > 0:
        require(
            needed <= gpus,
            "resources.gpu",
            f"{resources.gpu!r} is not allowed; {where} has {gpus:g} GPUs",
        )


def cuda_present(device: str, field: str = "device") -> None:
    """A config naming device cuda on a machine without CUDA is refused before it runs."""
    if device != "cuda":
        return
    import torch

    require(
        torch.cuda.is_available(),
        field,
        "'cuda' is not allowed: this machine has no CUDA device; allowed here: auto, cpu",
    )


def machine(space: Any, address: str | None) -> None:
    """Before Ray: a local cluster is this machine, so a trial must fit in it."""
    if address is None:
        fits(space, local_resources(), "this machine")
        cuda_present(space.base["device"], "base.device")


def cluster(space: Any) -> None:
    """Once joined, before any trial: a trial bigger than the whole cluster would wait forever."""
    import ray

    fits(space, ray.cluster_resources(), "the Ray cluster")
