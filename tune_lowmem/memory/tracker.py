"""Tensor storage lifetimes and FLOPs, recorded at the ATen dispatch level.

`StorageTracker` is a `TorchDispatchMode`: every tensor an operator returns is looked at, and a
storage seen for the first time starts a `Life`; a weak reference to the storage ends it when
the storage is freed. Time is the index of the operator call, so a storage is alive at event
``k`` when ``born <= k < died``. Memory a kernel uses internally (workspace) never appears as an
operator output, so the storages leave it out, as the paper's accounting does; the tracker notes
the calls that have some on the CPU (`workspace.signature`: convolutions, batch norm's backward,
half-precision products, pointwise operators of mixed dtypes), and `peak(workspace=True)` adds
each one's (`workspace.workspace_bytes`) at its event.

The same tracker serves both ways of knowing memory: under `FakeTensorMode` the storages are
shapes only (the prediction); with real tensors they are the bytes a real step allocates (the
CPU measurement). FLOPs use the formulas of `torch.utils.flop_counter.flop_registry`, the ones
`FlopCounterMode` sums; the mode itself is not used because its module tracker's hooks keep
tensors alive and would distort the memory recorded in the same pass.

Any Python dispatch mode changes one thing torch does: where two gradients meet at a tensor used
twice (a residual connection's input), autograd's engine sums them into the buffered one in
place when it holds that buffer's last reference (`InputBuffer`'s accumulate), but out of place
while a mode is active, so the step under the tracker briefly holds a third buffer. The tracker
records what torch does without it: such a sum (an `add` that the engine itself calls, with grad
mode off, of two tensors of one shape and dtype, the first dense and freed before the next
operator, i.e. the engine held its last reference) takes over the first summand's storage, which
is gone from the sum's event on; a probe's sample at that event has the summand's bytes taken
off.

A probe that reads the process heap (the CPU measurement: glibc's bytes in use) also sees the
tracker's own records: the buffers of its lists and dict grow by about 8 bytes an operator and
live on glibc's heap (the objects in them are Python's small-object arenas, which glibc does not
count). Left in, they read as step memory growing with the number of operators: about 0.25 MB
over the 22,000 operators of a 4-microbatch WRN-10-1 step with fused units, over 1 MB in a
WRN-28-2 step of 20 one-image microbatches. Each sample therefore has those buffers' bytes
(`sys.getsizeof`, within a few kB of glibc's chunks) taken off.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from ..torch_private import engine_called
from .calls import CallCounts
from .workspace import signature, workspace_bytes


def _exact(nbytes: int) -> int:
    """A storage's bytes as they are (no allocator's rounding)."""
    return nbytes


def _signed(block: Callable[[int], int], nbytes: int) -> int:
    """`block` of a life's bytes, negative for an existing storage's end (`StorageTracker.freed`)."""
    return block(nbytes) if nbytes >= 0 else -block(-nbytes)


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
    the parameters and the input batch) are not allocations of the tracked code and get no life;
    one freed while tracking (a weight replaced by its fp32 copy) counts negative from then on.
    `probe`, if given, is called after every operator (e.g. `torch.cuda.memory_allocated`) and
    its values are kept in `samples`, one per event; with `probe_reads_heap` (a probe of the
    process heap, where the tracker's own records live; not a GPU allocator's) less the bytes of
    those records (see the module docstring). `calls`, if given, counts every operator call
    (`calls.CallCounts`: what the time prediction prices)."""

    def __init__(
        self,
        existing: Iterable[torch.Tensor] = (),
        probe: Callable[[], int] | None = None,
        probe_reads_heap: bool = False,
        notes: Callable[[Any, tuple, dict], tuple | None] = signature,
        device_type: str | None = None,
        calls: CallCounts | None = None,
    ) -> None:
        super().__init__()
        self.notes = notes  # which calls have workspace, and what decides it (their signature)
        self.device_type = device_type  # storages on other devices (the host's) are not seen
        self.clock = 0
        self.flops = 0
        self.lives: list[Life] = []
        self.freed: list[Life] = []  # existing storages freed: negative bytes from their end
        self._existing = {id(s): self._watch(s) for s in (t.untyped_storage() for t in existing)}
        self.probe = probe
        self.probe_reads_heap = probe_reads_heap
        self._alive: dict[int, Life] = {}  # id(storage) -> its life, while the storage exists
        self.samples: list[int] = []
        self._summand: Life | None = None  # the first summand of the last operator, if a sum
        self.taken_over: list[tuple[Life, Life]] = []  # (summand, its sum) torch sums in place
        self.calls: list[tuple[int, tuple]] = []  # (event, signature) of calls with workspace
        self.counted = calls  # every call, counted for the time prediction
        if probe:
            self._sample()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._summand = None
        out = func(*args, **kwargs)
        self.clock += 1
        if (call := self.notes(func, args, kwargs)) is not None:
            self.calls.append((self.clock, call))
        if self.counted is not None:
            self.counted.add(func, args, kwargs, out)
        if _is_sum(func, args, kwargs, out):
            self._summand = self._alive.get(id(args[0].untyped_storage()))
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._see(leaf)
        if self.probe:
            self._sample()
        return out

    def _sample(self) -> None:
        in_use = self.probe()
        if self.probe_reads_heap:
            records = (self.samples, self.lives, self.freed, self._alive, self._existing)
            in_use -= sum(map(sys.getsizeof, records))
        self.samples.append(in_use)

    def _see(self, tensor: torch.Tensor) -> None:
        if self.device_type is not None and tensor.device.type != self.device_type:
            return
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

    def _watch(self, storage: torch.UntypedStorage) -> weakref.ref:
        """A weak reference to an existing storage that records its end in `freed` (it does not
        keep the tracker alive: a cached dry run's weights outlive it)."""
        nbytes, tracker = storage.nbytes(), weakref.ref(self)

        def freed(_ref: weakref.ref) -> None:
            if (alive := tracker()) is not None:
                alive.freed.append(Life(-nbytes, alive.clock + 1))

        return weakref.ref(storage, freed)

    def _end(self, key: int, life: Life) -> None:
        life.died = self.clock + 1  # alive at the event in progress, gone from the next one
        if life is self._summand:  # the engine's sum, which torch makes in this storage
            life.died = self.clock
            self.taken_over.append((life, self.lives[-1]))  # the sum's, its last output
            if self.samples:
                self.samples[-1] -= life.nbytes
        if self._alive.get(key) is life:
            del self._alive[key]

    def curve(
        self, tensors: Iterable[torch.Tensor], *, of: bool, block: Callable[[int], int] = _exact
    ) -> list[int]:
        """Bytes alive at each event in the storages of `tensors` (tensors alive now, e.g.
        parameters and gradients) when `of`, or in all the other recorded storages, less the
        existing ones freed, when not; each storage's bytes as `block` makes them (an
        allocator's rounding of a request)."""
        chosen = {id(t.untyped_storage()) for t in tensors}

        def selected(life: Life) -> bool:
            storage = life.storage()
            return (storage is not None and id(storage) in chosen) == of

        lives = [life for life in self.lives if selected(life)] + ([] if of else self.freed)
        return self._sum(lives, lambda life: _signed(block, life.nbytes))

    def peak(
        self,
        exclude: Iterable[torch.Tensor] = (),
        heap_bytes: int = 0,
        workspace: bool = False,
        block: Callable[[int], int] = _exact,
    ) -> int:
        """The most bytes alive at once in the recorded storages, leaving out those of `exclude`,
        with `heap_bytes` more for each storage alive then, those of `exclude` too (what a
        storage costs beyond its bytes: its tensor's and the autograd graph's objects), with
        `workspace` each noted call's workspace at its event (`workspace.workspace_bytes`), each
        storage's bytes as `block` makes them."""
        stored = self.curve(exclude, of=False, block=block)
        if workspace and self.calls:
            sizes = workspace_bytes(call for _, call in self.calls)
            for event, call in self.calls:
                stored[event] += sizes[call]
        if not heap_bytes:
            return max(stored)
        count = self._sum(self.lives + self.freed, lambda life: 1 if life.nbytes >= 0 else -1)
        return max(b + heap_bytes * n for b, n in zip(stored, count, strict=True))

    def call_peaks(
        self, exclude: Iterable[torch.Tensor] = (), block: Callable[[int], int] = _exact
    ) -> tuple[int, dict[tuple, int]]:
        """The most bytes alive at once as `peak` counts them without workspace, and for each
        noted call (`notes`) the most alive at any of its events: a call's workspace, once
        known, adds to the bytes alive at its events, so the peak with it is the larger of the
        first and each call's figure plus its workspace."""
        stored = self.curve(exclude, of=False, block=block)
        at_calls: dict[tuple, int] = {}
        for event, call in self.calls:
            at_calls[call] = max(at_calls.get(call, 0), stored[event])
        return max(stored), at_calls

    def allocated(self) -> tuple[tuple[int, int | None, int], ...]:
        """Each storage the code allocated as torch allocates without a mode (the time
        prediction plays them on the host's allocator): (the event it appeared at, the event
        from which it is gone, None while it is alive, its bytes); a sum the engine makes in
        its first summand's storage is no allocation, the summand's storage living on as it."""
        successor = {id(summand): total for summand, total in self.taken_over}
        sums = {id(total) for _, total in self.taken_over}
        allocated = []
        for life in self.lives:
            if id(life) in sums:
                continue
            last = life
            while id(last) in successor:
                last = successor[id(last)]
            allocated.append((life.born, last.died, life.nbytes))
        return tuple(allocated)

    def _sum(self, lives: Iterable[Life], weight: Callable[[Life], int]) -> list[int]:
        """At each event, the sum of `weight` over `lives` alive then."""
        delta = [0] * (self.clock + 2)
        for life in lives:
            delta[life.born] += weight(life)
            delta[self.clock + 1 if life.died is None else life.died] -= weight(life)
        return list(accumulate(delta))[: self.clock + 1]


def _is_sum(func, args: tuple, kwargs: dict, out) -> bool:
    """Whether an operator is one torch's engine may run in place when no mode is active: a
    gradient sum (see the module docstring; whether it held the last reference shows later)."""
    if func is not torch.ops.aten.add.Tensor or kwargs.get("alpha", 1) != 1 or len(args) != 2:
        return False
    first, second = args
    return (
        isinstance(second, torch.Tensor)
        and not torch.is_grad_enabled()
        and first.shape == second.shape == out.shape
        and first.dtype == second.dtype == out.dtype
        and _dense(first)
        and engine_called(sys._getframe(2))  # the frame that dispatched it
    )


def _dense(tensor: torch.Tensor) -> bool:
    """Non-overlapping and dense: its elements fill its storage span exactly, in some order."""
    expected = 1
    for stride, size in sorted((t, s) for s, t in zip(tensor.shape, tensor.stride()) if s > 1):
        if stride != expected:
            return False
        expected *= size
    return True
