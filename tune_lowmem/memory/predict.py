"""Predicted training memory, from shapes alone.

The trial's own `Trainer` is built (the same model, techniques and casts a real trial gets), its
parameters and buffers are swapped for fake tensors (`FakeTensorMode`: shapes and dtypes, no
data), and the minibatch's microbatches run forward and backward on fake copies of a synthetic
minibatch under a `StorageTracker`: the first one, before any gradient exists, and one of each
later shape, whose gradients accumulate into existing ones as in a real step (a token-budget
minibatch may end in a smaller microbatch). The activation part is the most bytes these passes'
own tensors hold at once: the autograd graph's saved tensors, the gradients w.r.t. activations,
the recomputed segments of a checkpointed model, the autocast copies of the weights in the amp
modes, a later microbatch's parameter gradient before it is added to the accumulated one, a
gradient that a fused step (`techniques.fused_step`) applies and drops in the backward pass;
gradients the pass leaves behind are left to the optimizer part. The input minibatch is the data
pipeline's and is not counted (a copy the model makes, such as the cast to half, is). Model and
optimizer parts follow `accounting`; the optimizer state is the paper's rule
(`accounting.state_copies`), or the buffers a fused step or low-precision Adam state
(`techniques.adam_state`) holds from the start, plus what a technique keeps beside it (`accounted_state_bytes`: Kahan's compensation buffers).

A dry run is cached per shape key (task, model, precision, checkpointing, batch or token budget
and microbatch, device type, and the synthetic sentence lengths), so a search that varies
learning rates or sparsity pays for it once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random

import numpy as np
import torch
from torch import nn

from ..config import TrialConfig
from ..tasks.base import batch_tensors, map_tensors
from ..techniques import TECHNIQUES
from ..torch_private import FakeTensorMode
from ..train import Trainer
from . import accounting
from .report import MemoryReport
from .synthetic import synthetic_task
from .tracker import StorageTracker


@dataclasses.dataclass(frozen=True)
class DryRun:
    """What the fake forward and backward passes leave: the fake model (with its fake gradients,
    unless a fused step consumed them), its optimizer with the techniques attached, the
    activation peak of the largest pass and the FLOPs of a whole step."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    activation_bytes: int
    flops_per_step: int


def predict(config: TrialConfig, lengths: tuple[int, int] | None = None) -> MemoryReport:
    """The config's training memory and FLOPs per step, without allocating any activation.
    `lengths`: the translation task's synthetic (source, target) sentence lengths."""
    lengths = None if lengths is None else tuple(lengths)
    key = shape_key(config, lengths)
    run = dry_run(key, lengths)
    return parts(config, run, planned_nonzeros(config, run.model, lengths), config.sparsity.storage)


def parts(
    config: TrialConfig,
    run: DryRun,
    nonzeros: dict[str, int],
    layout: str = "csr",
    extra_model_bytes: int = 0,
) -> MemoryReport:
    """A dry run's memory by part, with the weights in `nonzeros` counted sparse in `layout`
    (`predict`: the planned nonzeros, in the config's `sparsity.storage`) and what a technique keeps beside the optimizer's
    state (`accounted_state_bytes`) counted with it."""
    extra_state = sum(t.accounted_state_bytes(config, run.model, nonzeros) for t in TECHNIQUES)
    return MemoryReport(
        model_bytes=accounting.model_bytes(run.model, nonzeros, layout) + extra_model_bytes,
        optimizer_bytes=accounting.held_gradient_bytes(run.model, nonzeros)
        + accounting.stepped_state_bytes(run.model, run.optimizer, nonzeros)
        + extra_state,
        activation_bytes=run.activation_bytes,
        flops_per_step=run.flops_per_step,
        source="predicted",
    )


def planned_nonzeros(
    config: TrialConfig, model: nn.Module, lengths: tuple[int, int] | None = None
) -> dict[str, int]:
    """The nonzeros of each weight the techniques store sparsely (the paper's accounting)."""
    task = synthetic_task(config, torch.device("cpu"), lengths)
    nonzeros: dict[str, int] = {}
    for technique in TECHNIQUES:
        nonzeros.update(technique.accounted_nonzeros(config, task, model))
    return nonzeros


def shape_key(config: TrialConfig, lengths: tuple[int, int] | None = None) -> TrialConfig:
    """The config reduced to what decides the activations and FLOPs: the task's model, its
    schedule's shape fields (`Task.SHAPE_FIELDS`) and each technique's `shape_settings`; default
    data, seed 0, the rest at defaults; the device is the type a trial would run on."""
    synthetic_task(config, torch.device("cpu"), lengths)  # refuses what the profiler cannot run
    schedule = config.schedule
    shapes = {name: getattr(schedule, name) for name in config.task_type().SHAPE_FIELDS}
    device = "cuda" if config.device != "cpu" and torch.cuda.is_available() else "cpu"
    reduced = TrialConfig(
        task=config.task, device=device, model=config.model, schedule=type(schedule)(**shapes)
    ).to_flat()
    for technique in TECHNIQUES:
        reduced.update(technique.shape_settings(config))
    return TrialConfig.from_dict(reduced)


@functools.lru_cache(maxsize=512)
def dry_run(key: TrialConfig, lengths: tuple[int, int] | None = None) -> DryRun:
    """One minibatch of `key`'s trainer on fake tensors: the first microbatch's pass and one
    pass of each later microbatch shape (see the module docstring)."""
    device = torch.device(key.device)
    with _global_rng_kept():
        trainer = Trainer(key, task=synthetic_task(key, device, lengths))
    task, model, precision = trainer.task, trainer.model.train(), trainer.precision
    batch = next(iter(task.train_batches(0)))  # real and small: splitting it reads its lengths
    microbatches, normaliser = task.microbatches(batch), task.normaliser(batch)
    shapes = [tuple(tuple(t.shape) for t in batch_tensors(m)) for m in microbatches]
    later = {}  # each later shape's first microbatch
    for index in range(1, len(shapes)):
        later.setdefault(shapes[index], index)
    fake_mode = FakeTensorMode()
    _fake_state(model, fake_mode)
    peaks, flops = [], {}
    with fake_mode:
        optimizer = task.build_optimizer(model)  # hooks the techniques hang on the fake weights
        for technique in trainer.techniques:
            technique.attach(optimizer)
            technique.begin_step(len(microbatches))
        for index in (0, *later.values()):
            microbatch = map_tensors(fake_mode.from_tensor, microbatches[index])
            with StorageTracker(batch_tensors(microbatch)) as tracker:
                with precision.forward_context():
                    loss, _ = task.loss(model, microbatch)
                precision.backward(loss / normaliser)
                del loss
            held = [*model.parameters(), *model.buffers(), *accounting.state_tensors(optimizer)]
            held += [p.grad for p in model.parameters() if p.grad is not None]
            peaks.append(tracker.peak(exclude=held))
            flops[shapes[index]] = tracker.flops
    return DryRun(model, optimizer, max(peaks), sum(flops[shape] for shape in shapes))


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
