"""Finding plug-ins (tasks, techniques): a built-in table, then installed packages' entry points,
then ``package.module:attribute``, as timm's registry maps model names to builders.

A package registers one with its entry-point group in its own metadata, e.g.
``[project.entry-points."tune_lowmem.techniques"] int8-activations = "my_pkg.act:Int8Activations"``.
What is installed is read from the import path each time the path changes, so a package placed
on ``sys.path`` is seen without a restart. This module imports nothing of the project's but its
errors, so the config layer can ask it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys

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
