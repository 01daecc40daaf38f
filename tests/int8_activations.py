"""A user's own memory technique, as a user would write it outside the project: lossy activation
compression that keeps every activation the backward pass needs in int8 (one scale per tensor)
instead of its float dtype, through `torch.autograd.graph.saved_tensors_hooks`.

Installed packages register it under the ``tune_lowmem.techniques`` entry-point group;
tests/test_technique_plugin.py writes such a package's metadata and nothing of tune_lowmem
changes. Its one setting, ``int8_activations``, becomes a config field, a store column and a
searchable parameter.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from tune_lowmem.techniques.base import Technique
from tune_lowmem.techniques.setting import Setting

LEVELS = 127  # int8's symmetric range


def pack(tensor: torch.Tensor) -> Any:
    """A saved float activation as int8 codes and its scale, with one float temporary; parameters
    and integers as they are (a parameter is held anyway: quantizing it would save nothing)."""
    if not tensor.is_floating_point() or isinstance(tensor, nn.Parameter):
        return tensor
    low, high = tensor.detach().aminmax()
    scale = torch.maximum(low.abs(), high.abs()).float().clamp(min=1e-12) / LEVELS
    codes = tensor.detach().div(scale).round_().clamp_(-LEVELS, LEVELS).to(torch.int8)
    return codes, scale, tensor.dtype


def unpack(packed: Any) -> torch.Tensor:
    if isinstance(packed, torch.Tensor):
        return packed
    codes, scale, dtype = packed
    return codes.to(dtype).mul_(scale)


class Int8Activations(Technique):
    """Saved activations in int8 while the model trains: LOSSY, a quarter of fp32's bytes."""

    NAME = "int8_activations"
    SETTINGS = (Setting("int8_activations", bool, False),)
    EXACT: ClassVar = {"int8_activations": (False,)}  # off: the plain step

    @classmethod
    def enabled(cls, config) -> bool:
        return config.int8_activations

    @classmethod
    def validate(cls, config, task) -> None:
        pass  # any task, any precision: it only changes what the backward pass keeps

    @classmethod
    def shape_settings(cls, config) -> dict[str, Any]:
        return {"int8_activations": config.int8_activations}  # it changes the step's tensors

    @classmethod
    def off_metrics(cls, config) -> dict[str, float]:
        return {"int8_packed_tensors": 0.0}

    def __init__(self, config, task):
        super().__init__(config, task)
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, unpack)
        self.packed = 0

    def _pack(self, tensor: torch.Tensor) -> Any:
        packed = pack(tensor)
        self.packed += packed is not tensor
        return packed

    def apply(self, model: nn.Module) -> nn.Module:
        model.register_forward_pre_hook(self._enter)
        model.register_forward_hook(self._exit)
        return model

    def _enter(self, model: nn.Module, args: tuple) -> None:
        if model.training and torch.is_grad_enabled():
            self.hooks.__enter__()
            self.active = True

    def _exit(self, model: nn.Module, args: tuple, output: Any) -> None:
        if getattr(self, "active", False):
            self.hooks.__exit__(None, None, None)
            self.active = False

    def metrics(self) -> dict[str, float]:
        return {"int8_packed_tensors": float(self.packed)}
