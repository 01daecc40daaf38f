"""Predicted training memory, from shapes alone.

The trial's own `Trainer` is built (the same model, techniques and casts a real trial gets), its
parameters and buffers are swapped for fake tensors (`FakeTensorMode`: shapes and dtypes, no
data), and one microbatch's forward and backward pass runs on fake data under a
`StorageTracker`. The activation part is the most bytes the pass's own tensors hold at once: the
autograd graph's saved tensors, the gradients w.r.t. activations, the recomputed segments of a
checkpointed model, the autocast copies of the weights in the amp modes; gradients of the
parameters are left to the optimizer part. The input minibatch is the data pipeline's and is not
counted (a copy the model makes, such as the cast to half, is). Model and optimizer parts follow
`accounting`; the optimizer state is the paper's rule (`accounting.state_copies`).

A dry run is cached per shape key (task, model, precision, checkpointing, batch and microbatch,
device type), so a search that varies learning rates or sparsity pays for it once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random

import numpy as np
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ..config import TrialConfig
from ..techniques.sparsity import sparse_parameter_names
from ..train import Trainer
from . import accounting
from .report import MemoryReport
from .synthetic import synthetic_task
from .tracker import StorageTracker

# The schedule fields that decide tensor shapes, per task.
SHAPE_FIELDS = {"wrn-cifar10": ("batch_size",)}


@dataclasses.dataclass(frozen=True)
class DryRun:
    """What one fake forward and backward pass leaves: the fake model (with its fake gradients),
    the activation peak of one pass and the FLOPs of a whole step."""

    model: nn.Module
    activation_bytes: int
    flops_per_step: int


def predict(config: TrialConfig) -> MemoryReport:
    """The config's training memory and FLOPs per step, without allocating any activation."""
    key = shape_key(config)
    run = dry_run(key)
    nonzeros = planned_nonzeros(run.model, config)
    gradients = accounting.gradient_bytes(run.model, nonzeros)
    optimizer = synthetic_task(config, torch.device(key.device)).build_optimizer(run.model)
    return MemoryReport(
        model_bytes=accounting.model_bytes(run.model, nonzeros),
        optimizer_bytes=gradients * (1 + accounting.state_copies(optimizer)),
        activation_bytes=run.activation_bytes,
        flops_per_step=run.flops_per_step,
        source="predicted",
    )


def shape_key(config: TrialConfig) -> TrialConfig:
    """The config reduced to what decides the activations and FLOPs: dense, default data, seed 0,
    and a schedule with only its shape fields; the device is the type a trial would run on."""
    synthetic_task(config, torch.device("cpu"))  # refuses a task the profiler cannot run
    schedule = config.schedule
    shapes = {name: getattr(schedule, name) for name in SHAPE_FIELDS[config.task]}
    device = "cuda" if config.device != "cpu" and torch.cuda.is_available() else "cpu"
    return TrialConfig(
        task=config.task,
        device=device,
        precision=config.precision,
        checkpoint=config.checkpoint,
        model=config.model,
        schedule=type(schedule)(**shapes),
        microbatch=config.microbatch,
    )


@functools.lru_cache(maxsize=512)
def dry_run(key: TrialConfig) -> DryRun:
    """One microbatch's forward and backward pass of `key`'s trainer on fake tensors."""
    with _global_rng_kept():
        trainer = Trainer(key, task=synthetic_task(key, torch.device(key.device)))
    task, model, precision = trainer.task, trainer.model.train(), trainer.precision
    fake_mode = FakeTensorMode()
    _fake_state(model, fake_mode)
    with fake_mode:
        batch = next(iter(task.train_batches(0)))
        microbatches = task.microbatches(batch)
        with StorageTracker() as tracker:
            with precision.forward_context():
                loss, _ = task.loss(model, microbatches[0])
            precision.backward(loss / task.normaliser(batch))
            del loss
        held = [*model.parameters(), *model.buffers()]
        held += [p.grad for p in model.parameters() if p.grad is not None]
        return DryRun(model, tracker.peak(exclude=held), tracker.flops * len(microbatches))


def _fake_state(model: nn.Module, fake_mode: FakeTensorMode) -> None:
    """Replace every parameter and buffer by a fake tensor of the same shape, dtype and device.
    (Converting the model under `FakeTensorMode` instead fails: `Module._apply` swaps fake
    parameters with `torch.utils.swap_tensors`, which refuses tensors with weak references.)"""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, nn.Parameter(fake_mode.from_tensor(param), param.requires_grad))
        for name, buffer in list(module.named_buffers(recurse=False)):
            setattr(module, name, fake_mode.from_tensor(buffer))


def planned_nonzeros(model: nn.Module, config: TrialConfig) -> dict[str, int]:
    """Nonzeros of each sparse weight, which dynamic sparsity keeps constant: the initial masks'
    round(density * numel), at least one (`techniques.sparsity.initial_masks`)."""
    density = config.sparsity.density
    if density >= 1.0:
        return {}
    return {
        name: max(1, round(density * model.get_parameter(name).numel()))
        for name in sparse_parameter_names(model, config.task)
    }


@contextlib.contextmanager
def _global_rng_kept():
    """Building a Trainer reseeds the global generators; a prediction leaves them as they were."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng():
        yield
    random.setstate(python_state)
    np.random.set_state(numpy_state)
