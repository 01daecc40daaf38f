"""Task names to task classes (`tune_lowmem.plugins` finds them).

A task is named in three ways, tried in this order:
- a built-in name (`BUILTIN_TASKS`);
- a name another installed package registers under the ``tune_lowmem.tasks`` entry-point group
  (``[project.entry-points."tune_lowmem.tasks"] my-task = "my_pkg.tasks:MyTask"``);
- ``package.module:attribute``, imported from the working directory or an installed package.

The class is imported only when first asked for, so naming a task costs nothing until a trial
needs it, and this module imports nothing of the project but `plugins` (the config layer asks it).
"""

from __future__ import annotations

import functools
import os
import sys

from ..plugins import entry_points, load, subclass_of
from ..validation import ConfigError

DEFAULT_TASK = "wrn-cifar10"
BUILTIN_TASKS = {
    "wrn-cifar10": "tune_lowmem.tasks.classification:WideResNetCifar10",
    "tv-cifar10": "tune_lowmem.tasks.torchvision_cifar10:TorchvisionCifar10",
    "dct-iwslt14": "tune_lowmem.tasks.translation:DynamicConvIwslt14",
}
ENTRY_POINT_GROUP = "tune_lowmem.tasks"
TASK_BASE = "tune_lowmem.tasks.base:Task"


def registered_names() -> list[str]:
    """Built-in names, then those of installed packages' entry points."""
    plugins = entry_points(ENTRY_POINT_GROUP)
    return [*BUILTIN_TASKS, *sorted(set(plugins) - set(BUILTIN_TASKS))]


@functools.cache
def get_task(name: str) -> type:
    """The task class named `name`; `ConfigError` on the field ``task`` when there is none."""
    if not isinstance(name, str) or not name:
        raise ConfigError("task", f"{name!r} is not allowed; {_allowed()}")
    target = (
        BUILTIN_TASKS.get(name)
        or entry_points(ENTRY_POINT_GROUP).get(name)
        or (name if ":" in name else None)
    )
    if target is None:
        raise ConfigError("task", f"{name!r} is not a registered task; {_allowed()}")
    task = load(target, "task")
    if not subclass_of(task, TASK_BASE):
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


def _allowed() -> str:
    return f"registered: {', '.join(registered_names())}; or package.module:attribute"
