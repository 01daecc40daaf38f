"""The techniques a trial may use: the built-in ones, then those installed packages register under
the ``tune_lowmem.techniques`` entry-point group, each a `base.Technique` subclass whose
`SETTINGS` are its fields of `TrialConfig`.

The order is the one a trial applies them to its fp32 model: checkpointing and simulated
microbatching change the model's forward, sparsity masks the fp32 weights, and precision casts
the storage last; the Adam state format sets how the optimizer keeps its moments before the fused
step, last too, takes over the optimizer's updates; plug-ins follow, by name. This module imports
no technique (the config layer asks it, and must not pull in torch); they load on first use.
"""

from __future__ import annotations

import functools
import sys

from ..plugins import entry_points, load, subclass_of
from ..validation import ConfigError
from .setting import Setting

BUILTIN_TECHNIQUES = {
    "checkpoint": "tune_lowmem.techniques.checkpointing:Checkpointing",
    "microbatch": "tune_lowmem.techniques.microbatch:Microbatching",
    "sparsity": "tune_lowmem.techniques.sparsity:Sparsity",
    "precision": "tune_lowmem.techniques.precision:Precision",
    "adam_state": "tune_lowmem.techniques.adam_state:AdamState",
    "fused_step": "tune_lowmem.techniques.fused_step:FusedStep",
}
ENTRY_POINT_GROUP = "tune_lowmem.techniques"
TECHNIQUE_BASE = "tune_lowmem.techniques.base:Technique"
# Techniques whose class does not list its SETTINGS yet: where they are declared instead.
PENDING_SETTINGS = {"sparsity": "tune_lowmem.techniques.sparsity_config:SETTINGS"}


def registered() -> tuple[type, ...]:
    """Every technique class, in the order a trial applies them."""
    return _registered(tuple(sorted(entry_points(ENTRY_POINT_GROUP).items())), tuple(sys.path))


def settings() -> tuple[Setting, ...]:
    """Every technique's settings, in the registry's order: the technique fields of TrialConfig."""
    return tuple(s for technique in registered() for s in technique_settings(technique))


def technique_settings(technique: type) -> tuple[Setting, ...]:
    declared = getattr(technique, "SETTINGS", None)
    if declared is None:
        declared = load(PENDING_SETTINGS[technique.NAME], "techniques")
    return tuple(declared)


@functools.cache
def _registered(plugins: tuple[tuple[str, str], ...], path: tuple[str, ...]) -> tuple[type, ...]:
    targets = {**BUILTIN_TECHNIQUES, **dict(plugins)}
    techniques = []
    seen: dict[str, str] = {}
    for name, target in targets.items():
        technique = load(target, "techniques")
        if not subclass_of(technique, TECHNIQUE_BASE):
            raise ConfigError(
                "techniques", f"{name!r} is {technique!r}, not a subclass of tune_lowmem Technique"
            )
        for setting in technique_settings(technique):
            if setting.name in seen:
                raise ConfigError(
                    setting.name,
                    f"declared by both {seen[setting.name]} and {target}; one owner is required",
                )
            seen[setting.name] = target
        techniques.append(technique)
    return tuple(techniques)
