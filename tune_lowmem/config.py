"""One frozen, validated configuration object per trial.

Every component (model, data, techniques, trainer, profiler, search, store) reads a
`TrialConfig`; nothing else carries settings. Its fields are the trial's own (task, seed,
device), the task's sections (model, schedule, data: dataclasses the task declares), and the
techniques' settings, which each registered technique declares (`techniques.setting.Setting`),
so a technique installed as a plug-in is a field like any other (``config.precision``,
``config.sparsity.density``). Which technique runs the step is the trial's own field too
(``step_runner``: a registered technique's name, or ``package.module:attribute``).

It is built from a nested dict (YAML), a flat dict with dotted keys (what Optuna and Ray hand
over, e.g. ``{"sparsity.density": 0.3}``), or a mix of both. A bad value raises `ConfigError`
naming the field and the allowed values, before anything runs.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from .plugins import (
    DEFAULT_STEP_RUNNER,
    DEFAULT_TASK,
    TASKS,
    step_runner,
    technique_settings,
    techniques,
)
from .schema import Kind, check_types, kind_of, section_kinds
from .validation import ConfigError, choice, numpy_seed, require

__all__ = ["ConfigError", "TrialConfig", "config_kinds", "older_store_values"]

DEVICES = ("auto", "cpu", "cuda")
# The sections a task declares its own dataclass for (see `tune_lowmem.tasks.Task`).
TASK_SECTIONS = ("model", "schedule", "data")
TRIAL_FIELDS = {"task": str, "seed": int, "device": str, "step_runner": str}


@dataclass(frozen=True, init=False)
class TrialConfig:
    """Everything one training trial needs; see the module docstring for where each field comes
    from. A technique's setting reads as an attribute (``config.precision``); the checks of each
    technique against the task run here too, so a config that exists is one a trial can run."""

    task: str = DEFAULT_TASK  # a registered task name, or "package.module:attribute"
    seed: int = 0
    device: str = "auto"  # auto: CUDA when available, else the CPU
    step_runner: str = DEFAULT_STEP_RUNNER  # the technique that runs the step (plugins)
    model: Any = None  # the task's model section (None: its defaults)
    schedule: Any = None  # the task's optimizer and schedule section
    data: Any = None  # the task's data section
    settings: tuple[tuple[str, Any], ...] = ()  # the techniques' settings, in registry order

    def __init__(
        self,
        task: str = DEFAULT_TASK,
        seed: int = 0,
        device: str = "auto",
        step_runner: str = DEFAULT_STEP_RUNNER,
        model: Any = None,
        schedule: Any = None,
        data: Any = None,
        **settings: Any,
    ):
        declared = {s.name: s for s in technique_settings()}
        taken = sorted(set(declared) & {*TRIAL_FIELDS, *TASK_SECTIONS, "settings"})
        if taken:
            raise ConfigError(taken[0], "a technique declares it, but it is a trial's own field")
        unknown = sorted(set(settings) - set(declared))
        if unknown:
            allowed = ", ".join(sorted([*TRIAL_FIELDS, *TASK_SECTIONS, *declared]))
            raise ConfigError(unknown[0], f"unknown field; allowed: {allowed}")
        sections = {"model": model, "schedule": schedule, "data": data}
        for name, section_cls in TASKS.get(task).sections().items():
            if sections[name] is None:
                sections[name] = section_cls()
        values = tuple(
            (name, settings[name] if name in settings else setting.default_value())
            for name, setting in declared.items()
        )
        trial = {"task": task, "seed": seed, "device": device, "step_runner": step_runner}
        for name, value in {**trial, **sections}.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "settings", values)
        self.validate()

    def __getattr__(self, name: str) -> Any:
        for key, value in self.__dict__.get("settings", ()):  # absent while unpickling
            if key == name:
                return value
        raise AttributeError(f"TrialConfig has no field {name!r}")

    def task_type(self) -> type:
        """The task class this config names (imported on first use)."""
        return TASKS.get(self.task)

    def items(self) -> Iterator[tuple[str, Any, Any]]:
        """Every top-level field as (name, annotation, value): the trial's, the task's
        sections, then the techniques' settings."""
        for name, hint in TRIAL_FIELDS.items():
            yield name, hint, getattr(self, name)
        for name in TASK_SECTIONS:
            value = getattr(self, name)
            yield name, type(value), value
        types = {s.name: s.type for s in technique_settings()}
        for name, value in self.settings:
            yield name, types[name], value

    def kinds(self) -> Iterator[tuple[str, Kind]]:
        """Dotted field name -> `Kind` of every leaf field."""
        for name, hint, value in self.items():
            if is_dataclass(value):
                yield from section_kinds(value, f"{name}.")
            else:
                yield name, kind_of(hint)

    def validate(self) -> None:
        task = self.task_type()
        for name, expected in task.sections().items():
            section = getattr(self, name)
            require(
                isinstance(section, expected),
                name,
                f"a {type(section).__name__} is not allowed for task {self.task}; "
                f"{expected.__name__} is required",
            )
        check_types(self, self.kinds())  # the store's column types: no range check sees a wrong one
        numpy_seed(self.seed, "seed")
        choice(self.device, DEVICES, "device")
        for name, _, value in self.items():
            if is_dataclass(value):
                value.validate(name)
        for technique in techniques(self):
            technique.validate(self, task)
        step_runner(self)  # exactly one of them runs the step
        task.validate_config(self)

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrialConfig:
        """Build from a nested dict, a flat dict with dotted keys, or a mix of both."""
        nested = _unflatten(values)
        task = TASKS.get(nested.get("task", cls.task))
        sections = {
            **task.sections(),
            **{s.name: s.type for s in technique_settings() if s.is_section},
        }
        kwargs: dict[str, Any] = {}
        for key, value in nested.items():
            if key in sections:
                if not isinstance(value, Mapping):
                    raise ConfigError(
                        key, f"{value!r} is not allowed; a mapping of its fields is required"
                    )
                kwargs[key] = _build_section(sections[key], value, key)
            else:
                kwargs[key] = value
        return cls(**kwargs)

    @classmethod
    def attempt(cls, values: Mapping[str, Any]) -> TrialConfig | ConfigError:
        """The config `values` give, or the error they are refused with, for checks that try
        many."""
        try:
            return cls.from_dict(values)
        except ConfigError as error:
            return error

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrialConfig:
        from .yaml_loading import load_file

        loaded = load_file(path, "config file")
        loaded = {} if loaded is None else loaded
        if not isinstance(loaded, Mapping):
            raise ConfigError(str(path), "a YAML mapping of config fields is required")
        return cls.from_dict(loaded)

    def replace(self, **flat: Any) -> TrialConfig:
        """A copy with some fields changed, given as dotted keys (``{"sparsity.density": 0.3}``)."""
        return TrialConfig.from_dict({**self.to_flat(), **_unflatten_keys(flat)})

    def to_dict(self) -> dict[str, Any]:
        """Nested plain values (tuples as lists), as YAML writes them."""
        return {
            name: _plain(dataclasses.asdict(value) if is_dataclass(value) else value)
            for name, _, value in self.items()
        }

    def to_flat(self) -> dict[str, Any]:
        """Dotted keys to plain values: one store column per field."""
        return _flatten(self.to_dict())

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def config_kinds(task: str) -> dict[str, Kind]:
    """Dotted config key -> `Kind`, for every field of the task's `TrialConfig`."""
    return _config_kinds(task, techniques())


@functools.cache
def _config_kinds(task: str, techniques: tuple[type, ...]) -> dict[str, Kind]:
    return dict(TrialConfig.from_dict({"task": task}).kinds())


def older_store_values() -> dict[str, Any]:
    """Config fields newer than the first stores -> the value every older row implicitly had:
    the step runner (precision's before there was a choice), and what each technique declares
    (`Setting.older_stores`)."""
    declared = {k: v for s in technique_settings() for k, v in s.older_values().items()}
    return {"step_runner": DEFAULT_STEP_RUNNER, **declared}


def _build_section(section_cls: type, values: Mapping[str, Any], prefix: str) -> Any:
    known = {f.name: f for f in fields(section_cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{prefix}.{key}", f"unknown field; allowed: {', '.join(known)}")
        default = getattr(section_cls(), key)
        kwargs[key] = (
            tuple(value) if isinstance(default, tuple) and isinstance(value, list) else value
        )
    try:
        return section_cls(**kwargs)
    except TypeError as error:  # pragma: no cover - guarded by the key check above
        raise ConfigError(prefix, str(error)) from error


def _unflatten(values: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in values.items():
        parts = str(key).split(".")
        target = nested
        for part in parts[:-1]:
            existing = target.setdefault(part, {})
            if not isinstance(existing, dict):
                raise ConfigError(key, f"{part!r} is a value and cannot also have fields")
            target = existing
        leaf = parts[-1]
        if isinstance(value, Mapping):
            target.setdefault(leaf, {}).update(_unflatten(value))
        else:
            target[leaf] = value
    return nested


def _unflatten_keys(flat: Mapping[str, Any]) -> dict[str, Any]:
    return {key.replace("__", "."): value for key, value in flat.items()}


def _flatten(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
