"""The probe's figures, kept in memory and in one JSON file per device under the project's cache
folder (`data.cache_dir`, $TUNE_LOWMEM_CACHE): `time-probe/<device>.json` holds the device it is
for (`device.Device`), the framework's overheads and the cost of a page of fresh memory, and
each call's `CallTime` (None: not priced), keyed by the call's text. A file is written whole and
atomically, merged with what another process wrote meanwhile, so that trials sharing a machine
share their probes; one of another format (`FORMAT`) is probed again."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..data import cache_dir
from .device import Device
from .timers import CallTime

SECTIONS = ("overhead", "calls")
FORMAT = 2
OPERATOR = type(torch.ops.aten.add.Tensor)  # an operator overload, named by `str`
_memory: dict[Device, dict[str, dict[str, Any]]] = {}


def path(device: Device) -> Path:
    return cache_dir() / "time-probe" / f"{device.slug()}.json"


def text(key: Any) -> str:
    """A call's (or any key's) text: the same in every process (an operator by its name; dtypes,
    devices, tensor descriptions and numbers by their repr)."""
    if isinstance(key, tuple) and not hasattr(key, "_fields"):
        return "(" + ", ".join(map(text, key)) + ")"
    if isinstance(key, OPERATOR):
        return str(key)
    return repr(key)


def section(device: Device, name: str) -> dict[str, Any]:
    """The figures of `name` (one of `SECTIONS`) known for `device`, read from disk the first time
    (the dict itself: `update` adds to it)."""
    if device not in _memory:
        _memory[device] = _read(path(device), device)
    return _memory[device][name]


def update(device: Device, name: str, figures: dict[str, Any]) -> None:
    """Add `figures` to section `name` of `device`, in memory and on disk."""
    section(device, name).update(figures)
    file = path(device)
    on_disk = _read(file, device)
    for key in SECTIONS:
        on_disk[key].update(_memory[device][key])
    file.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "device": dataclasses.asdict(device),
        **{key: {k: _plain(v) for k, v in on_disk[key].items()} for key in SECTIONS},
    }
    with tempfile.NamedTemporaryFile("w", dir=file.parent, delete=False, suffix=".tmp") as out:
        json.dump(payload, out)
    os.replace(out.name, file)


def clear() -> None:
    """Forget what is in memory (the files stay)."""
    _memory.clear()


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, CallTime) else value


def _read(file: Path, device: Device) -> dict[str, dict[str, Any]]:
    """A cache file's sections, empty when it is missing, unreadable or for another device."""
    empty = {key: {} for key in SECTIONS}
    try:
        stored = json.loads(file.read_text())
    except (OSError, ValueError):
        return empty
    if stored.get("device") != dataclasses.asdict(device) or stored.get("format") != FORMAT:
        return empty
    calls = {k: None if v is None else CallTime(*v) for k, v in stored.get("calls", {}).items()}
    return {"overhead": dict(stored.get("overhead", {})), "calls": calls}
