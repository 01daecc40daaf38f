"""A search space: what a sweep varies, what it optimises, and how it runs, read from YAML.

The whole file is checked before anything starts (no folder created, no Ray started): every
key, every range, every choice value built into a real `TrialConfig`, every objective a metric
the trial reports, every searched rewiring knob at points that rewire, the sampler and its
options against its class (`sampler_settings`, resolved once). A mistake raises `ConfigError`
naming the field, e.g.
``params.sparsity.density.low: 0 is not allowed; loguniform needs low > 0``.

Each key's own check and default stand in one table (`schema.SPACE_FIELDS`; a param's keys
in `params.FIELDS`, the resources' in `schema.RESOURCE_FIELDS`, the scheduler's in `scheduler_settings`),
read in one call; `SearchSpace.from_dict` then checks what a key must be beside the others, in
this order: what the distributions alone decide (the conditions, `constraints`; the sampler with
its options, and what it needs of them), then the base config and what needs its fields, and
last the costly proofs over
the configs the sweep can run, each built once (`constraints.proofs`: each param value valid, a
validation split where one is needed, each technique's own knobs).

The file's keys, each with its check and default, are `schema.SPACE_FIELDS` (a full example
there and in search_spaces/quickstart.yaml).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ConfigError, TrialConfig
from ..outcome import MAXIMIZE, METRIC, SPACE_OBJECTIVES, Direction, column
from ..plugins import TASKS
from ..validation import read_section, require
from ..yaml_loading import load_file
from . import constraints
from .constraints import Condition  # the name a pickled space's conditions hold
from .params import GRID_LIMIT, Param
from .sampler_settings import SamplerSettings, sampler_settings
from .scheduler_settings import SchedulerSettings, scheduler_settings
from .schema import SPACE_FIELDS
from .tracking_settings import TrackingSettings, mlflow_uri, tracking_settings

UNKNOWN_WORST = 1e9  # what a never-trained point is told for a metric without bounds

_NOT_SEARCHABLE = {
    "task": "the task fixes the model and schedule sections; set it in base",
    "seed": "seeds come from seeds_per_point (0..k-1)",
}


def worst_value(metric: str, direction: str, task: str | None = None) -> float:
    """A value every real result beats: what a never-trained point tells the sampler. The
    task's metrics give their bounds (accuracy: 0); others get -+UNKNOWN_WORST."""
    known = TASKS.get(task).METRICS.get(metric) if task is not None else None
    if known is not None and known.direction == direction:
        return known.worst(UNKNOWN_WORST)
    return -UNKNOWN_WORST if direction == MAXIMIZE else UNKNOWN_WORST


@dataclass(frozen=True)
class Resources:
    """What one trial asks Ray for."""

    cpu: int = 1
    gpu: float | str = 0  # a share of one GPU, a whole number of GPUs, or "auto"
    gpu_memory_mb: float | None = None  # one GPU's memory, to size the "auto" share
    # the GPUs' compute capability ("9.0": Hopper), whose workspaces a CUDA trial's prediction
    # counts on the driver (`memory.cuda.trial_target`); None: the driver's GPU's, else Hopper's
    gpu_capability: str | None = None

    @property
    def capability(self) -> tuple[int, int] | None:
        """`gpu_capability` as (major, minor)."""
        if self.gpu_capability is None:
            return None
        major, minor = self.gpu_capability.split(".")
        return int(major), int(minor)

    def gpu_share(self, reserved_mb: float, context_mb: float) -> float:
        """The GPU request: fixed, or what a trial's allocator reserves and its CUDA context as a
        share of one card (`tune_lowmem.memory.share`, the rule the trial is then held to)."""
        if self.gpu != "auto":
            return float(self.gpu)
        from ..memory.share import gpu_share  # the rule, shared with the trial's limit

        return gpu_share(reserved_mb, context_mb, self.gpu_memory_mb)

    def to_dict(self) -> dict[str, Any]:
        values = {"cpu": self.cpu, "gpu": self.gpu}
        optional = {"gpu_memory_mb": self.gpu_memory_mb, "gpu_capability": self.gpu_capability}
        return {**values, **{k: v for k, v in optional.items() if v is not None}}


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space; `from_dict(space.to_dict())` gives it back."""

    name: str
    base: dict[str, Any]  # the full flat TrialConfig of the fixed values
    params: tuple[Param, ...]
    objectives: dict[str, Direction]  # metric (or outcome column) -> direction, in order
    num_samples: int
    sampler: SamplerSettings  # its `sampler` and `sampler_options`, resolved and checked
    description: str = ""
    conditions: dict[str, Condition] = field(default_factory=dict)  # child param -> condition
    memory_budget_mb: float | None = None
    # Predicted seconds per update a point may take: a number, or a ratio to the baseline's
    # predicted update ("2x"; `search.screening.time_budget_s`).
    time_budget: float | str | None = None
    sampler_seed: int | None = 0
    # A point asked trains as the least-memory point that trains alike, and a training asked
    # before answers it (`search.exactness`). None: as `uses_exactness` says for the sampler.
    exactness: bool | None = None
    seeds_per_point: int = 1
    # Train the sweep's baseline (`search.baseline`): the base with every technique off, once per
    # seed, outside the sampler. A space file without the key trains it; a space pickled before
    # the field existed (a resumed older sweep, whose Tune run counted no such trials) does not.
    baseline: bool = False
    resources: Resources = field(default_factory=Resources)
    max_concurrent: int | None = None
    max_failures: int = 1
    # At most one Tune checkpoint per this many seconds of a trial (none with its final epoch: the
    # store row is then the trial's result). Epochs shorter than Tune's snapshot period would let a
    # killed driver's snapshot name a checkpoint that Tune has already deleted.
    resume_checkpoint_s: float = 10.0
    scheduler: SchedulerSettings | None = None  # None: every trial trains to its end
    # Event files and an MLflow server besides the store. Read from the sweep's folder while it
    # runs (`search.trackers`), so a space pickled before the field existed never needs it.
    tracking: TrackingSettings = field(default_factory=TrackingSettings)

    # ---- reading -------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        source: str | Path | Mapping[str, Any],
        num_samples: int | None = None,
        mlflow: str | None = None,
    ) -> SearchSpace:
        """Read and validate a YAML file, or the same values as a mapping; `num_samples`
        overrides the space's, `mlflow` (``--mlflow``) its tracking URI."""
        mlflow_uri(mlflow, "--mlflow")  # the flag first: one line, before the space's proofs
        raw = source
        if not isinstance(raw, Mapping):
            raw = _space_file(raw)
        if num_samples is not None:
            raw = {**raw, "num_samples": num_samples}
        space = cls.from_dict(raw)
        return space if mlflow is None else space.tracked(mlflow)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SearchSpace:
        """Each key by its own rules (`schema.SPACE_FIELDS`), then what it must be beside the others:
        first what the distributions alone decide (conditions; the sampler, its options and the
        points it can ask), then the base a valid config, what needs its fields (the scheduler,
        the objectives, the resources, the params), and last the costly proofs
        (`constraints.proofs`)."""
        values = read_section(raw, SPACE_FIELDS, "")
        distributions = tuple(values["params"].values())
        conditions = constraints.conditions(values["conditions"], distributions)
        sampler = sampler_settings(values["sampler"], values.pop("sampler_options"))
        num_samples = _num_samples(values["num_samples"], sampler, distributions, conditions)
        base = _base(values["base"])
        searched = {p.name for p in distributions}
        scheduler = scheduler_settings(values["scheduler"], base, searched)
        objectives = _objectives(values["objectives"], base["task"])
        resources = _resources(values["resources"], base)
        params = _params(values["params"], base)
        constraints.proofs(params, base, objectives)
        return cls(
            **{
                **values,
                "base": base,
                "params": params,
                "conditions": conditions,
                "objectives": objectives,
                "sampler": sampler,
                "num_samples": num_samples,
                "resources": resources,
                "scheduler": scheduler,
                "tracking": tracking_settings(values["tracking"]),
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain values, as `from_dict` reads them (what a sweep's folder keeps for resume)."""
        return {
            "name": self.name,
            "description": self.description,
            "base": dict(self.base),
            "params": {p.name: p.to_dict() for p in self.params},
            "conditions": {child: c.text for child, c in self.conditions.items()},
            "objectives": {name: str(way) for name, way in self.objectives.items()},
            "memory_budget_mb": self.memory_budget_mb,
            "time_budget": self.time_budget,
            "sampler": self.sampler.name,
            "sampler_options": dict(self.sampler.options),
            "sampler_seed": self.sampler_seed,
            "exactness": self.exactness,
            "baseline": self.baseline,
            "num_samples": self.num_samples,
            "seeds_per_point": self.seeds_per_point,
            "resources": self.resources.to_dict(),
            "max_concurrent": self.max_concurrent,
            "max_failures": self.max_failures,
            "resume_checkpoint_s": self.resume_checkpoint_s,
            "scheduler": None if self.scheduler is None else self.scheduler.to_dict(),
            "tracking": self.tracking.to_dict(),
        }

    def tracked(self, mlflow: str) -> SearchSpace:
        """The space with its trials logged to the MLflow tracking URI `mlflow` (``--mlflow``)."""
        tracking = tracking_settings(self.tracking.to_dict(), mlflow)
        return dataclasses.replace(self, tracking=tracking)

    # ---- using -----------------------------------------------------------------------------

    def sample(self, trial) -> dict[str, Any]:
        """Optuna's define-by-run space: one point as dotted keys (conditional params when due)."""
        chosen: dict[str, Any] = {}
        for param in self.params:
            condition = self.conditions.get(param.name)
            if condition is not None and not (
                condition.parent in chosen and condition.holds(chosen[condition.parent])
            ):
                continue
            chosen[param.name] = param.suggest(trial)
        return chosen

    def uses_exactness(self) -> bool:
        """Whether the searcher applies exactness: as the space sets it, else unless the sampler
        needs the grid (a grid trains every combination once). Resolved here, not when read, so
        that a space pickled before the field existed reads as absent."""
        if self.exactness is not None:
            return self.exactness
        return "grid" not in self.sampler.needs

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A space pickled before its sampler was resolved (Tune's files of older sweeps) holds
        the sampler's name and options apart: read as the file's two keys are."""
        if isinstance(state.get("sampler"), str):
            options = state.pop("sampler_options", {})
            state = {**state, "sampler": sampler_settings(state["sampler"], options)}
        self.__dict__.update(state)

    @property
    def planned_trials(self) -> int:
        """The trials the sweep runs at most: each point's seeds, and the baseline's."""
        return (self.num_samples + bool(self.baseline)) * self.seeds_per_point

    def trial_config(self, params: Mapping[str, Any]) -> TrialConfig:
        """The frozen config of one trial: the base with a point's values (and seed) over it."""
        return TrialConfig.from_dict({**self.base, **params})


def _space_file(path: str | Path) -> Mapping[str, Any]:
    loaded = load_file(path, "search-space file")
    if not isinstance(loaded, Mapping):
        raise ConfigError(
            str(path), "a YAML mapping with name, base, params, objectives is required"
        )
    return loaded


# ---- what a key must be beside the others --------------------------------------------------


def _num_samples(
    value: int | None, sampler: SamplerSettings, params: tuple[Param, ...], conditions: Mapping
) -> int:
    """The points to evaluate: given, or, for a sampler that needs the grid, at most the grid's
    size, all of it when absent."""
    if "grid" not in sampler.needs:
        require(value is not None, "num_samples", f"required for sampler {sampler.name}")
        return value
    for param in params:
        require(
            param.kind == "choice",
            f"params.{param.name}",
            f"type {param.kind} is not allowed with sampler {sampler.name}; allowed: choice",
        )
    require(
        not conditions,
        "conditions",
        f"not allowed with sampler {sampler.name} (every grid point sets every param)",
    )
    size = math.prod(len(p.values) for p in params)
    require(
        size <= GRID_LIMIT,
        "params",
        f"the grid has {size} points; at most {GRID_LIMIT} are allowed",
    )
    if value is None:
        return size
    require(value <= size, "num_samples", f"{value} is not allowed; the grid has {size} points")
    return value


def _config_message(error: ConfigError) -> str:
    return str(error).removeprefix(f"{error.field}: ")


def _base(raw: dict[str, Any]) -> dict[str, Any]:
    """The fixed values as a full flat config, built once to prove them valid."""
    for key in raw:
        if key.split(".")[0] == "seed":
            raise ConfigError("base.seed", f"not allowed; {_NOT_SEARCHABLE['seed']}")
    try:
        config = TrialConfig.from_dict(raw)
    except ConfigError as error:
        raise ConfigError(f"base.{error.field}", _config_message(error)) from None
    flat = config.to_flat()
    del flat["seed"]  # each trial's own, from seeds_per_point
    root = flat.get("data.root")
    if root is not None:  # workers run elsewhere: a relative folder means the launcher's
        flat["data.root"] = str(Path(root).expanduser().resolve())
    return flat


def _objectives(raw: dict[str, Any], task: str) -> dict[str, Direction]:
    """Metric -> direction; a metric the task reports or an outcome column (`outcome.column`:
    older names read as today's)."""
    ways = " | ".join(Direction)
    require(bool(raw), "objectives", f"at least one metric -> {ways} is required")
    known = (*TASKS.get(task).metric_names(), *SPACE_OBJECTIVES)
    objectives = {}
    for metric, direction in raw.items():
        name = column(str(metric)).removeprefix(METRIC)  # a task's metric by its own name
        require(
            name in known,
            f"objectives.{metric}",
            f"not a metric of {task}; allowed: {', '.join(known)}",
        )
        objectives[name] = Direction.of(direction, f"objectives.{metric}")
    return objectives


def _resources(values: dict[str, Any], base: Mapping[str, Any]) -> Resources:
    """The resources section against the base's device: Ray gives a trial a GPU only when asked."""
    gpu = values["gpu"]
    if gpu == "auto":
        require(
            values["gpu_memory_mb"] is not None,
            "resources.gpu_memory_mb",
            "required with gpu: auto (one GPU's memory in MB)",
        )
    if gpu == "auto" or gpu > 0:
        require(
            base["device"] != "cpu",
            "resources.gpu",
            f"{gpu!r} is not allowed with base device cpu; set base device to auto or cuda, or gpu: 0",
        )
    else:
        require(
            base["device"] != "cuda",
            "resources.gpu",
            f"{gpu!r} is not allowed with base device cuda: Ray would give the trial no GPU; "
            "ask for one (gpu > 0 or auto) or set base device to auto or cpu",
        )
    return Resources(**values)


def _params(specs: dict[str, Param], base: dict[str, Any]) -> tuple[Param, ...]:
    """The params, each a field of the base's config."""
    for name in specs:
        prefix = f"params.{name}"
        if name in _NOT_SEARCHABLE:
            raise ConfigError(prefix, f"not searchable; {_NOT_SEARCHABLE[name]}")
        if name not in base:
            fields = [k for k in base if k not in _NOT_SEARCHABLE]
            raise ConfigError(
                prefix,
                f"not a field of the {base['task']} TrialConfig; allowed: {', '.join(fields)}",
            )
    return tuple(specs.values())
