"""A training step's memory as torch's allocators report it: a measurement that shares no
counting code with the prediction (`predict`) or the project's dispatch-level tracker (`tracker`,
`measure`); only the step it counts is driven as `measure` drives it (`stepping`).

The trainer is built, takes a warm-up step (so the optimizer's state exists) and one measured
step, all inside one `torch.profiler.profile(profile_memory=True)`. With memory profiling on,
torch's CPU allocator and CUDA caching allocator report every allocation and free (address,
bytes) to the profiler; the profiler's exported trace (its public Chrome-trace format, events
named ``[memory]``) is read back and replayed in order. Profiling from before the trainer exists
means every storage the step can free was allocated under the profiler, so no free goes unseen.

From the replay, for the measured step alone (a `record_function` range marks it):
- `before_bytes`: bytes the allocator had live when the step began (weights, optimizer state,
  the input minibatch, whatever else the process kept);
- `peak_bytes`: the most bytes live at once during the step, `before_bytes` included;
- `activation_bytes`: the most bytes live at once beyond those alive at the start, beyond the
  allocations that the step leaves held (its gradients, new optimizer state) so far as they
  exist at that moment, and beyond operators' internal temporaries: the paper's activation part
  (stored activations, gradients w.r.t. activations, recomputed segments);
- `workspace_activation_bytes`: the same with operators' internal temporaries, i.e. what the
  allocator really had to find. An internal temporary is an allocation made and freed inside one
  outermost kernel of the trace (an `aten::` operator that does not merely run others, e.g.
  `convolution_backward`'s contiguous copy of the incoming gradient); the paper's accounting
  leaves this workspace out.
Model and optimizer parts are the storage bytes of the real trainer's tensors after the step
(parameters, buffers and what the techniques keep; gradients and optimizer state), as stored:
a packed sparse weight is its values, its indices are buffers. On CUDA the caching allocator's
own `max_memory_allocated` and `memory_stats` peak over the step are reported beside the replay.

After the step, the trainer evaluates one batch as `Trainer.run` does (gradients dropped, eval
mode, no_grad, `Task.evaluation_pass` on a synthetic batch of evaluation's shape), in a range of
its own: `evaluation_peak_bytes` is the most bytes live during it, and `run_peak_bytes` the
larger of the step's and the evaluation's peaks, everything live included (the weights, the
state, the inputs, kernels' workspace): the run's peak to hold the prediction's against. The
data set's host copy is not in it: a minibatch that refers to one (`data.batch.HOST_DATA`; a
synthetic one stands for it) has that copy's allocations left out of every figure.

What it leaves out: the CPU heap's C++ objects (tensors', storages', the autograd graph's),
which come from `malloc` directly rather than torch's allocator; the CUDA context and the
allocator's reserved-but-free blocks.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import gc
import math
from collections.abc import Iterable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from ..config import TrialConfig
from ..data.batch import batch_tensors, host_data_tensors
from ..torch_private import decomposes
from ..train import resolve_device
from . import stepping
from .report import MB
from .workspace import exported_trace, memory_reports

STEP = "tune_lowmem.measured_step"
EVALUATION = "tune_lowmem.measured_evaluation"
DEVICE_TYPES = {"cpu": 0, "cuda": 1}  # the trace's "Device Type" (c10::DeviceType)


@dataclasses.dataclass(frozen=True)
class Allocations:
    """One step's memory as the allocator reported it, in bytes (see the module docstring)."""

    device: str
    model_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    workspace_activation_bytes: int
    before_bytes: int
    peak_bytes: int
    batch_bytes: int
    events: int  # allocator reports replayed within the step
    cuda_max_allocated_bytes: int | None = None
    cuda_stats_peak_bytes: int | None = None
    evaluation_peak_bytes: int | None = None  # None: the task has no evaluation pass
    # the step's and the evaluation's peaks without kernels' internal temporaries
    tensor_peak_bytes: int = 0
    evaluation_tensor_peak_bytes: int | None = None

    @property
    def total_bytes(self) -> int:
        """The paper's sum of parts, as stored: comparable with a prediction's stored total."""
        return self.model_bytes + self.optimizer_bytes + self.activation_bytes

    @property
    def run_peak_bytes(self) -> int:
        """The most bytes live at once in the step or the evaluation after it."""
        return max(self.peak_bytes, self.evaluation_peak_bytes or 0)

    @property
    def run_tensor_peak_bytes(self) -> int:
        """`run_peak_bytes` without kernels' internal temporaries (workspace)."""
        return max(self.tensor_peak_bytes, self.evaluation_tensor_peak_bytes or 0)

    def to_dict(self) -> dict[str, float | int | str | None]:
        """Every figure in MB (10^6 bytes), named `allocator_<figure>_mb`."""
        values: dict[str, float | int | str | None] = {"device": self.device, "events": self.events}
        for field in dataclasses.fields(self):
            nbytes = getattr(self, field.name)
            if field.name.endswith("_bytes"):
                name = f"allocator_{field.name.removesuffix('_bytes')}_mb"
                values[name] = None if nbytes is None else nbytes / MB
        values["allocator_total_mb"] = self.total_bytes / MB
        values["allocator_run_peak_mb"] = self.run_peak_bytes / MB
        values["allocator_run_tensor_peak_mb"] = self.run_tensor_peak_bytes / MB
        return values


def measure_allocations(
    config: TrialConfig, lengths: tuple[int, int] | None = None, update: int | None = None
) -> Allocations:
    """Build `config`'s trainer on its device, warm it up and take one step, all under the
    profiler's memory reports; the step's figures from the replayed reports. `update`: the
    0-based update the measured step is in the run's schedule (e.g. one after which a sparse run
    rewires; the schedule's position decides nothing else a step allocates), rather than the one
    after the warm-up; that step must then update the weights."""
    device = resolve_device(config.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    gc.collect()
    with memory_reports(activities) as profiler:
        trainer, batches = stepping.synthetic_trainer(config, lengths)
        stepping.warm_up(trainer, batches)
        batch = stepping.ready(trainer, batches, update)
        cuda = _cuda_peak_reset(device)
        with _measured(STEP):
            stepping.take(trainer, batch, update)
        cuda = _cuda_peak(device) if cuda else (None, None)
        model = _storages([*trainer.model.parameters(), *trainer.model.buffers()])
        model |= _storages(t for technique in trainer.techniques for t in technique.held_tensors())
        optimizer = _storages(
            [p.grad for p in trainer.model.parameters() if p.grad is not None]
            + [
                t
                for s in trainer.optimizer.state.values()
                for t in s.values()
                if torch.is_tensor(t)
            ]
        )
        batch_storages = _storages(batch_tensors(batch))
        host_data = set(_storages(host_data_tensors(batch)))
        del batch
        evaluates = evaluate_once(trainer)
    events, operators, ranges = _trace(profiler, DEVICE_TYPES[device.type])
    (start, end), evaluation = ranges[STEP], ranges.get(EVALUATION)
    held = set(model) | set(optimizer)
    data = _allocated_before(events, start, host_data)
    temporaries = _temporaries(events, operators)
    with_workspace = _replay(events, start, end, held, data)
    replay = _replay(events, start, end, held, temporaries | data)
    if evaluates:
        evaluated = (
            _replay(events, *evaluation, set())["peak"],
            _replay(events, *evaluation, set(), temporaries)["peak"],
        )
    else:
        evaluated = (None, None)
    return Allocations(
        device=device.type,
        model_bytes=sum(model.values()),
        optimizer_bytes=sum(nbytes for ptr, nbytes in optimizer.items() if ptr not in model),
        activation_bytes=replay["activation"],
        workspace_activation_bytes=with_workspace["activation"],
        before_bytes=replay["before"],
        peak_bytes=with_workspace["peak"],
        batch_bytes=sum(batch_storages.values()),
        events=replay["events"],
        cuda_max_allocated_bytes=cuda[0],
        cuda_stats_peak_bytes=cuda[1],
        evaluation_peak_bytes=evaluated[0],
        tensor_peak_bytes=replay["peak"],
        evaluation_tensor_peak_bytes=evaluated[1],
    )


def measured_run_peak(config: TrialConfig, lengths: tuple[int, int] | None = None) -> int:
    """The run's peak as torch's allocator sees it: the largest `Allocations.run_peak_bytes` at
    the steps that may be the run's peak (`stepping.peak_steps`), each with an evaluation."""
    updates = stepping.peak_steps(config)
    return max(measure_allocations(config, lengths, u).run_peak_bytes for u in updates)


def evaluate_once(trainer) -> bool:
    """One evaluation batch as `Trainer.run` evaluates (gradients dropped, eval mode, no_grad),
    in the `EVALUATION` range of the trace; False when the task has no evaluation pass."""
    task, model = trainer.task, trainer.model
    batch = task.synthetic_evaluation_batch(torch.Generator().manual_seed(0))
    trainer.optimizer.zero_grad(set_to_none=True)
    model.eval()
    try:
        with _measured(EVALUATION), torch.no_grad(), trainer.step_runner.forward_context():
            result = task.evaluation_pass(model, batch)
            evaluates, result = result is not None, None
    finally:
        model.train()
    return evaluates


@contextlib.contextmanager
def _measured(name: str):
    """A measured range of the trace, with Python's cyclic garbage collected before it and not
    during it (a collection inside would free what earlier work left, and the range would read
    as using less)."""
    gc.collect()
    gc.disable()
    try:
        with record_function(name):
            yield
    finally:
        gc.enable()


def _cuda_peak_reset(device: torch.device) -> bool:
    if device.type != "cuda":
        return False
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return True


def _cuda_peak(device: torch.device) -> tuple[int, int]:
    torch.cuda.synchronize(device)
    stats = torch.cuda.memory_stats(device)
    return torch.cuda.max_memory_allocated(device), stats["allocated_bytes.all.peak"]


def _storages(tensors: Iterable[torch.Tensor]) -> dict[int, int]:
    """Each distinct storage's address and bytes, as the allocator knows it."""
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}


Event = tuple[float, int, int, int, int]  # time, index, thread, address, bytes (< 0: a free)


def _trace(
    profiler: profile, device_type: int
) -> tuple[list[Event], dict[int, list[tuple[float, float]]], dict[str, tuple[float, float]]]:
    """From the profiler's exported trace: the allocator's reports on `device_type` in order,
    each thread's outermost kernels (`_kernels`), and the measured ranges' times by name."""
    trace = exported_trace(profiler)
    ranges = {
        e["name"]: (e["ts"], e["ts"] + e["dur"])
        for e in trace
        if e.get("name") in (STEP, EVALUATION) and e.get("ph") == "X"
    }
    events = [
        (e["ts"], e["args"].get("Ev Idx", 0), e["tid"], e["args"]["Addr"], e["args"]["Bytes"])
        for e in trace
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == device_type
    ]
    calls = [e for e in trace if e.get("ph") == "X" and e.get("name", "").startswith("aten::")]
    return sorted(events), _kernels(calls), ranges


def _kernels(calls: list[dict]) -> dict[int, list[tuple[float, float]]]:
    """Each thread's outermost calls of operators that run as a kernel of their own, as
    (start, end): nested in no other such call, and not an operator that only runs others
    (`torch_private.decomposes`; its parts are the kernels: `isfinite` runs `abs`, `eq`, ...)."""
    kernels: dict[int, list[tuple[float, float]]] = {}
    for call in sorted(calls, key=lambda e: (e["ts"], -e["dur"])):
        spans = kernels.setdefault(call["tid"], [])
        if (not spans or call["ts"] >= spans[-1][1]) and not decomposes(call["name"]):
            spans.append((call["ts"], call["ts"] + call["dur"]))
    return kernels


def _allocated_before(events: list[Event], start: float, addresses: set[int]) -> set[int]:
    """Indices of the allocations of the storages at `addresses` live when the step starts (the
    latest made at each address before it): the data set's host copy, which no figure counts."""
    made = {
        e[3]: i for i, e in enumerate(events) if e[0] < start and e[4] > 0 and e[3] in addresses
    }
    return set(made.values())


def _temporaries(events: list[Event], operators: dict[int, list[tuple[float, float]]]) -> set[int]:
    """Indices (into `events`) of allocations freed within the outermost kernel that made them."""
    temporaries, open_at = set(), {}
    for i, (time, _, thread, address, nbytes) in enumerate(events):
        if nbytes > 0:
            open_at[address] = i
            continue
        made = open_at.pop(address, None)
        if made is None:
            continue
        spans = operators.get(events[made][2], [])
        k = bisect.bisect_right(spans, (events[made][0], math.inf)) - 1
        if k >= 0 and spans[k][0] <= events[made][0] and time <= spans[k][1]:
            temporaries.add(made)
    return temporaries


def _replay(
    events: list[Event], start: float, end: float, held: set[int], skip: set[int] = frozenset()
) -> dict[str, int]:
    """Live bytes report by report, leaving out the allocations at indices `skip` (and their
    frees): at the step's start (`before`), their most within the step (`peak`), and the most
    beyond the start's and the step's allocations still alive at `held` addresses when it ended
    (`activation`)."""
    live: dict[int, int] = {}
    first = next((i for i, e in enumerate(events) if e[0] >= start), len(events))
    for i, (_, _, _, address, nbytes) in enumerate(events[:first]):
        if i not in skip:
            _apply(live, address, nbytes)
    before = sum(live.values())
    inside = [(i, e) for i, e in enumerate(events[first:], first) if e[0] <= end and i not in skip]
    last_allocation = {e[3]: i for i, e in inside if e[4] > 0}
    kept = {i for address, i in last_allocation.items() if address in held}
    total, peak, activation, kept_alive = before, before, 0, 0
    kept_live: dict[int, int] = {}
    for i, (_, _, _, address, nbytes) in inside:
        total += nbytes if nbytes > 0 else -live.get(address, 0)
        if nbytes < 0:
            kept_alive -= kept_live.pop(address, 0)
        _apply(live, address, nbytes)
        if i in kept:
            kept_live[address] = nbytes
            kept_alive += nbytes
        peak = max(peak, total)
        activation = max(activation, total - before - kept_alive)
    return {"before": before, "peak": peak, "activation": activation, "events": len(inside)}


def _apply(live: dict[int, int], address: int, nbytes: int) -> None:
    if nbytes > 0:
        live[address] = nbytes
    else:
        live.pop(address, None)
