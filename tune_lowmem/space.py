"""A search space: what a sweep varies, what it optimises, and how it runs, read from YAML.

The whole file is checked before anything starts (no folder created, no Ray started): every
key, every range, every choice value built into a real `TrialConfig`, every objective a metric
the trial reports, every searched rewiring knob at points that rewire. A mistake raises
`ConfigError` naming the field, e.g.
``params.sparsity.density.low: 0 is not allowed; loguniform needs low > 0``.

The schema (see search_spaces/quickstart.yaml for a full example)::

    name: quickstart                   # the sweep's name in the store (--name overrides it)
    description: ...                   # optional, free text
    base: {task: wrn-cifar10, model: {depth: 10}, schedule.epochs: 3}   # fixed values, nested or dotted
    params:                            # dotted TrialConfig field -> distribution, sampled in this order
      precision: {type: choice, values: [fp32, bf16]}
      schedule.lr_multiplier: {type: loguniform, low: 0.25, high: 4}
      sparsity.density: {type: uniform, low: 0.1, high: 1.0, step: 0.1}
      model.width: {type: int, low: 1, high: 4}
    conditions:                        # a param is sampled only when its condition holds,
      sparsity.period_multiplier: "sparsity.density < 1"   # else it keeps its base value
    objectives: {val_accuracy: maximize, memory_total_mb: minimize}
    memory_budget_mb: 50               # optional: points predicted above it are never trained
    sampler: nsga2                     # nsga2 | tpe | gp | random | grid (grid: choice params only)
    sampler_options: {population_size: 8}   # optional keyword arguments of the Optuna sampler
    sampler_seed: 0
    num_samples: 12                    # points to evaluate (grid: at most the grid's size, default all)
    seeds_per_point: 1                 # each feasible point trains with seeds 0..k-1
    resources: {cpu: 1, gpu: 0}        # per trial; gpu: auto sizes a GPU share from predicted memory
    max_concurrent: 2                  # optional cap on trials running at once
    max_failures: 1                    # retries of a trial whose worker died (not of a raised error)
    resume_checkpoint_s: 10            # training seconds between a trial's Tune checkpoints (0: every epoch)
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .config import ConfigError, TrialConfig
from .store import check_name

SAMPLERS = ("nsga2", "tpe", "gp", "random", "grid")
PARAM_TYPES = ("uniform", "loguniform", "int", "choice")
DIRECTIONS = ("maximize", "minimize")

# What a trial reports, by task: an objective must be one of these.
TRAINING_METRICS = {
    "wrn-cifar10": ("val_accuracy", "val_loss", "test_accuracy", "test_loss", "train_loss"),
    "dct-iwslt14": ("val_bleu", "test_bleu", "val_loss", "test_loss", "val_nll_loss", "test_nll_loss",
                    "val_ppl", "test_ppl", "train_loss"),  # BLEU: final epoch only
}
MEMORY_PARTS = ("model", "optimizer", "activation", "total")
# The profiler's prediction (known before training) and the measured step (known once it starts).
PREDICTED_METRICS = (*(f"memory_{part}_mb" for part in MEMORY_PARTS), "flops_per_step")
MEASURED_METRICS = tuple(f"measured_{part}_mb" for part in MEMORY_PARTS)
# The worst value an objective can take, for points that never train; others get +-1e9.
BOUNDS = {"val_accuracy": (0.0, 1.0), "test_accuracy": (0.0, 1.0), "val_bleu": (0.0, 100.0),
          "test_bleu": (0.0, 100.0)}
UNKNOWN_WORST = 1e9
CONSTRAINT = "memory_over_budget_mb"  # Optuna constraint: predicted MB - budget, > 0 is infeasible

_TOP_KEYS = ("name", "description", "base", "params", "conditions", "objectives", "memory_budget_mb",
             "sampler", "sampler_options", "sampler_seed", "num_samples", "seeds_per_point",
             "resources", "max_concurrent", "max_failures", "resume_checkpoint_s")
_PARAM_KEYS = {"uniform": ("low", "high", "step"), "loguniform": ("low", "high"),
               "int": ("low", "high", "step"), "choice": ("values",)}
_RESOURCE_KEYS = ("cpu", "gpu", "gpu_memory_mb")
_NOT_SEARCHABLE = {
    "task": "the task fixes the model and schedule sections; set it in base",
    "seed": "seeds come from seeds_per_point (0..k-1)",
}
_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "<": operator.lt, ">": operator.gt, "not in": lambda a, b: a not in b, "in": lambda a, b: a in b,
}
_CONDITION = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|==|!=|<|>|not in|in)\s*(.+?)\s*$")
_GRID_LIMIT = 1_000_000
_PROBE_COMBINATIONS = 256  # other params' probe values tried before a value is declared impossible


def store_column(metric: str) -> str:
    """The column of the store's trials table that holds a reported metric."""
    if metric in PREDICTED_METRICS:
        return "memory.flops_per_step" if metric == "flops_per_step" else f"memory.predicted_{metric[7:]}"
    if metric in MEASURED_METRICS:
        return f"memory.{metric}"
    return f"metric.{metric}"


def worst_value(metric: str, direction: str) -> float:
    """A value every real result beats: what a never-trained point tells the sampler."""
    low, high = BOUNDS.get(metric, (-UNKNOWN_WORST, UNKNOWN_WORST))
    return low if direction == "maximize" else high


@dataclass(frozen=True)
class Param:
    """One searched field and its distribution."""

    name: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    values: tuple = ()

    def probes(self) -> list[Any]:
        """Values that must each give a valid config: every choice, every integer (few), the ends."""
        if self.kind == "choice":
            return list(self.values)
        if self.kind == "int":
            grid = range(self.low, self.high + 1, self.step or 1)
            return list(grid) if len(grid) <= 64 else [self.low, self.high]
        return [float(self.low), float(self.high)]

    def suggest(self, trial) -> Any:
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.values))
        if self.kind == "int":
            return trial.suggest_int(self.name, self.low, self.high, step=self.step or 1)
        return trial.suggest_float(self.name, self.low, self.high, step=self.step,
                                   log=self.kind == "loguniform")

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "choice":
            return {"type": "choice", "values": list(self.values)}
        spec = {"type": self.kind, "low": self.low, "high": self.high}
        return spec if self.step is None else {**spec, "step": self.step}


@dataclass(frozen=True)
class Condition:
    """``child`` is sampled only when ``parent <op> value`` holds for the sampled parent."""

    parent: str
    op: str
    value: Any
    text: str

    def holds(self, parent_value: Any) -> bool:
        return bool(_OPERATORS[self.op](parent_value, self.value))


@dataclass(frozen=True)
class Resources:
    """What one trial asks Ray for."""

    cpu: int = 1
    gpu: float | str = 0  # a share of one GPU, a whole number of GPUs, or "auto"
    gpu_memory_mb: float | None = None  # one GPU's memory, to size the "auto" share

    def gpu_share(self, predicted_total_mb: float) -> float:
        """The GPU request: fixed, or the predicted memory (with room for the CUDA context and
        the allocator's slack, which the prediction excludes) as a share of one card."""
        if self.gpu != "auto":
            return float(self.gpu)
        needed = predicted_total_mb * 1.25 + 600.0
        return min(1.0, math.ceil(100 * needed / self.gpu_memory_mb) / 100)

    def to_dict(self) -> dict[str, Any]:
        values = {"cpu": self.cpu, "gpu": self.gpu}
        return values if self.gpu_memory_mb is None else {**values, "gpu_memory_mb": self.gpu_memory_mb}


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space; `from_dict(space.to_dict())` gives it back."""

    name: str
    base: dict[str, Any]  # the full flat TrialConfig of the fixed values
    params: tuple[Param, ...]
    objectives: dict[str, str]  # metric -> maximize | minimize, in order
    num_samples: int
    description: str = ""
    conditions: dict[str, Condition] = field(default_factory=dict)  # child param -> condition
    memory_budget_mb: float | None = None
    sampler: str = "nsga2"
    sampler_options: dict[str, Any] = field(default_factory=dict)
    sampler_seed: int | None = 0
    seeds_per_point: int = 1
    resources: Resources = field(default_factory=Resources)
    max_concurrent: int | None = None
    max_failures: int = 1
    # At most one Tune checkpoint per this many seconds of a trial (none with its final epoch: the
    # store row is then the trial's result). Epochs shorter than Tune's snapshot period would let a
    # killed driver's snapshot name a checkpoint that Tune has already deleted.
    resume_checkpoint_s: float = 10.0

    # ---- reading -------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, num_samples: int | None = None) -> SearchSpace:
        """Read and validate a YAML file; `num_samples` overrides the file's."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(str(path), "no such search-space file")
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as error:
            raise ConfigError(str(path), f"not valid YAML: {' '.join(str(error).split())}") from None
        if not isinstance(loaded, Mapping):
            raise ConfigError(str(path), "a YAML mapping with name, base, params, objectives is required")
        if num_samples is not None:
            loaded = {**loaded, "num_samples": num_samples}
        return cls.from_dict(loaded)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SearchSpace:
        _known_keys(raw, _TOP_KEYS, "")
        for key in ("name", "base", "params", "objectives"):
            if key not in raw:
                raise ConfigError(key, "required")
        name = check_name(raw["name"], "name")
        description = raw.get("description") or ""
        _require(isinstance(description, str), "description", f"{description!r} is not allowed; text is required")
        base = _base(raw["base"])
        task = base["task"]
        params = _params(raw["params"], base)
        conditions = _conditions(raw.get("conditions") or {}, params)
        objectives = _objectives(raw["objectives"], task)
        sampler = raw.get("sampler", "nsga2")
        _require(sampler in SAMPLERS, "sampler", f"{sampler!r} is not allowed; allowed: {', '.join(SAMPLERS)}")
        space = cls(
            name=name,
            description=description,
            base=base,
            params=params,
            conditions=conditions,
            objectives=objectives,
            memory_budget_mb=_optional_positive(raw.get("memory_budget_mb"), "memory_budget_mb"),
            sampler=sampler,
            sampler_options=_mapping(raw.get("sampler_options") or {}, "sampler_options"),
            sampler_seed=_seed(raw.get("sampler_seed", 0)),
            num_samples=_num_samples(raw.get("num_samples"), sampler, params, conditions),
            seeds_per_point=_positive_int(raw.get("seeds_per_point", 1), "seeds_per_point"),
            resources=_resources(raw.get("resources") or {}, base),
            max_concurrent=_optional_positive_int(raw.get("max_concurrent"), "max_concurrent"),
            max_failures=_nonnegative_int(raw.get("max_failures", 1), "max_failures"),
            resume_checkpoint_s=_nonnegative(raw.get("resume_checkpoint_s", 10.0), "resume_checkpoint_s"),
        )
        space.build_sampler()  # the sampler's own checks (options, dependencies) now, not mid-sweep
        return space

    def to_dict(self) -> dict[str, Any]:
        """Plain values, as `from_dict` reads them (what a sweep's folder keeps for resume)."""
        return {
            "name": self.name,
            "description": self.description,
            "base": dict(self.base),
            "params": {p.name: p.to_dict() for p in self.params},
            "conditions": {child: c.text for child, c in self.conditions.items()},
            "objectives": dict(self.objectives),
            "memory_budget_mb": self.memory_budget_mb,
            "sampler": self.sampler,
            "sampler_options": dict(self.sampler_options),
            "sampler_seed": self.sampler_seed,
            "num_samples": self.num_samples,
            "seeds_per_point": self.seeds_per_point,
            "resources": self.resources.to_dict(),
            "max_concurrent": self.max_concurrent,
            "max_failures": self.max_failures,
            "resume_checkpoint_s": self.resume_checkpoint_s,
        }

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

    def trial_config(self, params: Mapping[str, Any]) -> TrialConfig:
        """The frozen config of one trial: the base with a point's values (and seed) over it."""
        return TrialConfig.from_dict({**self.base, **params})

    def build_sampler(self, seed_offset: int = 0):
        """The Optuna sampler. With a budget, nsga2, tpe and gp read each trial's CONSTRAINT,
        which the searcher sets when it screens the point (Optuna >= 5: `Trial.set_constraint`).
        A resumed sweep passes the number of points already asked as `seed_offset`, so that its
        rebuilt sampler does not draw the points of the sweep's start again."""
        import optuna

        options = dict(self.sampler_options)
        seed = None if self.sampler_seed is None else self.sampler_seed + seed_offset
        makers = {
            "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed, **options),
            "tpe": lambda: optuna.samplers.TPESampler(seed=seed, **options),
            "gp": lambda: optuna.samplers.GPSampler(seed=seed, **options),
            "random": lambda: optuna.samplers.RandomSampler(seed=seed, **options),
            "grid": lambda: optuna.samplers.GridSampler(
                {p.name: list(p.values) for p in self.params}, seed=seed, **options
            ),
        }
        try:
            return makers[self.sampler]()
        except (TypeError, ValueError) as error:
            raise ConfigError("sampler_options", f"{error}; see optuna.samplers for {self.sampler}'s options") from None


# ---- validation helpers ---------------------------------------------------------------------


def _require(ok: bool, field_name: str, message: str) -> None:
    if not ok:
        raise ConfigError(field_name, message)


def _known_keys(mapping: Mapping[str, Any], allowed: Sequence[str], prefix: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ConfigError(f"{prefix}{key}", f"unknown key; allowed: {', '.join(allowed)}")


def _mapping(value: Any, field_name: str) -> dict[str, Any]:
    _require(isinstance(value, Mapping), field_name, f"{value!r} is not allowed; a mapping is required")
    return dict(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(value: Any, field_name: str) -> int:
    _require(_is_int(value) and value > 0, field_name, f"{value!r} is not allowed; a positive integer is required")
    return value


def _optional_positive_int(value: Any, field_name: str) -> int | None:
    return None if value is None else _positive_int(value, field_name)


def _nonnegative_int(value: Any, field_name: str) -> int:
    _require(_is_int(value) and value >= 0, field_name, f"{value!r} is not allowed; an integer >= 0 is required")
    return value


def _optional_positive(value: Any, field_name: str) -> float | None:
    if value is None:
        return None
    _require(_is_number(value) and value > 0, field_name, f"{value!r} is not allowed; a positive number (MB) is required")
    return float(value)


def _nonnegative(value: Any, field_name: str) -> float:
    _require(_is_number(value) and value >= 0, field_name, f"{value!r} is not allowed; a number >= 0 is required")
    return float(value)


def _seed(value: Any) -> int | None:
    _require(value is None or (_is_int(value) and value >= 0), "sampler_seed",
             f"{value!r} is not allowed; an integer >= 0 or null is required")
    return value


def _config_message(error: ConfigError) -> str:
    return str(error).removeprefix(f"{error.field}: ")


def _base(raw: Any) -> dict[str, Any]:
    """The fixed values as a full flat config, built once to prove them valid."""
    raw = _mapping(raw, "base")
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


def _params(raw: Any, base: dict[str, Any]) -> tuple[Param, ...]:
    raw = _mapping(raw, "params")
    _require(bool(raw), "params", "at least one searched field is required")
    params = []
    for name, spec in raw.items():
        prefix = f"params.{name}"
        if name in _NOT_SEARCHABLE:
            raise ConfigError(prefix, f"not searchable; {_NOT_SEARCHABLE[name]}")
        if name not in base:
            fields = [k for k in base if k not in _NOT_SEARCHABLE]
            raise ConfigError(prefix, f"not a field of the {base['task']} TrialConfig; allowed: {', '.join(fields)}")
        params.append(_param(name, _mapping(spec, prefix), prefix))
    _probe(params, base)
    _check_rewiring(params, base)
    return tuple(params)


def _param(name: str, spec: dict[str, Any], prefix: str) -> Param:
    kind = spec.get("type")
    _require(kind in PARAM_TYPES, f"{prefix}.type", f"{kind!r} is not allowed; allowed: {', '.join(PARAM_TYPES)}")
    _known_keys({k: v for k, v in spec.items() if k != "type"}, _PARAM_KEYS[kind], f"{prefix}.")
    if kind == "choice":
        values = spec.get("values")
        _require(isinstance(values, list) and len(values) > 0, f"{prefix}.values",
                 f"{values!r} is not allowed; a non-empty list is required")
        for value in values:
            _require(value is None or isinstance(value, (str, int, float, bool)), f"{prefix}.values",
                     f"{value!r} is not allowed; numbers, text, true/false or null are required")
        _require(len(set(map(repr, values))) == len(values), f"{prefix}.values", f"{values!r} repeats a value")
        return Param(name, kind, values=tuple(values))
    for key in ("low", "high"):
        _require(key in spec, f"{prefix}.{key}", f"required for type {kind}")
    low, high, step = spec["low"], spec["high"], spec.get("step")
    check = _is_int if kind == "int" else _is_number
    what = "an integer" if kind == "int" else "a finite number"
    for key, value in (("low", low), ("high", high)):
        _require(check(value), f"{prefix}.{key}", f"{value!r} is not allowed; {what} is required")
    _require(low < high, f"{prefix}.high", f"{high!r} is not allowed; an empty range: high > low ({low!r}) is required")
    if kind == "loguniform":
        _require(low > 0, f"{prefix}.low", f"{low!r} is not allowed; loguniform needs low > 0")
    if step is not None:
        _require(check(step) and step > 0, f"{prefix}.step", f"{step!r} is not allowed; {what} > 0 is required")
        count = (high - low) / step
        _require(abs(count - round(count)) < 1e-9, f"{prefix}.step",
                 f"{step!r} is not allowed; high - low ({high - low!r}) must be a multiple of it")
    return Param(name, kind, low=low, high=high, step=step)


def _valid(values: Mapping[str, Any]) -> ConfigError | None:
    try:
        TrialConfig.from_dict(values)
    except ConfigError as error:
        return error
    return None


def _probe(params: list[Param], base: dict[str, Any]) -> None:
    """Each probe value must give a valid config, alone over the base or with some values of
    the other params (those valid alone: one other param's first, then combinations), so that
    no value can only ever fail."""
    alone = {p.name: [v for v in p.probes() if _valid({**base, p.name: v}) is None] for p in params}
    for param in params:
        for value in param.probes():
            if value in alone[param.name]:
                continue
            others = [[(o.name, v) for v in alone[o.name]] for o in params if o is not param]
            pairs = ([pair] for values in others for pair in values)
            combos = itertools.chain(pairs, itertools.islice(itertools.product(*others), _PROBE_COMBINATIONS))
            if not any(_valid({**base, **dict(c), param.name: value}) is None for c in combos):
                error = _valid({**base, param.name: value})
                raise ConfigError(f"params.{param.name}", f"{value!r} gives no valid config: {error}")


def _check_rewiring(params: list[Param], base: dict[str, Any]) -> None:
    """Searched rewiring knobs do nothing at a point that never rewires: each combination of the
    ends and choices of what shapes the rewiring schedule must rewire at least once if sparse."""
    from .techniques.rewiring import REWIRING_KNOBS, SCHEDULE_SHAPERS, planned_run, rewiring_updates

    knobs = [p.name for p in params if p.name in REWIRING_KNOBS]
    if not knobs:
        return
    shapers = [[(p.name, v) for v in p.probes()] for p in params if p.name in SCHEDULE_SHAPERS]
    for combo in itertools.islice(itertools.product(*shapers), _PROBE_COMBINATIONS):
        values = {**base, **dict(combo)}
        if _valid(values) is not None:
            continue
        config = TrialConfig.from_dict(values)
        if not config.sparsity.enabled or config.sparsity.rewiring == "static":
            continue
        run = planned_run(config)
        if next(rewiring_updates(config.sparsity, run), None) is None:
            point = ", ".join(f"{k}={v}" for k, v in combo)
            raise ConfigError(
                f"params.{knobs[0]}",
                f"the point {point} rewires 0 times in its {run.updates} updates "
                f"(sparsity.schedule_units {config.sparsity.schedule_units}), so searching "
                f"{', '.join(knobs)} does nothing; allowed: points that rewire (schedule_units "
                "relative, a lower period_multiplier or a longer run)",
            )


def _conditions(raw: Any, params: tuple[Param, ...]) -> dict[str, Condition]:
    raw = _mapping(raw, "conditions")
    order = {p.name: i for i, p in enumerate(params)}
    by_name = {p.name: p for p in params}
    conditions = {}
    for child, text in raw.items():
        prefix = f"conditions.{child}"
        _require(child in order, prefix, f"not a searched param; params: {', '.join(order)}")
        match = _CONDITION.match(text) if isinstance(text, str) else None
        _require(match is not None, prefix,
                 f"{text!r} is not allowed; 'PARAM OP VALUE' with OP one of {', '.join(_OPERATORS)} is required")
        parent, op, value_text = match.groups()
        _require(parent in order and order[parent] < order[child], prefix,
                 f"{parent!r} is not allowed; a param listed before {child} in params is required")
        condition = Condition(parent, op, yaml.safe_load(value_text), text)
        probes = by_name[parent].probes()
        try:
            truths = [condition.holds(v) for v in probes]
        except TypeError:
            raise ConfigError(prefix, f"{text!r} cannot compare {parent}'s values {probes!r} with {condition.value!r}") from None
        if by_name[parent].kind == "choice":
            _require(any(truths), prefix, f"{text!r} holds for none of {parent}'s values {probes!r}")
        conditions[child] = condition
    return conditions


def _objectives(raw: Any, task: str) -> dict[str, str]:
    raw = _mapping(raw, "objectives")
    _require(bool(raw), "objectives", "at least one metric -> maximize | minimize is required")
    known = (*TRAINING_METRICS[task], *PREDICTED_METRICS, *MEASURED_METRICS)
    for metric, direction in raw.items():
        _require(metric in known, f"objectives.{metric}", f"not a metric of {task}; allowed: {', '.join(known)}")
        _require(direction in DIRECTIONS, f"objectives.{metric}",
                 f"{direction!r} is not allowed; allowed: {', '.join(DIRECTIONS)}")
    return dict(raw)


def _num_samples(value: Any, sampler: str, params: tuple[Param, ...], conditions: Mapping) -> int:
    if sampler != "grid":
        _require(value is not None, "num_samples", f"required for sampler {sampler}")
        return _positive_int(value, "num_samples")
    for param in params:
        _require(param.kind == "choice", f"params.{param.name}",
                 f"type {param.kind} is not allowed with sampler grid; allowed: choice")
    _require(not conditions, "conditions", "not allowed with sampler grid (every grid point sets every param)")
    size = math.prod(len(p.values) for p in params)
    _require(size <= _GRID_LIMIT, "params", f"the grid has {size} points; at most {_GRID_LIMIT} are allowed")
    if value is None:
        return size
    _positive_int(value, "num_samples")
    _require(value <= size, "num_samples", f"{value} is not allowed; the grid has {size} points")
    return value


def _resources(raw: Any, base: Mapping[str, Any]) -> Resources:
    raw = _mapping(raw, "resources")
    _known_keys(raw, _RESOURCE_KEYS, "resources.")
    cpu = _positive_int(raw.get("cpu", 1), "resources.cpu")
    gpu = raw.get("gpu", 0)
    memory = raw.get("gpu_memory_mb")
    if gpu == "auto":
        _require(memory is not None, "resources.gpu_memory_mb", "required with gpu: auto (one GPU's memory in MB)")
    else:
        _require(_is_number(gpu) and gpu >= 0 and (gpu < 1 or float(gpu).is_integer()), "resources.gpu",
                 f"{gpu!r} is not allowed; auto, a share below 1, or a whole number of GPUs is required")
    if memory is not None:
        _require(_is_number(memory) and memory > 0, "resources.gpu_memory_mb",
                 f"{memory!r} is not allowed; a positive number (MB) is required")
    if gpu == "auto" or gpu > 0:
        _require(base["device"] != "cpu", "resources.gpu",
                 f"{gpu!r} is not allowed with base device cpu; set base device to auto or cuda, or gpu: 0")
    return Resources(cpu=cpu, gpu=gpu, gpu_memory_mb=None if memory is None else float(memory))
