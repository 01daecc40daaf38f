"""Tasks: what a trial trains (model, data, recipe, metrics), one module per task, looked up by
name in the registry (`tune_lowmem.plugins.TASKS`). The interface is `tune_lowmem.tasks.base.Task`;
this package's top imports nothing heavy, since the config layer asks the registry for names."""

from ..plugins import DEFAULT_TASK, TASKS

__all__ = ["DEFAULT_TASK", "TASKS"]
