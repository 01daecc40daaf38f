"""An operator call described by what decides its kernel, counted in a dry run and made again.

What an operator does with its arguments (which kernel runs, what it allocates inside, how long
it takes) is decided by the operator, each tensor argument's sizes, strides, dtype and device,
and the other arguments, never by the values. `call_key` keeps those and no tensor (a key
outlives the fake step and keeps none of its tensors alive); `real` makes a key's arguments
again as zero tensors, so that a probe can run the call for real: the workspace probe
(`workspace`) and the time probe (`tune_lowmem.timing`).

`CallCounts` is what a dry run records of its operators for the time prediction: each distinct
call with how many times an update runs it (a pass that stands for several microbatches counts
that many) and the framework's work around it (`context`); a `Recording` keeps them with the
storages the code allocated and the passes it made, whose pattern the time prediction replays
on the host's allocator (`tune_lowmem.timing.faults`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch.utils._pytree import tree_leaves

from ..torch_private import in_backward

# What the framework does around a call, beside its kernel (`context`):
RECORDS = "records"  # a forward call that autograd records (a node, which the engine runs later)
BACKWARD = "backward"  # a call inside a backward pass (the engine's, or a node's own code)
PLAIN = "plain"  # any other: no autograd (the optimizer's step, an evaluation, a check)
CONTEXTS = (RECORDS, BACKWARD, PLAIN)


def call_key(func, args: tuple, kwargs: dict) -> tuple:
    """The operator and its arguments as described (`described`): what decides its kernel."""
    return func, described(args), described(tuple(sorted(kwargs.items())))


class TensorSpec(NamedTuple):
    """A tensor argument as described: what its kernel depends on."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: str  # its device type


class GeneratorSpec(NamedTuple):
    """A random generator argument, by its device type."""

    device: str


class ObjectSpec(NamedTuple):
    """An object of torch's script classes (a profiler range's record), by its class."""

    cls: str


def described(value: Any) -> Any:
    """A tensor as its `TensorSpec`, a random generator as its `GeneratorSpec`, a script object
    as its `ObjectSpec`, sequences item by item, any other argument as it is."""
    if isinstance(value, torch.Tensor):
        return TensorSpec(tuple(value.shape), tuple(value.stride()), value.dtype, value.device.type)
    if isinstance(value, torch.Generator):
        return GeneratorSpec(value.device.type)
    if isinstance(value, torch.ScriptObject):
        return ObjectSpec(str(value._type()))
    if isinstance(value, (list, tuple)):
        return tuple(described(v) for v in value)
    return value


class NotMade(ValueError):
    """A described argument that cannot be made again (an object of torch's script classes)."""


def real(value: Any) -> Any:
    """A described argument as a real one: a tensor as zeros of its sizes, strides and dtype on
    its device type (the current device of that type), a generator as a fresh one; `NotMade`
    for a script object."""
    if isinstance(value, TensorSpec):
        return torch.empty_strided(
            value.shape, value.stride, dtype=value.dtype, device=value.device
        ).zero_()
    if isinstance(value, GeneratorSpec):
        return torch.Generator(device=value.device)
    if isinstance(value, ObjectSpec):
        raise NotMade(f"{value.cls} cannot be made again")
    if isinstance(value, tuple):
        return [real(v) for v in value]
    return value


def context(args: tuple, kwargs: dict) -> str:
    """What the framework does around a call being dispatched now (one of `CONTEXTS`): autograd
    records it (grad mode on and a tensor argument requires grad; a recomputation in a
    checkpointed backward too), it runs inside a backward pass, or neither."""
    if torch.is_grad_enabled() and any(
        isinstance(leaf, torch.Tensor) and leaf.requires_grad
        for leaf in tree_leaves((args, kwargs))
    ):
        return RECORDS
    return BACKWARD if in_backward() else PLAIN


class CallCounts:
    """Each distinct call (`call_key`) in its `context`, with what it made where that depends on
    its inputs' values (the outputs of an operator tagged `dynamic_output_shape`, as described;
    else None), and how many times it runs: `weight` times each time it is added (a dry run's
    pass that stands for that many microbatches)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, tuple, Any], int] = {}
        self.weight = 1

    def add(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        if func.namespace == "prim":  # a fake tensor's question (its device), a real one's in C++
            return
        made = described(out) if torch.Tag.dynamic_output_shape in func.tags else None
        key = (context(args, kwargs), call_key(func, args, kwargs), made)
        self.counts[key] = self.counts.get(key, 0) + self.weight


@dataclass(frozen=True, eq=False)
class Recording:
    """What the time prediction keeps of a dry run's step (or of one evaluation pass): each
    distinct call with how many times it runs (`CallCounts.counts`), each storage the code
    allocated as (its first event, the event from which it is gone or None: alive at the end,
    its bytes), and its passes in order as (the first event of the pass, how many microbatches
    it stands for), the optimizer's update the last."""

    calls: dict[tuple[str, tuple, Any], int]
    storages: tuple[tuple[int, int | None, int], ...]
    segments: tuple[tuple[int, int], ...]
