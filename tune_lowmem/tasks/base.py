"""The Task interface: everything a trial needs that differs from one model and data set to the
next, behind one class; the training loop (`tune_lowmem.train`), the techniques, the profiler
and the search know the rest and no task by name.

A task class declares, as class attributes and class methods (known without building it):
- its config sections (`model`, `schedule`, `data`: frozen dataclasses with defaults and a
  ``validate(prefix)`` method) and any check across them (`validate_config`);
- the metrics it reports, each with its direction and bounds (`METRICS`);
- which schedule fields decide tensor shapes (for the profiler's cache), and the optimizer
  its recipe builds.
A technique that needs more of a task (checkpointing its model's strategies, microbatching the
modes its batches allow) declares it in its own `TASK_NEEDS`, with what a task that does not set
it is read as; a task sets those as class attributes.

An instance, built for one config and device, supplies data, model, loss, optimizer and
schedule, evaluation, and a synthetic minibatch of real shape for the profiler. With
``synthetic=True`` it loads no data set at all: every training batch is synthetic.

A user's task subclasses `Task` and is named ``package.module:attribute`` in a search space or
config; see tests/tiny_task.py for a complete small one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from ..config import TrialConfig
from ..data import DataConfig
from ..data.batch import split_rows
from ..models.layers import weight_layer
from ..outcome import MAXIMIZE, Direction
from ..validation import ConfigError


@dataclasses.dataclass(frozen=True)
class Metric:
    """One number a task reports after an epoch."""

    direction: Direction  # which way is better (a user's task may give its value as text)
    low: float | None = None  # bounds, when the metric has them (accuracy: 0..1)
    high: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "direction", Direction.of(self.direction, "Metric.direction"))

    def worst(self, unknown: float) -> float:
        """A value every real result beats (what a never-trained point is told)."""
        if self.direction == MAXIMIZE:
            return self.low if self.low is not None else -unknown
        return self.high if self.high is not None else unknown


class Task:
    """One training problem: a model on a data set with its recipe."""

    MODEL_CONFIG: ClassVar[type]  # the `model` section's dataclass
    SCHEDULE_CONFIG: ClassVar[type]  # the `schedule` section's dataclass
    DATA_CONFIG: ClassVar[type] = DataConfig
    METRICS: ClassVar[Mapping[str, Metric]]  # what `evaluate` and the trainer report
    SHAPE_FIELDS: ClassVar[tuple[str, ...]] = ("batch_size",)  # schedule fields fixing shapes
    # the torch optimizer class `build_optimizer` returns, for techniques that replace its step
    # (the fused step needs torch.optim.SGD); None: not declared
    OPTIMIZER: ClassVar[type | None] = None
    # Param of its sections (dotted) -> its values that train as the plain step does, or
    # techniques.base.EVERY, as a technique's `EXACT` (seen when the task is registered)
    EXACT: ClassVar[Mapping[str, tuple[Any, ...] | None]] = {}

    def __init__(self, config: TrialConfig, device: torch.device, *, synthetic: bool = False):
        self.config = config
        self.device = device
        self.synthetic = synthetic
        # The most of a minibatch one forward and backward pass takes, in the unit microbatching
        # counts (examples, or a translation task's tokens): what the technique that cuts
        # minibatches sets on the trial's task; None, the whole minibatch. `microbatches` cuts at
        # it, and an evaluation batch left `auto` follows it.
        self.microbatch_size: int | None = None

    # ---- what the config layer asks of the class --------------------------------------------

    @classmethod
    def sections(cls) -> dict[str, type]:
        return {"model": cls.MODEL_CONFIG, "schedule": cls.SCHEDULE_CONFIG, "data": cls.DATA_CONFIG}

    @classmethod
    def validate_config(cls, config: TrialConfig) -> None:
        """Checks across sections (e.g. microbatch size against the batch); none by default."""

    @classmethod
    def validation_empty(cls, config: TrialConfig) -> bool:
        """Whether `config` leaves no validation split (then no val_* metric can be reported):
        by default, a final split or none held out of training."""
        data = config.data
        return getattr(data, "split", "search") != "search" or getattr(data, "val_size", 1) == 0

    @classmethod
    def metric_names(cls) -> tuple[str, ...]:
        return tuple(cls.METRICS)

    # ---- the recipe -------------------------------------------------------------------------

    def build_model(self) -> nn.Module:
        """The fp32 model on the CPU, before any technique is applied."""
        raise NotImplementedError

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        raise NotImplementedError

    def learning_rate(self, epoch: int, update: int) -> float:
        """The schedule's learning rate for the next update (lr multiplier included)."""
        raise NotImplementedError

    def updates_per_epoch(self) -> int:
        raise NotImplementedError

    def epochs(self) -> int:
        """How many epochs the schedule has."""
        raise NotImplementedError

    def total_updates(self) -> float:
        """How many updates the whole run takes (the step schedule's cuts and the rewiring
        schedule are placed in them)."""
        return self.epochs() * self.updates_per_epoch()

    def finished(self, epoch: int, updates: int) -> bool:
        """Whether training is over after `epoch` epochs and `updates` updates."""
        return epoch >= self.epochs()

    # ---- one update -------------------------------------------------------------------------

    def train_batches(self, epoch: int) -> Iterable[Any]:
        """One epoch of minibatches, deterministic for (seed, epoch); synthetic ones when the
        task was built with ``synthetic=True``."""
        if self.synthetic:
            return self.synthetic_batches(epoch)
        return self.data_batches(epoch)

    def data_batches(self, epoch: int) -> Iterable[Any]:
        raise NotImplementedError

    def synthetic_batches(self, epoch: int) -> Iterator[Any]:
        generator = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)
        for _ in range(self.updates_per_epoch()):
            yield self.synthetic_batch(generator)

    def synthetic_batch(self, generator: torch.Generator) -> Any:
        """A minibatch of the real shapes and dtypes, on the task's device, with random values:
        what the profiler predicts and measures a step on."""
        raise NotImplementedError

    def describe(self) -> str:
        """The model and the batch in a few words, for the profiler's headline."""
        fields = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self.config.model).items())
        shapes = ", ".join(f"{k} {getattr(self.config.schedule, k)}" for k in self.SHAPE_FIELDS)
        return f"{type(self.config.model).__name__}({fields}), {shapes}"

    def set_synthetic_lengths(self, lengths: tuple[int, ...]) -> None:
        """Sequence lengths of the synthetic batches, for tasks whose batches have them."""
        raise ConfigError(
            "lengths",
            f"{lengths!r} is not allowed for {self.config.task}; its batches have fixed shapes",
        )

    def microbatches(self, batch: Any) -> list[Any]:
        """The minibatch cut into microbatches of `microbatch_size` (one element when it is
        None): by default the rows of its tensors (`data.batch.split_rows`)."""
        return split_rows(batch, self.microbatch_size)

    def loss(self, model: nn.Module, microbatch: Any) -> tuple[torch.Tensor, float]:
        """Summed training loss of a microbatch, and the number of items it sums over."""
        raise NotImplementedError

    def normaliser(self, batch: Any) -> float:
        """What the minibatch loss is divided by (examples, or target tokens)."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module, final: bool) -> dict[str, float]:
        """Validation (and, when `final`, test) metrics; the model is in eval mode."""
        raise NotImplementedError

    def evaluation_pass(self, model: nn.Module, batch: Any) -> Any:
        """What `evaluate` computes on one batch (the model in eval mode, under no_grad), which
        the profiler runs on fake tensors for the run's peak; None when the task has none."""
        return None

    def synthetic_evaluation_batch(self, generator: torch.Generator) -> Any:
        """A batch of evaluation's largest shape with random values, for the profiler: by
        default a training minibatch (a task that evaluates at another batch says which)."""
        return self.synthetic_batch(generator)

    def synthetic_evaluation_batches(self) -> int | None:
        """How many batches of `synthetic_evaluation_batch`'s shape one evaluation of the
        validation split stands for, for the time prediction (a partial last batch counts
        whole); None when the task does not say (then no evaluation time is predicted)."""
        return None

    # ---- what the techniques ask ------------------------------------------------------------

    def sparse_parameter_names(self, model: nn.Module) -> list[str]:
        """The weights dynamic sparsity may prune: by default every convolution and linear
        weight except the first and the last such layer (the input stem and the classifier stay
        dense, as the paper keeps WideResNet's), and anything tied to an embedding."""
        return conv_and_linear_weights(model)[1:-1]


def conv_and_linear_weights(model: nn.Module) -> list[str]:
    """Names of every convolution and linear weight in module order, each once, leaving out
    embeddings and whatever is tied to one (a shared output projection)."""
    seen = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    names = []
    for name, module in model.named_modules():
        # exact types, or what stands for one (`models.layers`)
        if weight_layer(module) and id(module.weight) not in seen:
            seen.add(id(module.weight))
            names.append(f"{name}.weight" if name else "weight")
    return names
