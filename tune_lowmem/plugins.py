"""The registry of plug-ins, tasks, techniques and samplers: a built-in table, then installed
packages' entry points, as timm's registry maps model names to builders.

A task is named in three ways, tried in this order: a built-in name (`BUILTIN_TASKS`); a name
another installed package registers under the ``tune_lowmem.tasks`` entry-point group
(``[project.entry-points."tune_lowmem.tasks"] my-task = "my_pkg.tasks:MyTask"``); or
``package.module:attribute``, imported from the working directory or an installed package.

The techniques a trial may use are the built-in ones, then every one that installed packages
register under the ``tune_lowmem.techniques`` group, each a `techniques.base.Technique` subclass
whose `SETTINGS` are its fields of `TrialConfig` (docs/plugins.md). Their order is the one a
trial applies them to its fp32 model: checkpointing and simulated microbatching change the
model's forward, sparsity masks the fp32 weights, and precision casts the storage last; the Adam
state format sets how the optimizer keeps its moments before the fused step, last too, takes
over the optimizer's updates; plug-ins follow, by name.

A space's sampler is named the same way as a technique: a built-in name (`SAMPLERS`:
Optuna's samplers and the project's own), then those installed packages register under the
``tune_lowmem.samplers`` group, each an Optuna sampler class that declares what it needs
(`search.samplers`, which builds it).

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


def subclass_of(value: object, base: str) -> bool:
    """Whether `value` is a class deriving from the class ``module:Name`` `base` names, known
    without importing that module (a plug-in's base imports torch; the config layer does not)."""
    module, _, name = base.partition(":")
    return isinstance(value, type) and any(
        c.__module__ == module and c.__qualname__ == name for c in value.__mro__
    )


# ---- tasks -----------------------------------------------------------------------------------

DEFAULT_TASK = "wrn-cifar10"
BUILTIN_TASKS = {
    "wrn-cifar10": "tune_lowmem.tasks.classification:WideResNetCifar10",
    "tv-cifar10": "tune_lowmem.tasks.torchvision_cifar10:TorchvisionCifar10",
    "dct-iwslt14": "tune_lowmem.tasks.translation:DynamicConvIwslt14",
}
TASK_GROUP = "tune_lowmem.tasks"
TASK_BASE = "tune_lowmem.tasks.base:Task"


def registered_names() -> list[str]:
    """Built-in names, then those of installed packages' entry points."""
    plugins = entry_points(TASK_GROUP)
    return [*BUILTIN_TASKS, *sorted(set(plugins) - set(BUILTIN_TASKS))]


@functools.cache
def get_task(name: str) -> type:
    """The task class named `name`; `ConfigError` on the field ``task`` when there is none."""
    if not isinstance(name, str) or not name:
        raise ConfigError("task", f"{name!r} is not allowed; {_allowed()}")
    target = (
        BUILTIN_TASKS.get(name)
        or entry_points(TASK_GROUP).get(name)
        or (name if ":" in name else None)
    )
    if target is None:
        raise ConfigError("task", f"{name!r} is not a registered task; {_allowed()}")
    task = load(target, "task")
    if not subclass_of(task, TASK_BASE):
        raise ConfigError("task", f"{name!r} is {task!r}, not a subclass of tune_lowmem Task")
    return task


def tasks() -> tuple[type, ...]:
    """Every registered task class, in `registered_names` order."""
    return tuple(get_task(name) for name in registered_names())


def module_directory(name: str) -> str | None:
    """For a ``module:attribute`` task found in the working directory, that directory: what a
    sweep's workers must have on their path to import it; None for any other task."""
    if ":" not in name or name in BUILTIN_TASKS:
        return None
    module = sys.modules.get(name.split(":")[0])
    path = getattr(module, "__file__", None)
    cwd = os.getcwd()
    return cwd if path is not None and os.path.abspath(path).startswith(cwd + os.sep) else None


def _allowed() -> str:
    return f"registered: {', '.join(registered_names())}; or package.module:attribute"


# ---- techniques ------------------------------------------------------------------------------

BUILTIN_TECHNIQUES = {
    "checkpoint": "tune_lowmem.techniques.checkpointing:Checkpointing",
    "microbatch": "tune_lowmem.techniques.microbatch:Microbatching",
    "sparsity": "tune_lowmem.techniques.sparsity:Sparsity",
    "precision": "tune_lowmem.techniques.precision:Precision",
    "adam_state": "tune_lowmem.techniques.adam_state:AdamState",
    "fused_step": "tune_lowmem.techniques.fused_step:FusedStep",
    "cuda_workspace": "tune_lowmem.techniques.cuda_workspace:CudaWorkspace",
}
# The built-in techniques' SETTINGS, declared apart from their torch code so that the config and
# the store read them without torch (a plug-in's come from its class).
BUILTIN_SETTINGS = {
    "checkpoint": "tune_lowmem.techniques.settings:CHECKPOINT",
    "microbatch": "tune_lowmem.techniques.settings:MICROBATCH",
    "sparsity": "tune_lowmem.techniques.sparsity_config:SETTINGS",
    "precision": "tune_lowmem.techniques.settings:PRECISION",
    "adam_state": "tune_lowmem.techniques.settings:ADAM_STATE",
    "fused_step": "tune_lowmem.techniques.settings:FUSED_STEP",
    "cuda_workspace": "tune_lowmem.techniques.settings:CUDA_WORKSPACE",
}
TECHNIQUE_GROUP = "tune_lowmem.techniques"
TECHNIQUE_BASE = "tune_lowmem.techniques.base:Technique"


def techniques() -> tuple[type, ...]:
    """Every technique class, in the order a trial applies them."""
    return _techniques(_installed(), tuple(sys.path))


def technique_settings() -> tuple[Any, ...]:
    """Every technique's settings (`techniques.setting.Setting`), in the registry's order: the
    technique fields of TrialConfig. The built-in ones' without importing torch."""
    return _technique_settings(_installed(), tuple(sys.path))


def _installed() -> tuple[tuple[str, str], ...]:
    return tuple(sorted(entry_points(TECHNIQUE_GROUP).items()))


@functools.cache
def _techniques(plugins: tuple[tuple[str, str], ...], path: tuple[str, ...]) -> tuple[type, ...]:
    found = []
    for name, target in {**BUILTIN_TECHNIQUES, **dict(plugins)}.items():
        technique = load(target, "techniques")
        if not subclass_of(technique, TECHNIQUE_BASE):
            raise ConfigError(
                "techniques", f"{name!r} is {technique!r}, not a subclass of tune_lowmem Technique"
            )
        found.append(technique)
    return tuple(found)


@functools.cache
def _technique_settings(
    plugins: tuple[tuple[str, str], ...], path: tuple[str, ...]
) -> tuple[Any, ...]:
    declarations = {name: load(target, "techniques") for name, target in BUILTIN_SETTINGS.items()}
    for name, target in plugins:
        declarations[name] = load(target, "techniques").SETTINGS
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
SAMPLERS = {  # the built-in sampler names of a search space, and the classes they build
    "nsga2": "optuna.samplers:NSGAIISampler",
    "tpe": "optuna.samplers:TPESampler",
    "gp": "optuna.samplers:GPSampler",
    "random": "optuna.samplers:RandomSampler",
    "grid": "tune_lowmem.search.samplers:GridSampler",
    # the project's own: accuracy learned, memory asked of the profiler (search/known_memory.py)
    "known-memory": "tune_lowmem.search.known_memory:KnownMemorySampler",
    # the same with BoTorch's model and qLogNEHVI (the `botorch` extra; search/qlognehvi.py)
    "qlognehvi": "tune_lowmem.search.qlognehvi:QLogNEHVISampler",
}
SAMPLER_GROUP = "tune_lowmem.samplers"


def sampler_names() -> list[str]:
    """Built-in sampler names, then those of installed packages' entry points."""
    plugins = entry_points(SAMPLER_GROUP)
    return [*SAMPLERS, *sorted(set(plugins) - set(SAMPLERS))]


def get_sampler(name: object) -> type:
    """The Optuna sampler class `name` builds, imported when a space first needs it;
    `ConfigError` on the field ``sampler`` when no sampler has that name."""
    target = isinstance(name, str) and (SAMPLERS.get(name) or entry_points(SAMPLER_GROUP).get(name))
    if not target:
        raise ConfigError(
            "sampler", f"{name!r} is not allowed; allowed: {', '.join(sampler_names())}"
        )
    sampler = load(target, "sampler")
    from optuna.samplers import BaseSampler  # every sampler class imports Optuna anyway

    if not (isinstance(sampler, type) and issubclass(sampler, BaseSampler)):
        raise ConfigError("sampler", f"{name!r} is {sampler!r}, not an Optuna sampler class")
    return sampler


def sampler_needs(sampler: type) -> tuple[str, ...]:
    """What a sampler class declares it is built with (its `NEEDS`; none for Optuna's own)."""
    return tuple(getattr(sampler, "NEEDS", ()))
