"""Task names to task classes, as timm's registry maps model names to builders.

A task is named in three ways, tried in this order:
- a built-in name (`BUILTIN_TASKS`);
- a name another installed package registers under the ``tune_lowmem.tasks`` entry-point group
  (``[project.entry-points."tune_lowmem.tasks"] my-task = "my_pkg.tasks:MyTask"``);
- ``package.module:attribute``, imported from the working directory or an installed package.

The class is imported only when first asked for, so naming a task costs nothing until a trial
needs it, and this module imports nothing of the project (the config layer asks it).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys

from ..validation import ConfigError

DEFAULT_TASK = "wrn-cifar10"
BUILTIN_TASKS = {
    "wrn-cifar10": "tune_lowmem.tasks.classification:WideResNetCifar10",
    "tv-cifar10": "tune_lowmem.tasks.torchvision_cifar10:TorchvisionCifar10",
    "dct-iwslt14": "tune_lowmem.tasks.translation:DynamicConvIwslt14",
}
ENTRY_POINT_GROUP = "tune_lowmem.tasks"


def registered_names() -> list[str]:
    """Built-in names, then those of installed packages' entry points."""
    plugins = [e.name for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]
    return [*BUILTIN_TASKS, *sorted(set(plugins) - set(BUILTIN_TASKS))]


@functools.cache
def get_task(name: str) -> type:
    """The task class named `name`; `ConfigError` on the field ``task`` when there is none."""
    if not isinstance(name, str) or not name:
        raise ConfigError("task", f"{name!r} is not allowed; {_allowed()}")
    target = BUILTIN_TASKS.get(name) or _entry_point(name) or (name if ":" in name else None)
    if target is None:
        raise ConfigError("task", f"{name!r} is not a registered task; {_allowed()}")
    task = _import(target)
    from .base import Task  # the base class imports torch: only once a task is really wanted

    if not (isinstance(task, type) and issubclass(task, Task)):
        raise ConfigError("task", f"{name!r} is {task!r}, not a subclass of tune_lowmem Task")
    return task


def module_directory(name: str) -> str | None:
    """For a ``module:attribute`` task found in the working directory, that directory: what a
    sweep's workers must have on their path to import it; None for any other task."""
    if ":" not in name or name in BUILTIN_TASKS:
        return None
    module = sys.modules.get(name.split(":")[0])
    path = getattr(module, "__file__", None)
    cwd = os.getcwd()
    return cwd if path is not None and os.path.abspath(path).startswith(cwd + os.sep) else None


def _entry_point(name: str) -> str | None:
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
    return next((entry.value for entry in found), None)


def _import(target: str) -> object:
    module_name, _, attribute = target.partition(":")
    if os.getcwd() not in sys.path:  # the console script's path lacks it; `python -m` has it
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError("task", f"{target!r} cannot be imported: {error}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError("task", f"{target!r}: {module_name} has no {attribute!r}") from None


def _allowed() -> str:
    return f"registered: {', '.join(registered_names())}; or package.module:attribute"
