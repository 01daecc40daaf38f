"""Tensor storage lifetimes and FLOPs, recorded at the ATen dispatch level.

`StorageTracker` is a `TorchDispatchMode`: every tensor an operator returns is looked at, and a
storage seen for the first time starts a `Life`; a weak reference to the storage ends it when
the storage is freed. Time is the index of the operator call, so a storage is alive at event
``k`` when ``born <= k < died``. Memory a kernel uses internally (workspace) never appears as an
operator output and is therefore excluded, as the paper's accounting excludes it.

The same tracker serves both ways of knowing memory: under `FakeTensorMode` the storages are
shapes only (the prediction); with real tensors they are the bytes a real step allocates (the
CPU measurement). FLOPs use the formulas of `torch.utils.flop_counter.flop_registry`, the ones
`FlopCounterMode` sums; the mode itself is not used because its module tracker's hooks keep
tensors alive and would distort the memory recorded in the same pass.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry


@dataclass
class Life:
    """One storage: its size, the event it appeared at, the event from which it is gone."""

    nbytes: int
    born: int
    died: int | None = None  # None: still alive
    ref: weakref.ref | None = None

    def storage(self) -> torch.UntypedStorage | None:
        return self.ref() if self.ref is not None and self.died is None else None


class StorageTracker(TorchDispatchMode):
    """Records the life of every storage the dispatched operators produce while active, and the
    FLOPs of those operators. Storages of `existing` tensors (what was allocated before, such as
    the parameters and the input batch) are not allocations of the tracked code and get no life.
    `probe`, if given, is called after every operator (e.g. `torch.cuda.memory_allocated`) and
    its values are kept in `samples`, one per event."""

    def __init__(
        self, existing: Iterable[torch.Tensor] = (), probe: Callable[[], int] | None = None
    ) -> None:
        super().__init__()
        self._existing = {id(s): weakref.ref(s) for s in (t.untyped_storage() for t in existing)}
        self.clock = 0
        self.flops = 0
        self.lives: list[Life] = []
        self.probe = probe
        self.samples: list[int] = [probe()] if probe else []
        self._alive: dict[int, Life] = {}  # id(storage) -> its life, while the storage exists

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.clock += 1
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._see(leaf)
        if self.probe:
            self.samples.append(self.probe())
        return out

    def _see(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = id(storage)
        life = self._alive.get(key)
        if life is not None:  # a view, or an in-place result
            life.nbytes = max(life.nbytes, storage.nbytes())
            return
        existing = self._existing.get(key)
        if existing is not None and existing() is storage:
            return
        life = Life(storage.nbytes(), self.clock)
        life.ref = weakref.ref(storage, lambda _ref, key=key, life=life: self._end(key, life))
        self._alive[key] = life
        self.lives.append(life)

    def _end(self, key: int, life: Life) -> None:
        life.died = self.clock + 1  # alive at the event in progress, gone from the next one
        if self._alive.get(key) is life:
            del self._alive[key]

    def curve(self, tensors: Iterable[torch.Tensor], *, of: bool) -> list[int]:
        """Bytes alive at each event in the storages of `tensors` (tensors alive now, e.g.
        parameters and gradients) when `of`, or in all the other recorded storages when not."""
        chosen = {id(t.untyped_storage()) for t in tensors}
        delta = [0] * (self.clock + 2)
        for life in self.lives:
            storage = life.storage()
            if (storage is not None and id(storage) in chosen) != of:
                continue
            delta[life.born] += life.nbytes
            delta[self.clock + 1 if life.died is None else life.died] -= life.nbytes
        return list(accumulate(delta))[: self.clock + 1]

    def peak(self, exclude: Iterable[torch.Tensor] = ()) -> int:
        """The most bytes alive at once in the recorded storages, leaving out those of `exclude`."""
        return max(self.curve(exclude, of=False))
