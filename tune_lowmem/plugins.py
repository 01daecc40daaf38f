"""The registry of plug-ins: tasks, techniques and samplers, each kind a `Registry` with one
rule, as timm's registry maps model names to builders.

A plug-in is named in three ways, tried in this order: a built-in name (its kind's table, one
row each); a name an installed package registers under its kind's entry-point group
(``[project.entry-points."tune_lowmem.tasks"] my-task = "my_pkg.tasks:MyTask"``; one that a
built-in already bears is not seen); or ``package.module:attribute``, imported from the working
directory or an installed package. A name that names nothing, and a class not of its kind's base,
is a `ConfigError` on the field that named it, in one wording (`Registry.get`).

- `TASKS`: `tasks.base.Task` subclasses, named by a config's ``task``.
- `TECHNIQUES`: `techniques.base.Technique` subclasses, whose `SETTINGS` are their fields of
  `TrialConfig` (docs/plugins.md). A trial binds every registered one its config enables, in
  the table's order, then plug-ins by name: checkpointing and simulated microbatching change the
  model's forward, sparsity masks the fp32 weights, and precision casts the storage last; the
  Adam state format sets how the optimizer keeps its moments before the fused step, last too,
  takes over the optimizer's updates. One of them runs the step (a `techniques.base.StepRunner`),
  the one a config's ``step_runner`` names (`step_runner`).
- `SAMPLERS`: Optuna sampler classes, named by a space's ``sampler`` (`sampler_settings`
  resolves one with its options); each declares what it needs (`search.samplers` builds it).

What is installed is read from the import path each time the path changes, so a package placed
on ``sys.path`` is seen without a restart. A plug-in's class is imported only when first asked
for, and this module imports nothing of the project's but its errors, so the config layer (which
must not pull in torch) can ask it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .validation import ConfigError


def entry_points(group: str) -> dict[str, str]:
    """Entry-point name -> ``module:attribute`` of the installed packages in `group`."""
    return dict(_entry_points(group, tuple(sys.path)))


@functools.cache
def _entry_points(group: str, path: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    found = importlib.metadata.entry_points(group=group)
    return tuple(sorted({entry.name: entry.value for entry in found}.items()))


def load(target: str, field_name: str) -> object:
    """The attribute ``package.module:attribute`` names, imported from the working directory or
    an installed package; `ConfigError` on `field_name` when it cannot be."""
    module_name, _, attribute = target.partition(":")
    if os.getcwd() not in sys.path:  # the console script's path lacks it; `python -m` has it
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(field_name, f"{target!r} cannot be imported: {error}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(field_name, f"{target!r}: {module_name} has no {attribute!r}") from None


def derives_from(value: object, base: str) -> bool:
    """Whether `value` is a class deriving from the class ``module:Name`` `base` names. A class
    deriving from it has imported its module, so none is imported here (a plug-in's base imports
    torch; the config layer does not)."""
    module, _, name = base.partition(":")
    cls = getattr(sys.modules.get(module), name, None)
    return isinstance(value, type) and isinstance(cls, type) and issubclass(value, cls)


@dataclass(frozen=True, eq=False)
class Registry:
    """One kind of plug-in: its built-in table, its entry-point group, the base its classes
    derive from, and the field that names one in a config or a space."""

    field: str
    group: str
    base: str  # ``module:Class``
    builtin: Mapping[str, str]  # name -> ``module:attribute``, one row per built-in

    def names(self) -> list[str]:
        """Built-in names, then those of installed packages' entry points."""
        plugins = entry_points(self.group)
        return [*self.builtin, *sorted(set(plugins) - set(self.builtin))]

    def get(self, name: object, field_name: str | None = None) -> type:
        """The class `name` names; `ConfigError` on `field_name` (the kind's field unless
        given) when it names none, or something not of the kind's base."""
        field_name = field_name or self.field
        if not isinstance(name, str) or not name:
            raise ConfigError(field_name, self.not_allowed(name))
        return _lookup(self, name, field_name, tuple(sys.path))

    def registered(self) -> tuple[type, ...]:
        """Every registered class, in `names` order."""
        return _registered(self, tuple(sys.path))

    def not_allowed(self, name: object) -> str:
        """The one wording of a name this kind has no plug-in of."""
        allowed = ", ".join(self.names())
        return f"{name!r} is not allowed; allowed: {allowed}, or package.module:attribute"


_NAMED_MODULES: set[str] = set()  # the modules plug-ins were named in as module:attribute


@functools.cache
def _lookup(registry: Registry, name: str, field_name: str, path: tuple[str, ...]) -> type:
    target = registry.builtin.get(name) or entry_points(registry.group).get(name)
    if target is None and ":" not in name:
        raise ConfigError(field_name, registry.not_allowed(name))
    found = load(target or name, field_name)
    if not derives_from(found, registry.base):
        base = registry.base.replace(":", ".")
        raise ConfigError(field_name, f"{name!r} is {found!r}, not a subclass of {base}")
    if target is None:
        _NAMED_MODULES.add(name.partition(":")[0])
    return found


@functools.cache
def _registered(registry: Registry, path: tuple[str, ...]) -> tuple[type, ...]:
    return tuple(registry.get(name) for name in registry.names())


def plugins_folder() -> str | None:
    """The working directory, when a plug-in this process named as ``module:attribute`` was
    imported from it (a space's task or step runner, read before its sweep starts): what the
    sweep's workers must have on their path to import it; else None."""
    cwd = os.getcwd()
    files = [getattr(sys.modules.get(module), "__file__", None) for module in _NAMED_MODULES]
    inside = [f for f in files if f is not None and os.path.abspath(f).startswith(cwd + os.sep)]
    return cwd if inside else None


# ---- tasks -----------------------------------------------------------------------------------

DEFAULT_TASK = "wrn-cifar10"
TASKS = Registry(
    field="task",
    group="tune_lowmem.tasks",
    base="tune_lowmem.tasks.base:Task",
    builtin={
        "wrn-cifar10": "tune_lowmem.tasks.classification:WideResNetCifar10",
        "tv-cifar10": "tune_lowmem.tasks.torchvision_cifar10:TorchvisionCifar10",
        "dct-iwslt14": "tune_lowmem.tasks.translation:DynamicConvIwslt14",
    },
)


# ---- techniques ------------------------------------------------------------------------------

# name -> its class, and its SETTINGS declared apart from its torch code, so that the config and
# the store read them without torch (a plug-in's are its class's)
BUILTIN_TECHNIQUES = {
    "checkpoint": (
        "tune_lowmem.techniques.checkpointing:Checkpointing",
        "tune_lowmem.techniques.settings:CHECKPOINT",
    ),
    "microbatch": (
        "tune_lowmem.techniques.microbatch:Microbatching",
        "tune_lowmem.techniques.settings:MICROBATCH",
    ),
    "sparsity": (
        "tune_lowmem.techniques.sparsity:Sparsity",
        "tune_lowmem.techniques.sparsity_config:SETTINGS",
    ),
    "precision": (
        "tune_lowmem.techniques.precision:Precision",
        "tune_lowmem.techniques.settings:PRECISION",
    ),
    "adam_state": (
        "tune_lowmem.techniques.adam_state:AdamState",
        "tune_lowmem.techniques.settings:ADAM_STATE",
    ),
    "fused_step": (
        "tune_lowmem.techniques.fused_step:FusedStep",
        "tune_lowmem.techniques.settings:FUSED_STEP",
    ),
    "cuda_workspace": (
        "tune_lowmem.techniques.cuda_workspace:CudaWorkspace",
        "tune_lowmem.techniques.settings:CUDA_WORKSPACE",
    ),
}
TECHNIQUES = Registry(
    field="techniques",
    group="tune_lowmem.techniques",
    base="tune_lowmem.techniques.base:Technique",
    builtin={name: technique for name, (technique, _) in BUILTIN_TECHNIQUES.items()},
)
DEFAULT_STEP_RUNNER = "precision"  # the numeric format's step


def techniques(config: Any = None) -> tuple[type, ...]:
    """Every registered technique class, in the order a trial applies them; with a config, and
    the step runner it names as ``package.module:attribute`` last, which must then declare no
    settings (a registered one's are config fields)."""
    registered = TECHNIQUES.registered()
    if config is None:
        return registered
    named = TECHNIQUES.get(config.step_runner, "step_runner")
    if named in registered:
        return registered
    own = [s.name for s in getattr(named, "SETTINGS", ())]
    if own:
        raise ConfigError(
            "step_runner",
            f"{config.step_runner!r} declares settings ({', '.join(own)}), which are config "
            "fields only of a technique an entry point registers",
        )
    return (*registered, named)


def step_runner(config: Any) -> type:
    """The technique that runs every step of a trial of `config` (`techniques.base.StepRunner`):
    the one of `techniques(config)` that runs the step and that the config enables;
    `ConfigError` on ``step_runner`` when none or two do."""
    runners = [t for t in techniques(config) if t.RUNS_STEP and t.enabled(config)]
    if len(runners) > 1:
        names = " and ".join(t.NAME for t in runners)
        raise ConfigError("step_runner", f"{names} both run the step; one is allowed")
    if not runners:
        allowed = [t.NAME for t in TECHNIQUES.registered() if t.RUNS_STEP]
        raise ConfigError(
            "step_runner",
            f"{config.step_runner!r} runs no step; allowed: {', '.join(allowed)}, "
            "or package.module:attribute",
        )
    return runners[0]


def technique_settings() -> tuple[Any, ...]:
    """Every technique's settings (`techniques.setting.Setting`), in the registry's order: the
    technique fields of TrialConfig. The built-in ones' without importing torch."""
    return _technique_settings(tuple(sys.path))


@functools.cache
def _technique_settings(path: tuple[str, ...]) -> tuple[Any, ...]:
    declarations = {name: load(own, "techniques") for name, (_, own) in BUILTIN_TECHNIQUES.items()}
    for name in TECHNIQUES.names():
        if name not in declarations:  # a plug-in's, from its class
            declarations[name] = TECHNIQUES.get(name).SETTINGS
    owners: dict[str, str] = {}
    for name, settings in declarations.items():
        for setting in settings:
            if setting.name in owners:
                raise ConfigError(
                    setting.name,
                    f"declared by both techniques {owners[setting.name]} and {name}; "
                    "one owner is required",
                )
            owners[setting.name] = name
    return tuple(s for settings in declarations.values() for s in settings)


# ---- samplers --------------------------------------------------------------------------------

DEFAULT_SAMPLER = "nsga2"
SAMPLERS = Registry(
    field="sampler",
    group="tune_lowmem.samplers",
    base="optuna.samplers:BaseSampler",
    builtin={
        "nsga2": "optuna.samplers:NSGAIISampler",
        "tpe": "optuna.samplers:TPESampler",
        "gp": "optuna.samplers:GPSampler",
        "random": "optuna.samplers:RandomSampler",
        "grid": "tune_lowmem.search.samplers:GridSampler",
        # the project's own: accuracy learned, memory asked of the profiler
        # (tune_lowmem/search/samplers/known_memory.py)
        "known-memory": "tune_lowmem.search.samplers.known_memory:KnownMemorySampler",
        # the same with BoTorch's model and qLogNEHVI (the `botorch` extra; tune_lowmem/search/samplers/qlognehvi.py)
        "qlognehvi": "tune_lowmem.search.samplers.qlognehvi:QLogNEHVISampler",
    },
)
