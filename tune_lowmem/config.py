"""One frozen, validated configuration object per trial.

Every component (model, data, techniques, trainer, profiler, search, store)
reads a `TrialConfig`; nothing else carries settings. It is built from a nested
dict (YAML), a flat dict with dotted keys (what Optuna and Ray hand over, e.g.
``{"sparsity.density": 0.3}``), or a mix of both. A bad value raises
`ConfigError` naming the field and the allowed values, before anything runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from .schema import check_types
from .tasks.registry import DEFAULT_TASK, get_task
from .validation import (
    ConfigError,
    choice,
    fraction,
    is_int,
    nonnegative_float,
    nonnegative_int,
    optional_positive_int,
    positive_float,
    positive_int,
    probability,
    require,
)

__all__ = ["ConfigError", "TrialConfig"]

MICROBATCH_MODES = ("true", "simulated")
FUSED_NORM_MODES = ("none", "unit", "block")
REWIRING_MODES = ("dynamic", "static")
PERIOD_SCHEDULES = ("paper", "constant")
SCHEDULE_UNITS = ("relative", "absolute")
# how the accounted memory counts a sparse weight (techniques.sparsity.sparse_storage_bytes)
STORAGE_LAYOUTS = ("csr", "bitmap", "best")
# How pure bf16 rounds each update into its weights (costs: techniques/rounding.py).
SPLITS = ("search", "final")
DEVICES = ("auto", "cpu", "cuda")
SEED_LIMIT = 2**32  # numpy's generators take seeds below it
# The sections a task declares its own dataclass for; every other field is the trial's or a
# technique's (see `tune_lowmem.tasks.Task` and `tune_lowmem.techniques`).
TASK_SECTIONS = ("model", "schedule", "data")


@dataclass(frozen=True)
class WideResNetConfig:
    """WideResNet-d-k (Zagoruyko & Komodakis 2016); the paper uses 28-2."""

    depth: int = 28  # 6n+4: n residual blocks in each of the three groups
    width: int = 2  # widening factor k; group widths are 16k, 32k, 64k
    num_classes: int = 10
    # not the paper's: blocks trained through models.fused_norm (exact; see set_fused_norm)
    fused_norm: str = "none"

    def validate(self, prefix: str) -> None:
        choice(self.fused_norm, FUSED_NORM_MODES, f"{prefix}.fused_norm")
        positive_int(self.depth, f"{prefix}.depth")
        require(
            self.depth >= 10 and (self.depth - 4) % 6 == 0,
            f"{prefix}.depth",
            f"{self.depth!r} is not allowed; a depth 6n+4 with n >= 1 (10, 16, 22, 28, ...) is required",
        )
        positive_int(self.width, f"{prefix}.width")
        positive_int(self.num_classes, f"{prefix}.num_classes")


@dataclass(frozen=True)
class DynamicConvConfig:
    """fairseq's `lightconv_iwslt_de_en` with dynamic convolutions in encoder and decoder."""

    embed_dim: int = 512
    ffn_dim: int = 1024
    heads: int = 4  # weight-sharing heads of the dynamic convolution (and decoder attention)
    encoder_layers: int = 7
    decoder_layers: int = 6
    encoder_kernels: tuple[int, ...] = (3, 7, 15, 31, 31, 31, 31)
    decoder_kernels: tuple[int, ...] = (3, 7, 15, 31, 31, 31)
    glu: bool = False
    weight_softmax: bool = True
    dropout: float = 0.3
    weight_dropout: float = 0.1  # dropout on the softmaxed convolution weights
    attention_dropout: float = 0.1
    relu_dropout: float = 0.0
    input_dropout: float = 0.0
    share_decoder_input_output_embed: bool = False  # fairseq's recipe leaves them untied
    init_checkpoint: str | None = None  # start from a fairseq checkpoint of this architecture

    def validate(self, prefix: str) -> None:
        require(
            self.init_checkpoint is None
            or (isinstance(self.init_checkpoint, str) and self.init_checkpoint != ""),
            f"{prefix}.init_checkpoint",
            f"{self.init_checkpoint!r} is not allowed; a fairseq checkpoint's path or null is required",
        )
        for name in ("embed_dim", "ffn_dim", "heads", "encoder_layers", "decoder_layers"):
            positive_int(getattr(self, name), f"{prefix}.{name}")
        require(
            self.embed_dim % self.heads == 0,
            f"{prefix}.heads",
            f"{self.heads!r} is not allowed; it must divide model.embed_dim {self.embed_dim}",
        )
        for name, layers in (
            ("encoder_kernels", self.encoder_layers),
            ("decoder_kernels", self.decoder_layers),
        ):
            kernels = getattr(self, name)
            require(
                len(kernels) == layers
                and all(isinstance(k, int) and k > 0 and k % 2 == 1 for k in kernels),
                f"{prefix}.{name}",
                f"{kernels!r} is not allowed; one odd positive kernel size per layer ({layers}) is required",
            )
        for name in (
            "dropout",
            "weight_dropout",
            "attention_dropout",
            "relu_dropout",
            "input_dropout",
        ):
            probability(getattr(self, name), f"{prefix}.{name}")


@dataclass(frozen=True)
class StepScheduleConfig:
    """The WRN recipe: SGD with Nesterov momentum, lr cut by `gamma` at fixed fractions of training."""

    epochs: int = 200
    batch_size: int = 100
    lr: float = 0.1
    lr_multiplier: float = 1.0  # scales the whole schedule; the paper searches it
    momentum: float = 0.9
    weight_decay: float = 5e-4
    gamma: float = 0.2
    milestones: tuple[float, ...] = (0.3, 0.6, 0.8)  # epochs 60, 120, 160 of 200
    eval_batch_size: int = 500

    def validate(self, prefix: str) -> None:
        positive_int(self.epochs, f"{prefix}.epochs")
        positive_int(self.batch_size, f"{prefix}.batch_size")
        positive_int(self.eval_batch_size, f"{prefix}.eval_batch_size")
        positive_float(self.lr, f"{prefix}.lr")
        positive_float(self.lr_multiplier, f"{prefix}.lr_multiplier")
        fraction(self.momentum, f"{prefix}.momentum", open_low=False)
        nonnegative_float(self.weight_decay, f"{prefix}.weight_decay")
        fraction(self.gamma, f"{prefix}.gamma")
        require(
            all(0 < m < 1 for m in self.milestones)
            and list(self.milestones) == sorted(self.milestones),
            f"{prefix}.milestones",
            f"{self.milestones!r} is not allowed; increasing fractions of training in (0, 1) are required",
        )

    def milestone_updates(self, total_updates: float) -> tuple[int, ...]:
        """The updates from which the lr is cut: each milestone's fraction of the run's
        `total_updates` (epochs x updates per epoch, which may be fractional), rounded half up,
        so that a short run cuts where the paper's 200 epochs would (epochs 60/120/160)."""
        return tuple(math.floor(m * total_updates + 0.5) for m in self.milestones)


@dataclass(frozen=True)
class InverseSqrtScheduleConfig:
    """The DC-Transformer recipe of fairseq's pay_less_attention_paper: Adam, warm-up, inverse sqrt."""

    max_updates: int = 50_000
    max_epochs: int | None = None  # stop after this many epochs even before max_updates
    max_tokens: int = 4000  # token budget of one minibatch (source or target, whichever is larger)
    lr: float = 5e-4
    lr_multiplier: float = 1.0
    warmup_updates: int = 4000
    warmup_init_lr: float = 1e-7
    betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-8
    weight_decay: float = 1e-4
    label_smoothing: float = 0.1
    beam_size: int = 5
    length_penalty: float = 1.0
    max_decode_len_a: float = 1.2  # decode at most a*src_len + b tokens
    max_decode_len_b: int = 10

    def validate(self, prefix: str) -> None:
        for name in ("max_updates", "max_tokens", "beam_size"):
            positive_int(getattr(self, name), f"{prefix}.{name}")
        optional_positive_int(self.max_epochs, f"{prefix}.max_epochs")
        nonnegative_int(self.warmup_updates, f"{prefix}.warmup_updates")
        for name in ("lr", "lr_multiplier", "warmup_init_lr", "adam_eps"):
            positive_float(getattr(self, name), f"{prefix}.{name}")
        nonnegative_float(self.weight_decay, f"{prefix}.weight_decay")
        require(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            f"{prefix}.betas",
            f"{self.betas!r} is not allowed; two numbers in [0, 1) are required",
        )
        probability(self.label_smoothing, f"{prefix}.label_smoothing")


@dataclass(frozen=True)
class DataConfig:
    """Where the data is and how much of it a trial uses."""

    root: str | None = None  # None: $TUNE_LOWMEM_DATA, else ../shared/data beside the project
    train_subset: int | None = None  # use only this many training examples (quick runs)
    # held out from training for search: CIFAR-10 images (the paper: 5,000); IWSLT'14 sentence
    # pairs, only when the folder has no valid split of its own (the shipped iwslt14-small)
    val_size: int = 5000
    test_subset: int | None = None
    split: str = "search"  # search: train 45k / validate 5k; final: train on all 50k
    augment: bool = True  # 4-pixel pad, random crop, horizontal flip

    def validate(self, prefix: str) -> None:
        optional_positive_int(self.train_subset, f"{prefix}.train_subset")
        optional_positive_int(self.test_subset, f"{prefix}.test_subset")
        nonnegative_int(self.val_size, f"{prefix}.val_size")
        choice(self.split, SPLITS, f"{prefix}.split")


@dataclass(frozen=True)
class MicrobatchConfig:
    """Microbatching: split each minibatch, one optimizer step per minibatch."""

    size: int | None = None  # examples or tokens per microbatch (the task's unit); None: off
    mode: str = (
        "true"  # true: sequential, gradients accumulated; simulated: BN over groups of the batch
    )

    def validate(self, prefix: str) -> None:
        optional_positive_int(self.size, f"{prefix}.size")
        choice(self.mode, MICROBATCH_MODES, f"{prefix}.mode")


@dataclass(frozen=True)
class SparsityConfig:
    """Dynamic sparse reparameterization (Mostafa & Wang 2019), as the paper trains it."""

    density: float = 1.0  # fraction of nonzeros in the sparse layers; 1.0 = dense
    rewiring: str = "dynamic"  # dynamic: prune and regrow; static: a fixed random mask
    period_schedule: str = "paper"  # paper: 100/200/400/800 iterations from epochs 0/25/80/140
    constant_period: int = 100  # iterations between rewirings when period_schedule is constant
    period_multiplier: float = 1.0  # scales the rewiring period (paper searches 0.125..4)
    fraction_multiplier: float = 1.0  # scales the rewiring fraction (paper searches 0.25..8)
    fraction: float | None = None  # Np as a fraction of sparse params; None: the paper's WRN value
    initial_threshold: float = 1e-3  # the adaptive global pruning threshold H at the start
    stop_epoch: float = 0.95  # rewiring stops at this fraction of training (paper: 190 of 200)
    # relative: the paper's periods and boundaries as fractions of the run's updates (exactly the
    # paper's at 200 epochs x 450 updates); absolute: periods in updates, boundaries in scaled
    # epochs, so short runs rewire rarely or never. See techniques/rewiring.py.
    schedule_units: str = "relative"
    # what the accounted memory (the objective) counts a sparse weight as: csr (the paper's),
    # bitmap (values and one bit per position), or best (the smaller, per weight)
    storage: str = "csr"

    def validate(self, prefix: str) -> None:
        fraction(self.density, f"{prefix}.density")
        choice(self.rewiring, REWIRING_MODES, f"{prefix}.rewiring")
        choice(self.period_schedule, PERIOD_SCHEDULES, f"{prefix}.period_schedule")
        positive_int(self.constant_period, f"{prefix}.constant_period")
        positive_float(self.period_multiplier, f"{prefix}.period_multiplier")
        positive_float(self.fraction_multiplier, f"{prefix}.fraction_multiplier")
        if self.fraction is not None:
            fraction(self.fraction, f"{prefix}.fraction")
        positive_float(self.initial_threshold, f"{prefix}.initial_threshold")
        fraction(self.stop_epoch, f"{prefix}.stop_epoch", open_low=False)
        choice(self.schedule_units, SCHEDULE_UNITS, f"{prefix}.schedule_units")
        choice(self.storage, STORAGE_LAYOUTS, f"{prefix}.storage")

    @property
    def enabled(self) -> bool:
        return self.density < 1.0


@dataclass(frozen=True)
class TrialConfig:
    """Everything one training trial needs. Sections are frozen dataclasses; see each field.

    `model`, `schedule` and `data` are the task's own sections: the task (looked up by name in
    `tune_lowmem.tasks`) declares their dataclasses and their defaults. The other fields belong
    to every trial (task, seed, device) or to a technique (`tune_lowmem.techniques`), whose
    checks against the task run here too, so a config that exists is one a trial can run.
    """

    task: str = DEFAULT_TASK  # a registered task name, or "package.module:attribute"
    seed: int = 0
    device: str = "auto"  # auto: CUDA when available, else the CPU
    precision: str = "fp32"  # fp16/bf16: all storage in half, norms fp32; amp-*: fp32 masters
    checkpoint: str = "none"  # gradient checkpointing strategy; the task lists its strategies
    model: Any = None  # the task's model section (None: its defaults)
    schedule: Any = None  # the task's optimizer and schedule section
    data: Any = None  # the task's data section
    microbatch: MicrobatchConfig = field(default_factory=MicrobatchConfig)
    sparsity: SparsityConfig = field(default_factory=SparsityConfig)
    # bf16 only: stochastic rounds each weight update (unbiased; no extra state), kahan carries
    # what rounding lost to the next update (+2 bytes of state per half weight); both hold the
    # half weights and gradients in fp32 while the step runs; nearest as plain bf16 does.
    precision_update: str = "nearest"
    # techniques/fused_step.py: none; exact (the task's SGD applied per parameter in the backward
    # pass); heavy-ball (lossy: momentum without Nesterov, so microbatch gradients go straight
    # into the momentum buffer and no gradient buffer exists)
    fused_step: str = "none"
    momentum_dtype: str = "param"  # param: the parameter's dtype; bf16 (lossy; fused step, fp32)
    # techniques/adam_state.py, Adam tasks: param (the parameter's dtype); bf16 (lossy, fp32
    # weights only); int8 (lossy: 8-bit blockwise-quantized moments, after bitsandbytes)
    adam_state: str = "param"

    def __post_init__(self) -> None:
        task = self.task_type()
        for name, section_cls in task.sections().items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, section_cls())
        self.validate()

    def task_type(self) -> type:
        """The task class this config names (imported on first use)."""
        return get_task(self.task)

    def validate(self) -> None:
        from .techniques import TECHNIQUES

        task = self.task_type()
        for name, expected in task.sections().items():
            section = getattr(self, name)
            require(
                isinstance(section, expected),
                name,
                f"a {type(section).__name__} is not allowed for task {self.task}; "
                f"{expected.__name__} is required",
            )
        check_types(self)  # the store's column types: no range check sees a wrong type
        require(
            is_int(self.seed) and 0 <= self.seed < SEED_LIMIT,
            "seed",
            f"{self.seed!r} is not allowed; an integer in [0, 2**32) is required (numpy's seeds)",
        )
        choice(self.device, DEVICES, "device")
        for f in fields(self):
            value = getattr(self, f.name)
            if is_dataclass(value):
                value.validate(f.name)
        for technique in TECHNIQUES:
            technique.validate(self, task)
        task.validate_config(self)

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrialConfig:
        """Build from a nested dict, a flat dict with dotted keys, or a mix of both."""
        nested = _unflatten(values)
        task = get_task(nested.get("task", cls.task))
        sections = {
            **task.sections(),
            "microbatch": MicrobatchConfig,
            "sparsity": SparsityConfig,
        }
        kwargs: dict[str, Any] = {}
        allowed = {f.name for f in fields(cls)}
        for key, value in nested.items():
            if key not in allowed:
                raise ConfigError(key, f"unknown field; allowed: {', '.join(sorted(allowed))}")
            if key in sections:
                if not isinstance(value, Mapping):
                    raise ConfigError(
                        key, f"{value!r} is not allowed; a mapping of its fields is required"
                    )
                kwargs[key] = _build_section(sections[key], value, key)
            else:
                kwargs[key] = value
        for key, section_cls in sections.items():
            kwargs.setdefault(key, section_cls())
        return cls(**kwargs)

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrialConfig:
        from .yaml_loading import load_file

        loaded = load_file(path, "config file")
        loaded = {} if loaded is None else loaded
        if not isinstance(loaded, Mapping):
            raise ConfigError(str(path), "a YAML mapping of config fields is required")
        return cls.from_dict(loaded)

    def replace(self, **flat: Any) -> TrialConfig:
        """A copy with some fields changed, given as dotted keys (``{"sparsity.density": 0.3}``)."""
        return TrialConfig.from_dict({**self.to_flat(), **_unflatten_keys(flat)})

    def to_dict(self) -> dict[str, Any]:
        """Nested plain values (tuples as lists), as YAML writes them."""
        return _plain(dataclasses.asdict(self))

    def to_flat(self) -> dict[str, Any]:
        """Dotted keys to plain values: one store column per field."""
        return _flatten(self.to_dict())

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _build_section(section_cls: type, values: Mapping[str, Any], prefix: str) -> Any:
    known = {f.name: f for f in fields(section_cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{prefix}.{key}", f"unknown field; allowed: {', '.join(known)}")
        default = getattr(section_cls(), key)
        kwargs[key] = (
            tuple(value) if isinstance(default, tuple) and isinstance(value, list) else value
        )
    try:
        return section_cls(**kwargs)
    except TypeError as error:  # pragma: no cover - guarded by the key check above
        raise ConfigError(prefix, str(error)) from error


def _unflatten(values: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in values.items():
        parts = str(key).split(".")
        target = nested
        for part in parts[:-1]:
            existing = target.setdefault(part, {})
            if not isinstance(existing, dict):
                raise ConfigError(key, f"{part!r} is a value and cannot also have fields")
            target = existing
        leaf = parts[-1]
        if isinstance(value, Mapping):
            target.setdefault(leaf, {}).update(_unflatten(value))
        else:
            target[leaf] = value
    return nested


def _unflatten_keys(flat: Mapping[str, Any]) -> dict[str, Any]:
    return {key.replace("__", "."): value for key, value in flat.items()}


def _flatten(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
