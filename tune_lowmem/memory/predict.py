"""Predicted training memory, from shapes alone.

The trial's own `Trainer` is built (the same model, techniques and casts a real trial gets), its
parameters and buffers are swapped for fake tensors (`FakeTensorMode`: shapes and dtypes, no
data), it takes a warm-up update on zero gradients (so the optimizer's state exists, as
`measure`'s warm-up step makes it), and then one training step runs on fake copies of a
synthetic minibatch under one `StorageTracker`, as `Trainer.train_step` runs it: forward and
backward passes of the microbatches of `passes` (the first, before any gradient exists; one of
each later shape, whose gradients accumulate into existing ones; the last, in whose backward a
fused step applies its update), then `update` (the finiteness check, the unscale, the optimizer's
step as the step runner takes it). The activation part is the most bytes the step's own tensors
hold at once beyond the parameters, buffers, optimizer state and the gradients the step leaves:
the autograd graph's saved tensors, the gradients w.r.t. activations, the recomputed segments of
a checkpointed model, the autocast copies of the weights in the amp modes, a later microbatch's
parameter gradient before it is added to the accumulated one, gradients that a fused step
applies and drops, the optimizer step's temporaries (torch's multi-tensor kernels where torch
would choose them for the real weights, e.g. on CUDA: a gradient-sized copy; the fp32 copies of
bf16 weights and gradients that stochastic and Kahan rounding step in; a packed sparse layer's
dense weight and weight gradient while it computes). The minibatch is the data pipeline's, on
the host, and is not in the step's part; what the task makes of each microbatch on the device
(its copy there, the normalised floats, a cast to half) is. The run's peak (`run_peak`) holds the
host minibatch too when the trial's device is the host. Model and optimizer
parts follow `accounting`, the state as the stepped optimizer holds it (Kahan's compensation
buffers and low-precision Adam state included).

A technique may also work between steps, after some updates (`Technique.occasional_work`: a
sparse model's rewiring), beside the weights, gradients and optimizer state; its temporaries (a
rewiring's: each layer's positions, the slots its weights move between, the values and state of
its new count while the old ones live, the step's gradients of the sparse layers until it drops
them) depend on values (which weights it prunes), so that work cannot run on fake tensors: a
real trainer of the same shape key, on the CPU (the bytes are any device's), its optimizer state
made by an update on zero gradients, makes zero gradients where the fake step leaves gradients
and runs the work once under a `StorageTracker` (`occasional_peak`): the weights, state and
gradients are the step's held part, and what the work frees of them counts negative from then
on. A trial that has such work (`occasional_work`) has the larger of the step's and the work's
activation part; the work runs only when such a trial asks (`DryRun.occasional`), once per dry
run.

On the CPU the measurement reads glibc's heap, which holds more than tensor storage: each
tensor's and storage's C++ objects and the autograd graph's nodes. The dry run counts them as
`HEAP_BYTES_PER_STORAGE` per storage alive (`DryRun.object_bytes`, added to a CPU config's
activation part; a CUDA config's allocator holds none of them).

Operators' internal buffers (workspace: a CPU convolution's reorders of its weights and
activations) are no tensor's; the tracker notes the calls that have some and `workspace` runs
each distinct one once on the CPU to learn its bytes, which the run's peak counts at that call
(`dry_run(..., workspace=False)`: tensors alone, from shapes only). A GPU's workspace is not
predicted here.

A dry run is cached per shape key (task, model, step runner, precision and its update
rounding, checkpointing, batch or token budget and microbatch, device type, and the synthetic sentence
lengths), so a search that varies learning rates or sparsity pays for it once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..config import TrialConfig
from ..data.batch import batch_tensors, host_data_tensors, map_tensors
from ..finite import finite_flag
from ..plugins import techniques
from ..torch_private import FakeTensorMode, default_foreach
from ..train import Trainer
from . import accounting
from .calls import CallCounts, Recording
from .cuda import CudaRun, CudaTarget, Moment, allocated_size, cuda_prediction, trial_target
from .cuda_libraries import cuda_call
from .report import MemoryReport
from .synthetic import synthetic_task
from .tracker import StorageTracker
from .workspace import computing_threads, signature

# The CPU heap's bytes per storage beyond its data, for the autograd graph's and the tensors'
# objects (TensorImpl, StorageImpl, malloc's header and alignment, the graph's nodes and saved
# variables). Computed by `benchmarks/profiler_accuracy.py` from its calibration points, which
# are never its evaluation points, and read from the file it writes.
HEAP_BYTES_PER_STORAGE: int = json.loads(Path(__file__).with_name("calibration.json").read_text())[
    "heap_bytes_per_storage"
]


@dataclasses.dataclass(frozen=True)
class DryRun:
    """What the fake step leaves: the fake model (with its fake gradients, unless a fused step
    consumed them), its stepped optimizer with the techniques attached, the step's activation
    peak (tensor storage), and the FLOPs of a whole step; the techniques' occasional work."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    activation_bytes: int
    object_bytes: int  # what the CPU heap holds beyond them at its peak (HEAP_BYTES_PER_STORAGE)
    flops_per_step: int
    measure_occasional: Callable[[], tuple[int, int]]  # run only when a trial that has it asks
    input_bytes: int  # the step's minibatch where it is held on the device (a CPU trial's)
    held_bytes: int  # the weights, buffers and optimizer state, as held (layout-independent)
    # the step's own peak with its gradients counted as they are made (a step starts without
    # them) and, in a dry run with workspace, operators' workspace: the most bytes beyond
    # `held_bytes` and the minibatch, and the heap objects then
    step_peak: tuple[int, int]
    # an evaluation batch's input on the device, its pass's peak beyond the weights and state
    # (storage, workspace as in `step_peak`; heap objects); None: the task has no evaluation pass
    evaluation: tuple[int, int, int] | None
    # what the time prediction prices: an update's calls (every microbatch's passes, then the
    # update), the storages they allocate and the passes; one evaluation pass's (None: no pass)
    recording: Recording
    evaluation_recording: Recording | None
    # a CUDA trial's: the moments in the caching allocator's blocks and the calls that take a
    # library's workspace (`cuda.CudaRun`, without the occasional work: `cuda_run`); None on the CPU
    cuda: CudaRun | None = None

    @functools.cached_property
    def _occasional_measured(self) -> tuple[int, int, int]:
        """`occasional_peak`'s figures, measured once, when first asked: a trial that has none
        never pays for it."""
        return self.measure_occasional()

    @property
    def occasional(self) -> tuple[int, int]:
        """The occasional work's temporaries and heap objects at their peak (`occasional_peak`)."""
        return self._occasional_measured[:2]

    def cuda_run(self, occasional: bool) -> CudaRun:
        """The CUDA trial's moments (`cuda`), with its occasional work where it has some
        (`occasional`): that work's temporaries beside the step's gradients, in blocks and exact."""
        if not occasional:
            return self.cuda
        gradients = [p.grad for p in self.model.parameters() if p.grad is not None]
        exact, _, blocks = self._occasional_measured
        work = (
            Moment(_storage_bytes(gradients, allocated_size) + blocks, {}),
            Moment(_storage_bytes(gradients) + exact, {}),
        )
        return dataclasses.replace(self.cuda, moments={**self.cuda.moments, "occasional": work})

    def activation(self, occasional: bool) -> tuple[int, int]:
        """The activation part's tensor storage and heap objects: the step's, or when the trial
        has occasional work (`occasional`), that work's if its peak is higher."""
        step = (self.activation_bytes, self.object_bytes)
        return max(step, self.occasional, key=sum) if occasional else step


def predict(
    config: TrialConfig,
    lengths: tuple[int, int] | None = None,
    workspace: bool = True,
    threads: int | None = None,
    target: CudaTarget | None = None,
) -> MemoryReport:
    """The config's training memory and FLOPs per step, without allocating any activation:
    every tensor as the step holds it. `lengths`: the translation task's synthetic (source,
    target) sentence lengths; `workspace`: the run's peak counts operators' workspace on the CPU
    (`workspace`; this machine's kernels) or, when False, tensors alone (from shapes only);
    `threads`: the CPU threads the trial will compute with, which choose its kernels and so
    their workspace (default: this process's; a sweep's driver passes `resources.cpu`);
    `target`: the CUDA device the trial runs on (default: `cuda.trial_target`'s, from the
    config and this machine), whose run peak is its caching allocator's (`cuda`)."""
    lengths = None if lengths is None else tuple(lengths)
    target = trial_target(config) if target is None else target
    with computing_threads(threads):
        run = dry_run(shape_key(config, lengths, cuda=target is not None), lengths, workspace)
    return parts(run, occasional=occasional_work(config), target=target)


def parts(
    run: DryRun,
    layout: str | None = None,
    occasional: bool = False,
    target: CudaTarget | None = None,
) -> MemoryReport:
    """A dry run's memory by part, compressed weights as held or counted in `layout`
    (`accounting.model_bytes`); `occasional`: the trial has occasional work
    (`DryRun.activation`). On the CPU the activation part has the heap's objects with it, as the
    CPU measurement sees them. The run's peak (`run_peak`; a CUDA trial's on `target`,
    `cuda.cuda_prediction`, with its parts) holds the weights as they are held, whatever
    `layout` counts."""
    cuda = None if run.cuda is None else cuda_prediction(run.cuda_run(occasional), target)
    return MemoryReport(
        model_bytes=accounting.model_bytes(run.model, layout),
        optimizer_bytes=accounting.held_gradient_bytes(run.model)
        + accounting.state_bytes(run.model, run.optimizer),
        activation_bytes=sum(run.activation(occasional)),
        flops_per_step=run.flops_per_step,
        source="predicted",
        run_peak_bytes=sum(run_peak(run, occasional)) if cuda is None else cuda.run_peak_bytes,
        cuda=cuda,
    )


def run_peak(run: DryRun, occasional: bool) -> tuple[int, int]:
    """The most bytes the run holds at once, as (tensor storage, the CPU heap's objects then):
    the largest of `run_peaks` counting both."""
    return max(run_peaks(run, occasional), key=sum)


def run_peaks(run: DryRun, occasional: bool) -> list[tuple[int, int]]:
    """Each moment that may be the run's peak, as (tensor storage, the CPU heap's objects then):
    its peak step (weights, buffers, optimizer state and the minibatch it trains on, with the
    step's own tensors, gradients counted as they are made), its occasional work (with the
    step's gradients) and an evaluation (the weights, buffers and optimizer state, the evaluation
    batch and its pass's peak; `Trainer.run` drops the gradients first). A checkpoint adds
    nothing (`Trainer.save` moves one storage at a time to the host)."""
    held = run.held_bytes
    step, step_objects = run.step_peak
    peaks = [(held + run.input_bytes + step, step_objects)]
    if occasional:  # beside the step's gradients, which a rewiring drops as it goes
        work, work_objects = run.occasional
        peaks.append((held + accounting.held_gradient_bytes(run.model) + work, work_objects))
    if run.evaluation is not None:
        batch, storage, eval_objects = run.evaluation
        peaks.append((held + batch + storage, eval_objects))
    return peaks


def run_peak_storage(
    config: TrialConfig, lengths: tuple[int, int] | None = None, workspace: bool = True
) -> int:
    """The most tensor storage (with operators' workspace when `workspace`) the run holds at
    once, the CPU heap's objects left out: what torch's allocator, which never serves those
    objects, can be held to. Its moment may differ from `run_peak`'s, whose heap objects can
    make a smaller storage the larger total (a step's autograd graph against an evaluation's)."""
    lengths = None if lengths is None else tuple(lengths)
    run = dry_run(shape_key(config, lengths), lengths, workspace)
    return max(storage for storage, _ in run_peaks(run, occasional_work(config)))


def occasional_work(config: TrialConfig) -> bool:
    """Whether a trial of `config` works between steps (`Technique.occasional_work`), so that its
    peak may be that work's."""
    return any(technique.occasional_work(config) for technique in techniques(config))


def heap_object_bytes(config: TrialConfig, lengths: tuple[int, int] | None = None) -> int:
    """What `predict`'s activation part counts beyond tensor storage: on the CPU, the heap's
    tensor and autograd objects at the peak (`HEAP_BYTES_PER_STORAGE`); elsewhere none."""
    lengths = None if lengths is None else tuple(lengths)
    return dry_run(shape_key(config, lengths), lengths).activation(occasional_work(config))[1]


def shape_key(
    config: TrialConfig, lengths: tuple[int, int] | None = None, cuda: bool | None = None
) -> TrialConfig:
    """The config reduced to what decides the activations and FLOPs: the task's model, its
    schedule's shape fields (`Task.SHAPE_FIELDS`), the technique that runs the step and each
    technique's `shape_settings`; default data, seed 0, the rest at defaults; the device is the
    type a trial runs on (`cuda`: whether it is CUDA; None: as `cuda.trial_target` says from the
    config and this machine)."""
    synthetic_task(config, torch.device("cpu"), lengths)  # refuses what the profiler cannot run
    schedule = config.schedule
    shapes = {name: getattr(schedule, name) for name in config.task_type().SHAPE_FIELDS}
    cuda = trial_target(config) is not None if cuda is None else cuda
    device = "cuda" if cuda else "cpu"
    reduced = TrialConfig(
        task=config.task,
        device=device,
        step_runner=config.step_runner,
        model=config.model,
        schedule=type(schedule)(**shapes),
    ).to_flat()
    for technique in techniques(config):
        reduced.update(technique.shape_settings(config))
    return TrialConfig.from_dict(reduced)


def dry_run(
    key: TrialConfig, lengths: tuple[int, int] | None = None, workspace: bool = True
) -> DryRun:
    """One minibatch of `key`'s trainer on fake tensors: the passes of `passes`, then the rest of
    `Trainer.train_step` (see the module docstring), under one tracker; the step's and the
    evaluation's peaks with operators' workspace when `workspace` (`StorageTracker.peak`).
    Cached: a call with the defaults left out is the same dry run as one that spells them; one
    with workspace at another thread count is another (the kernels, and their workspace, differ)."""
    threads = torch.get_num_threads() if workspace else None
    return _cached_dry_run(key, None if lengths is None else tuple(lengths), workspace, threads)


@functools.lru_cache(maxsize=512)
def _cached_dry_run(
    key: TrialConfig, lengths: tuple[int, int] | None, workspace: bool, threads: int | None
) -> DryRun:
    device = torch.device(key.device)  # the trial's; a CUDA one without a GPU here: the CPU's
    host = device if device.type == "cpu" or torch.cuda.is_available() else torch.device("cpu")
    built = key if host == device else TrialConfig.from_dict({**key.to_flat(), "device": "cpu"})
    cuda = device.type == "cuda"
    workspace &= not cuda  # a CUDA trial's workspaces are `cuda`'s, not the CPU's operators'
    with _global_rng_kept():
        trainer = Trainer(built, task=synthetic_task(built, host, lengths))
    task, model, runner = trainer.task, trainer.model.train(), trainer.step_runner
    batch = next(iter(task.train_batches(0)))  # real and small: splitting it reads its lengths
    microbatches, normaliser = task.microbatches(batch), task.normaliser(batch)
    shapes = [tuple(tuple(t.shape) for t in batch_tensors(m)) for m in microbatches]
    weights = pass_weights(shapes)
    run = sorted(weights)
    # decided on the real weights, as torch would decide on the trial's device
    foreach = default_foreach(list(model.parameters()), None if host == device else device.type)
    fake_mode = FakeTensorMode()
    _fake_state(model, fake_mode)
    flops = {}
    # a CUDA trial's calls that take a library's workspace; storages of the host not seen
    notes = cuda_call if cuda else signature
    seen = "cuda" if cuda and host.type == "cuda" else None
    with fake_mode:
        optimizer = task.build_optimizer(model)  # hooks the techniques hang on the fake weights
        for group in optimizer.param_groups:
            if group.get("foreach", False) is None:
                group["foreach"] = foreach
        for technique in trainer.techniques:
            technique.attach(optimizer)
            technique.begin_step(len(run))  # the last pass run is the step's last microbatch
        _warm_up(model, optimizer, runner)
        fakes = [
            map_tensors(fake_mode.from_tensor, microbatches[index], host_data=True) for index in run
        ]
        existing = [t for fake in fakes for t in (*batch_tensors(fake), *host_data_tensors(fake))]
        existing += [*model.parameters(), *model.buffers(), *accounting.state_tensors(optimizer)]
        calls, segments = CallCounts(), []
        tracker = StorageTracker(existing, notes=notes, device_type=seen, calls=calls)
        with tracker:
            for index, microbatch in zip(run, fakes, strict=True):
                calls.weight = weights[index]
                segments.append((tracker.clock + 1, weights[index]))
                before = tracker.flops
                with runner.forward_context():
                    loss, _ = task.loss(model, microbatch)
                runner.backward(loss / normaliser)
                del loss
                flops[shapes[index]] = tracker.flops - before
            calls.weight = 1
            segments.append((tracker.clock + 1, 1))
            update(model, optimizer, runner)
    recording = Recording(calls.counts, tracker.allocated(), tuple(segments))
    heap = HEAP_BYTES_PER_STORAGE if device.type == "cpu" else 0  # the trial's device's
    step = _peak(tracker, _held(model, optimizer), heap)
    with_grad = {name for name, param in model.named_parameters() if param.grad is not None}
    occasional = functools.partial(occasional_peak, key, lengths, with_grad, heap)
    evaluation_recorded: list[Recording] = []
    evaluation_moments: list[tuple[Moment, Moment]] | None = [] if cuda else None
    evaluation = evaluation_peak(
        task,
        model,
        optimizer,
        runner,
        fake_mode,
        heap,
        workspace,
        evaluation_recorded,
        (notes, seen, evaluation_moments),
    )
    # the host minibatch is on the trial's device only when that is the host (a task moves each
    # microbatch to the device in `loss`, where the tracker counts the copy as the step's); the
    # host data it refers to is not the step's
    input_bytes = _storage_bytes([t for t in batch_tensors(batch) if t.device == device])
    flops_per_step = sum(flops[s] for s in shapes)
    held = [*model.parameters(), *model.buffers(), *accounting.state_tensors(optimizer)]
    cuda_run = None
    if cuda:
        moments = {"step": _moments(tracker, []), **dict(zip(["evaluation"], evaluation_moments))}
        evaluation_calls = [c for m in evaluation_moments for c in m[0].at_calls]
        cuda_run = CudaRun(
            held=(_storage_bytes(held, allocated_size), _storage_bytes(held)),
            moments=moments,
            roles=frozenset(c[:2] for c in [*(c for _, c in tracker.calls), *evaluation_calls]),
        )
    return DryRun(
        model,
        optimizer,
        *step,
        flops_per_step,
        occasional,
        input_bytes=input_bytes,
        held_bytes=_storage_bytes(held),
        step_peak=_peak(tracker, [], heap, workspace),
        evaluation=evaluation,
        recording=recording,
        evaluation_recording=evaluation_recorded[0] if evaluation is not None else None,
        cuda=cuda_run,
    )


def _moments(tracker: StorageTracker, exclude: list[torch.Tensor]) -> tuple[Moment, Moment]:
    """A tracked pass's moment beyond `exclude` for a CUDA trial: in the allocator's blocks, and
    in exact bytes (`StorageTracker.call_peaks`)."""
    blocks = tracker.call_peaks(exclude, allocated_size)
    exact = tracker.call_peaks(exclude)
    return Moment(*blocks), Moment(*exact)


def _plus(moment: Moment, nbytes: int) -> Moment:
    """`moment` with `nbytes` more alive throughout (an input it runs beside)."""
    return Moment(moment.peak + nbytes, {c: alive + nbytes for c, alive in moment.at_calls.items()})


def evaluation_peak(
    task,
    model: nn.Module,
    optimizer,
    runner,
    fake_mode: FakeTensorMode,
    heap_bytes: int,
    workspace: bool,
    recorded: list[Recording] | None = None,
    cuda: tuple | None = None,
) -> tuple[int, int, int] | None:
    """One `Task.evaluation_pass` on a fake batch of evaluation's shape, in eval mode under
    no_grad as `Trainer.run` evaluates: the batch's bytes on the device, and the pass's peak
    beyond the weights, buffers and optimizer state (storage, with `workspace` operators'
    workspace; heap objects at `heap_bytes` a storage). The pass's `Recording` is added to
    `recorded`, when given. `cuda`: a CUDA trial's (notes, device type seen, moments), whose
    tracker notes its calls as the step's and whose moment, with the batch, is added to moments
    (in the allocator's blocks, and exact)."""
    notes, seen, moments = (signature, None, None) if cuda is None else cuda
    real = task.synthetic_evaluation_batch(torch.Generator().manual_seed(0))
    held = _held(model, optimizer)
    model.eval()
    try:
        with fake_mode:
            batch = map_tensors(fake_mode.from_tensor, real)
            existing = [*held, *batch_tensors(batch)]
            calls = CallCounts()
            tracker = StorageTracker(existing, notes=notes, device_type=seen, calls=calls)
            with tracker, torch.no_grad():
                with runner.forward_context():
                    result = task.evaluation_pass(model, batch)
                evaluates, result = result is not None, None
    finally:
        model.train()
    if not evaluates:
        return None
    if recorded is not None:
        recorded.append(Recording(calls.counts, tracker.allocated(), ((1, 1),)))
    on_device = [t for t in batch_tensors(real) if t.device == held[0].device]
    if moments is not None:
        blocks, exact = _moments(tracker, held)
        moments.append(
            (
                _plus(blocks, _storage_bytes(on_device, allocated_size)),
                _plus(exact, _storage_bytes(on_device)),
            )
        )
    return (_storage_bytes(on_device), *_peak(tracker, held, heap_bytes, workspace))


dry_run.cache_clear = _cached_dry_run.cache_clear  # e.g. after the heap constant changes


def _storage_bytes(tensors: list[torch.Tensor], block=None) -> int:
    """The bytes of the distinct storages under `tensors`, each as `block` makes them (an
    allocator's rounding; None: exact)."""
    storages = [t.untyped_storage() for t in tensors]  # alive together: ids are theirs alone
    sizes = {id(storage): storage.nbytes() for storage in storages}.values()
    return sum(sizes if block is None else map(block, sizes))


def occasional_peak(
    key: TrialConfig, lengths: tuple[int, int] | None, with_grad: set[str], heap_bytes: int
) -> tuple[int, int, int]:
    """The techniques' occasional work, real, on the CPU (see the module docstring): the most
    bytes of tensor storage it holds at once beyond the step's weights, buffers, optimizer state
    and gradients (zeros on the parameters named in `with_grad`), its heap objects then at
    `heap_bytes` a storage, and that storage in a CUDA allocator's blocks (`cuda.allocated_size`)."""
    cpu = TrialConfig.from_dict({**key.to_flat(), "device": "cpu"})
    with _global_rng_kept():
        trainer = Trainer(cpu, task=synthetic_task(cpu, torch.device("cpu"), lengths))
    model, optimizer = trainer.model.train(), trainer.optimizer
    _warm_up(model, optimizer, trainer.step_runner)
    for name, param in model.named_parameters():  # the step's gradients, held as the step holds
        param.grad = torch.zeros_like(param) if name in with_grad else None
    with StorageTracker(_held(model, optimizer)) as tracker:
        for technique in trainer.techniques:
            technique.run_occasional_work()
    held = _held(model, optimizer)
    return (*_peak(tracker, held, heap_bytes), tracker.peak(held, block=allocated_size))


def _held(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """What a step leaves held: weights, buffers, optimizer state, the gradients that exist."""
    held = [*model.parameters(), *model.buffers(), *accounting.state_tensors(optimizer)]
    return held + [p.grad for p in model.parameters() if p.grad is not None]


def _peak(
    tracker: StorageTracker, held: list[torch.Tensor], heap_bytes: int, workspace: bool = False
) -> tuple[int, int]:
    """The tracked peak beyond `held`: tensor storage (with `workspace`, operators' workspace
    too), and the heap objects at `heap_bytes` a storage alive then (none on a GPU, whose
    allocator holds none of them)."""
    storage = tracker.peak(exclude=held, workspace=workspace)
    if not heap_bytes:
        return storage, 0
    return storage, tracker.peak(held, heap_bytes, workspace) - storage


def passes(shapes: list[tuple]) -> list[int]:
    """The microbatches a dry run passes through (indices into `shapes`): the first, before any
    gradient exists; the first of each later shape, whose gradients accumulate into existing ones;
    and the last, in whose backward pass a fused step applies the update and drops gradients.
    The ones left out repeat a pass that is run, with the same tensors alive."""
    return sorted(pass_weights(shapes))


def pass_weights(shapes: list[tuple]) -> dict[int, int]:
    """Each pass of `passes` with how many of the update's microbatches it stands for: the first
    and the last themselves, the first of each later shape every other microbatch of its shape
    between them (whose calls the time prediction counts that many times)."""
    last = len(shapes) - 1
    later: dict[tuple, int] = {}
    for index in range(1, last):
        later.setdefault(shapes[index], index)
    weights = {0: 1, last: 1} if last else {0: 1}
    for index in range(1, last):
        stand_in = later[shapes[index]]
        weights[stand_in] = weights.get(stand_in, 0) + 1
    return weights


def update(model: nn.Module, optimizer: torch.optim.Optimizer, runner) -> None:
    """What `Trainer.train_step` does after the backward passes, for the tensors it allocates:
    the gradients' finiteness flag, the step runner's unscale (a loss scale's), and the optimizer's
    step as it takes it (the multi-tensor kernels' gradient-sized temporaries, the fp32 copies of
    bf16 weights and gradients that stochastic and Kahan rounding step in). A technique's work
    after some updates (`after_step`) is `occasional_peak`'s."""
    finite_flag([p.grad for p in model.parameters() if p.grad is not None])
    runner.unscale_(model.parameters(), True)
    runner.step(optimizer, model.parameters())


def _warm_up(model: nn.Module, optimizer: torch.optim.Optimizer, runner) -> None:
    """An update on zero gradients, as `measure` takes a warm-up step: the optimizer's state then
    exists before the tracked step, as at every step but the first (which creates it, and for
    bf16 weights stepped in fp32 creates it in fp32 first)."""
    for param in model.parameters():
        param.grad = torch.zeros_like(param) if param.requires_grad else None
    update(model, optimizer, runner)
    optimizer.zero_grad(set_to_none=True)


def _fake_state(model: nn.Module, fake_mode: FakeTensorMode) -> None:
    """Replace every parameter and buffer by a fake tensor of the same shape, dtype and device.
    (Converting the model under `FakeTensorMode` instead fails: `Module._apply` swaps fake
    parameters with `torch.utils.swap_tensors`, which refuses tensors with weak references.)"""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, nn.Parameter(fake_mode.from_tensor(param), param.requires_grad))
        for name, buffer in list(module.named_buffers(recurse=False)):
            setattr(module, name, fake_mode.from_tensor(buffer))


@contextlib.contextmanager
def _global_rng_kept():
    """Building a Trainer reseeds the global generators; a prediction leaves them as they were."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng():
        yield
    random.setstate(python_state)
    np.random.set_state(numpy_state)
