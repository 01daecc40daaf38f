"""The shape every memory technique has, after MosaicML Composer's algorithms: a small unit that
owns its fields of `TrialConfig` (`SETTINGS`), checks them against the task, changes the model,
optimizer or step of one trial, and says what it changes in the memory prediction.

A technique is a `Technique` subclass registered by name: a row of
`tune_lowmem.plugins.BUILTIN_TECHNIQUES`, or an entry point of the group
``tune_lowmem.techniques`` in any installed package (docs/plugins.md). It imports no model, no
task module and no Ray; it asks the task (`tune_lowmem.tasks.base.Task`) for what it needs to
know about the model: what its interface documents, and what the technique declares in
`TASK_NEEDS` (a task sets those as class attributes, or is read the declared default).

Class methods answer for a config without building anything (validation, the profiler's cache
key, what a run's peak holds beside its steps); an instance is bound to one trial and sees its
events in the training loop's order: `apply` (the fp32 model on the CPU, in registry order) ->
`attach` (the optimizer) -> per update `begin_step` (before the first backward) -> `before_step`
(gradients final) and `after_step`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from torch import nn

from ..plugins import TECHNIQUES
from ..validation import require

# The trial's task (`tune_lowmem.tasks.base.Task`), which sits above the techniques: they use
# only what its interface documents, and import no task module.
Task = Any
# In an `EXACT` declaration (a technique's or a task's): every value of the param is exact.
EVERY = None

if TYPE_CHECKING:
    import torch

    from ..config import TrialConfig
    from .setting import Setting


class Technique:
    """One memory technique bound to one trial; the defaults do nothing."""

    NAME: ClassVar[str]  # its registered name, and the key of its checkpointed state
    SETTINGS: ClassVar[tuple[Setting, ...]]  # its fields of TrialConfig
    # Param (dotted) -> its values that train as the plain step does (bit for bit or within
    # rounding), or EVERY: points differing only in them share one accuracy (search.exact).
    EXACT: ClassVar[Mapping[str, tuple[Any, ...] | None]] = {}
    # Whether it runs a trial's step (a `StepRunner`), read without importing this module.
    RUNS_STEP: ClassVar[bool] = False
    # What it reads of a task beyond the `Task` interface: class attribute -> what a task that
    # does not set it is read as (`task_needs`).
    TASK_NEEDS: ClassVar[Mapping[str, Any]] = {}
    # Its dotted fields that make the trial's process environment (`environment`): a process
    # that started CUDA under one value cannot take another, so trials that differ in them run
    # in processes of their own.
    ENVIRONMENT: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: TrialConfig, task: Task):
        self.config = config
        self.task = task

    # ---- what a config says, without a model -------------------------------------------------

    @classmethod
    def settings(cls, config: TrialConfig) -> Any:
        return getattr(config, cls.NAME)

    @classmethod
    def task_needs(cls, task: Task, name: str) -> Any:
        """The task's (class's or instance's) `name` of `TASK_NEEDS`, or its declared default."""
        return getattr(task, name, cls.TASK_NEEDS[name])

    @classmethod
    def require_reached(cls, config: TrialConfig, task: Task, need: str, doing: str) -> None:
        """Refuse a value of a task's param that the task declares out of this technique's
        reach (`TASK_NEEDS[need]`: dotted param -> the values it reaches), naming the param;
        `doing` says what the technique does (e.g. "precision amp-fp16 (autocast)")."""
        flat = config.to_flat()
        for param, reached in cls.task_needs(task, need).items():
            require(
                flat[param] in reached,
                param,
                f"{flat[param]!r} is not allowed with {doing}; allowed: {', '.join(reached)}",
            )

    @classmethod
    def enabled(cls, config: TrialConfig) -> bool:
        """Whether a trial of `config` needs an instance of this technique."""
        raise NotImplementedError

    @classmethod
    def validate(cls, config: TrialConfig, task: type) -> None:
        """Checks of the settings against the task; `ConfigError` naming the field."""
        raise NotImplementedError

    @classmethod
    def shape_settings(cls, config: TrialConfig) -> dict[str, Any]:
        """Its contribution to the memory prediction's dry run: the dotted config fields whose
        values change the tensors a training step holds (the prediction is cached over them)."""
        raise NotImplementedError

    @classmethod
    def check_space(cls, probes: dict[str, list[Any]], base: dict[str, Any], limit: int) -> None:
        """Refuse a search space in which its searched settings could do nothing, naming the
        param: `probes` are each searched param's probe values (ends and choices), `base` the
        fixed values; at most `limit` combinations are tried. Nothing by default."""

    @classmethod
    def environment(cls, config: TrialConfig) -> dict[str, str]:
        """Environment variables a trial's process must hold before CUDA starts, which the
        libraries under torch read then (none by default; `train.apply_environment` sets them)."""
        return {}

    @classmethod
    def off_metrics(cls, config: TrialConfig) -> dict[str, float]:
        """What a trial that leaves it off reports in its place (so every trial has the column)."""
        return {}

    # ---- its memory, as the profiler (`tune_lowmem.memory`) asks for it -----------------------

    @classmethod
    def weight_bytes(cls, model: nn.Module, layout: str | None = None) -> dict[str, int]:
        """Weights of `model` it holds compressed, by parameter name, each with the bytes it
        takes (values and index): as the model holds them (None), or counted in a named sparse
        `layout` (csr: the paper's accounting). The profiler counts these in place of the
        weights' tensors (none by default)."""
        return {}

    @classmethod
    def occasional_work(cls, config: TrialConfig) -> bool:
        """Whether a trial runs, after some updates, work of its own whose temporaries may
        exceed a step's (a sparse model's rewiring): its peak is then the larger of the two
        (none by default)."""
        return False

    @classmethod
    def portable_state(cls, state: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """A model state_dict as tools that know none of its layers read it (e.g. a fairseq
        export): what this technique holds in a form of its own, made plain; unchanged by
        default."""
        return state

    @classmethod
    def peak_updates(cls, config: TrialConfig) -> list[int]:
        """The 0-based updates whose step may be a run's peak, for a measurement to take
        (none by default: the step after the warm-up stands for every step)."""
        return []

    # ---- one trial ---------------------------------------------------------------------------

    def apply(self, model: nn.Module) -> nn.Module:
        return model

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def begin_step(self, microbatches: int) -> None:
        """Before the update's first backward pass, with how many microbatches it has."""

    def before_step(self) -> None:
        pass

    def after_step(self, epoch: int, update: int) -> None:
        pass

    def works_after(self, epoch: int, update: int) -> bool:
        """Whether `after_step` after this update (0-based, in `epoch`) does its occasional
        work (a rewiring): that update's time is then no steady-state figure (none by default)."""
        return False

    def metrics(self) -> dict[str, float]:
        return {}

    def held_tensors(self) -> list[torch.Tensor]:
        """Tensors it keeps between steps (e.g. masks): the measurement counts them as held."""
        return []

    def run_occasional_work(self) -> None:
        """Its `occasional_work` once, now (the profiler measures the peak it reaches)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class StepRunner(Technique):
    """The technique that runs a trial's step: the one its config's ``step_runner`` names (the
    numeric format's, `techniques.precision.Precision`, by default), bound to that trial alone.
    What the training loop (`Trainer.train_step`) and the profiler's dry run (`memory.predict`)
    ask of it, in their order; a plug-in that runs the step subclasses this and implements each
    method without reading a tensor's value on the host (the dry run steps on fake tensors)."""

    RUNS_STEP = True

    @classmethod
    def enabled(cls, config: TrialConfig) -> bool:
        """Whether the config's ``step_runner`` names it."""
        return TECHNIQUES.get(config.step_runner, "step_runner") is cls

    def forward_context(self) -> contextlib.AbstractContextManager:
        """Where every forward pass runs, training and evaluation (e.g. autocast)."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        """One microbatch's backward pass from its loss (e.g. scaled)."""
        loss.backward()

    def unscale_(self, parameters: Iterator[nn.Parameter], finite: bool | None = None) -> bool:
        """Ready the gradients for the step and say whether to take it; `finite`: whether every
        gradient is, when the caller has read it already."""
        return True if finite is None else finite

    def step(self, optimizer: torch.optim.Optimizer, parameters: Iterable[nn.Parameter]) -> None:
        """The optimizer's step."""
        optimizer.step()

    @property
    def skips_nonfinite_steps(self) -> bool:
        """Whether a step whose loss or gradients are not finite is skipped (dynamic loss
        scaling) rather than the end of the trial."""
        return False

    def cannot_go_on(self) -> str | None:
        """Why training must stop after a skipped step (e.g. a collapsed loss scale), or None."""
        return None

    @property
    def skipped_steps(self) -> int:
        """Steps skipped so far (a metric of every epoch)."""
        return 0
