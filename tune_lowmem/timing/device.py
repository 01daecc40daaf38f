"""Which device a time is predicted for: what the probe's measurements hold for, and the key its
cache is filed under.

A kernel's time is its device's (a CPU model, a GPU), at the thread count the trial computes
with on the CPU, under one torch version (its kernels and dispatcher change between versions);
two machines of the same model share their probe's figures.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says."""
    if CPUINFO.exists():
        for line in CPUINFO.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@dataclass(frozen=True)
class Device:
    """A device as the time probe knows it: its type (cpu, cuda), its name (the CPU's model or
    the GPU's), the CPU threads torch computes with there, and torch's version."""

    kind: str
    name: str
    threads: int
    torch: str

    @classmethod
    def of(cls, device: torch.device | str, threads: int | None = None) -> Device:
        """`device` (its type and, on CUDA, its index) at `threads` CPU threads (None: torch's
        now)."""
        device = torch.device(device)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
        return cls(device.type, name, threads or torch.get_num_threads(), torch.__version__)

    def slug(self) -> str:
        """A file name that says what the device is."""
        text = f"{self.kind}-{self.name}-{self.threads}threads-torch{self.torch}"
        return re.sub(r"[^A-Za-z0-9.+-]+", "_", text)

    def describe(self) -> str:
        return f"{self.kind} ({self.name}), {self.threads} thread(s), torch {self.torch}"
