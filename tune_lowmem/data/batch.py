"""What a minibatch is made of, for the code that handles every task's alike (the trainer's
microbatching, the profiler's fake tensors, the memory counts): a tuple of tensors, or a
dataclass whose fields are tensors, other values, or the data set's host copy (`HOST_DATA`),
which a minibatch refers to but does not hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

# A dataclass minibatch's field holding the data set's host copy (`field(metadata=HOST_DATA)`):
# the minibatch gathers its rows one microbatch at a time, so no minibatch-sized copy is made.
# Memory counts leave it out (it exists before the trial and outlives every step); microbatches
# share it; fake tensors replace it with the rest.
HOST_DATA = {"host_data": True}


def batch_tensors(batch: Any) -> list[torch.Tensor]:
    """The tensors a minibatch holds (the host data it refers to left out)."""
    return [part for part in _parts(batch, host=False) if torch.is_tensor(part)]


def host_data_tensors(batch: Any) -> list[torch.Tensor]:
    """The tensors of the host data a minibatch refers to (`HOST_DATA` fields)."""
    return [t for value in _parts(batch, host=True) for t in _tensors_in(value)]


def map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], batch: Any, *, host_data=False) -> Any:
    """The minibatch with `fn` applied to each tensor it holds (e.g. a row slice); with
    `host_data`, to those of the host data it refers to as well (e.g. to make them fake)."""
    if not dataclasses.is_dataclass(batch):
        return tuple(fn(part) if torch.is_tensor(part) else part for part in batch)
    changes = {}
    for field in dataclasses.fields(batch):
        value = getattr(batch, field.name)
        if _is_host(field):
            if host_data:
                changes[field.name] = _map_in(fn, value)
        elif torch.is_tensor(value):
            changes[field.name] = fn(value)
    return dataclasses.replace(batch, **changes)


def split_rows(batch: Any, size: int | None) -> list[Any]:
    """Cut each tensor a minibatch holds along dim 0 into aligned chunks of `size` rows (views);
    the host data it refers to is shared by every chunk. One chunk when `size` is None."""
    rows = batch_tensors(batch)[0].shape[0]
    if size is None or size >= rows:
        return [batch]
    return [
        map_tensors(lambda t, start=start: t[start : start + size], batch)
        for start in range(0, rows, size)
    ]


def _is_host(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get("host_data"))


def _parts(batch: Any, host: bool) -> list[Any]:
    """A minibatch's values that are host data (`host`) or its own; a tuple's are all its own."""
    if not dataclasses.is_dataclass(batch):
        return [] if host else list(batch)
    return [getattr(batch, f.name) for f in dataclasses.fields(batch) if _is_host(f) == host]


def _tensor_fields(value: Any) -> dict[str, torch.Tensor]:
    """A dataclass's tensor fields by name."""
    fields = dataclasses.fields(value)
    return {f.name: t for f in fields if torch.is_tensor(t := getattr(value, f.name))}


def _tensors_in(value: Any) -> list[torch.Tensor]:
    """A host data field's tensors: itself, or a dataclass's tensor fields."""
    return [value] if torch.is_tensor(value) else list(_tensor_fields(value).values())


def _map_in(fn: Callable[[torch.Tensor], torch.Tensor], value: Any) -> Any:
    if torch.is_tensor(value):
        return fn(value)
    return dataclasses.replace(value, **{n: fn(t) for n, t in _tensor_fields(value).items()})
