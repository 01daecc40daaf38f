"""Tasks: what a trial trains (model, data, recipe, metrics), one module per task, looked up by
name (`tune_lowmem.plugins`). The interface is `tune_lowmem.tasks.base.Task`; this package's top
imports nothing heavy, since the config layer asks the registry for names."""

from ..plugins import BUILTIN_TASKS, DEFAULT_TASK, get_task, registered_names

__all__ = ["BUILTIN_TASKS", "DEFAULT_TASK", "get_task", "registered_names"]
