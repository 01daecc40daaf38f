"""The framework's time around each operator call, measured on the device by the probe itself.

A step runs more than its kernels: Python calls a module and its forward, the dispatcher finds
the kernel, autograd records a node for each differentiable call and its engine later runs the
node, the optimizer loops over parameters. The probe times each call as a direct call of its
operator (`probe`), which costs the dispatcher and a Python call; what the step adds beyond
that is measured here, per `memory.calls` context, on a chain of `CHAIN` one-operator modules
whose tensors are a few elements (their kernels cost next to nothing):

- `plain`: the chain's forward under no_grad (an evaluation; the optimizer's Python loops);
- `records`: its forward with grad, autograd recording a node for each call;
- `backward`: its forward and backward, the engine running the nodes (the forward's share
  known from `records`).

Each experiment's calls are recorded as a dry run records them (`memory.calls.CallCounts`) and
each is timed alone, back to back as the chain runs it; the experiment is timed as a whole
(`timers.steady`), and its context's overhead is what the whole takes beyond its calls' times
and the contexts measured before it, per call of its context. No constant is fitted: every figure is this device's, at the
trial's thread count, cached with the calls' (`cache`).
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from ..memory.calls import BACKWARD, PLAIN, RECORDS, CallCounts, real
from ..memory.tracker import StorageTracker
from ..memory.workspace import computing_threads
from . import cache
from .device import Device
from .timers import steady, timer_for

CHAIN = 32
ELEMENTS = 8


class Scale(nn.Module):
    """One operator a call: its input times a one-element weight."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


def overheads(device: Device) -> dict[str, float]:
    """Seconds the framework adds to each call of each context on `device` (see the module
    docstring), measured the first time they are asked for."""
    known = cache.section(device, "overhead")
    if not all(context in known for context in (PLAIN, RECORDS, BACKWARD)):
        with computing_threads(device.threads):
            cache.update(device, "overhead", measure(device))
    return dict(known)


def measure(device: Device) -> dict[str, float]:
    torch_device = torch.device(device.kind)
    chain = nn.Sequential(*(Scale() for _ in range(CHAIN))).to(torch_device)
    x = torch.ones(ELEMENTS, device=torch_device)

    def evaluation() -> None:
        with torch.no_grad():
            chain(x)

    def forward() -> None:
        chain(x)

    def step() -> None:
        chain.zero_grad(set_to_none=True)
        chain(x).sum().backward()

    found: dict[str, float] = {}
    timer = timer_for(torch_device)
    for context, experiment in ((PLAIN, evaluation), (RECORDS, forward), (BACKWARD, step)):
        counts = recorded(experiment)
        whole = steady(experiment, timer).host
        rest = whole - sum(
            n * (alone(call, timer) + found.get(where, 0.0))
            for (where, call, _), n in counts.items()
        )
        own = sum(n for (where, _, _), n in counts.items() if where == context)
        found[context] = rest / own
    return found


def alone(call: tuple, timer) -> float:
    """A call's host seconds run back to back, as the chain runs its calls (the probe's rounds,
    among other calls, are the step's measure, not the chain's)."""
    func, args, kwargs = call
    return steady(functools.partial(func, *real(args), **dict(real(kwargs))), timer).host


def recorded(experiment) -> dict[tuple, int]:
    """The calls of one run of `experiment`, counted as a dry run counts them."""
    experiment()  # what a first run makes once (the weights' gradients' first allocation)
    counts = CallCounts()
    with StorageTracker(calls=counts):
        experiment()
    return counts.counts
