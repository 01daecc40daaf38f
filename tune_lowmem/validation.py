"""The checks every user-facing value goes through, once for the whole project.

Each check raises `ConfigError` naming the field and what is allowed, and returns the value it
accepted, so a parser can write ``depth = positive_int(raw["depth"], "model.depth")``. Booleans
are never numbers here: YAML's ``true`` is not the integer 1. A section of fixed keys is read
whole by `read_section` from a table of `Field`s (each key's check and default), so a parser
declares its keys once and reads them in one call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SEED_LIMIT = 2**32  # numpy's generators take seeds below it


class ConfigError(ValueError):
    """A configuration value is not allowed; the message names the field."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        self.reason = message
        super().__init__(f"{field_name}: {message}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # Pickling (Ray sends a worker's errors to the driver) and copying rebuild an exception
        # from its args, which hold the joined message: rebuild it from its two parts instead.
        return type(self), (self.field, self.reason)


def require(ok: bool, field_name: str, message: str) -> None:
    if not ok:
        raise ConfigError(field_name, message)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def checked(value: Any, ok: bool, field_name: str, requirement: str) -> Any:
    """`value` when `ok`, else ``field: <value> is not allowed; <requirement> is required``."""
    require(ok, field_name, f"{value!r} is not allowed; {requirement} is required")
    return value


def positive_int(value: Any, field_name: str) -> int:
    return checked(value, is_int(value) and value > 0, field_name, "a positive integer")


def optional_positive_int(value: Any, field_name: str) -> int | None:
    return None if value is None else positive_int(value, field_name)


def optional_flag(value: Any, field_name: str) -> bool | None:
    """True, false, or null (absent: a default that depends on other fields)."""
    return checked(value, value is None or isinstance(value, bool), field_name, "true or false")


AUTO = "auto"  # a size left to the task (an evaluation batch): None once the config is read


def read_auto(config: Any, name: str) -> None:
    """Field `name` of the frozen dataclass `config` as None where it says `AUTO`."""
    if getattr(config, name) == AUTO:
        object.__setattr__(config, name, None)


def auto_or_positive_int(value: Any, field_name: str) -> int | None:
    ok = value is None or is_int(value) and value > 0
    return checked(value, ok, field_name, f"a positive integer or {AUTO}")


def nonnegative_int(value: Any, field_name: str) -> int:
    return checked(value, is_int(value) and value >= 0, field_name, "an integer >= 0")


def positive_float(value: Any, field_name: str) -> float:
    ok = is_number(value) and value > 0
    return checked(value, ok, field_name, "a positive finite number")


def optional_positive_float(value: Any, field_name: str) -> float | None:
    return None if value is None else float(positive_float(value, field_name))


def nonnegative_float(value: Any, field_name: str) -> float:
    ok = is_number(value) and value >= 0
    return checked(value, ok, field_name, "a finite number >= 0")


def numpy_seed(value: Any, field_name: str, *, optional: bool = False) -> int | None:
    """A seed numpy's generators take: an integer in [0, 2**32), or None when `optional`."""
    allowed = "an integer in [0, 2**32) or null" if optional else "an integer in [0, 2**32)"
    require(
        (optional and value is None) or (is_int(value) and 0 <= value < SEED_LIMIT),
        field_name,
        f"{value!r} is not allowed; {allowed} is required (numpy's seeds)",
    )
    return value


def fraction(value: Any, field_name: str, *, open_low: bool = True) -> float:
    """A share: 0 < value <= 1 (or 0 <= value <= 1 with ``open_low=False``)."""
    ok = is_number(value) and value <= 1 and (value > 0 if open_low else value >= 0)
    return checked(value, ok, field_name, "0 < value <= 1" if open_low else "0 <= value <= 1")


def probability(value: Any, field_name: str) -> float:
    """A dropout-like probability: 0 <= p < 1."""
    return checked(value, is_number(value) and 0 <= value < 1, field_name, "0 <= p < 1")


def choice(value: Any, allowed: Iterable[Any], field_name: str) -> Any:
    allowed = tuple(allowed)
    require(
        isinstance(value, type(allowed[0])) and value in allowed,
        field_name,
        f"{value!r} is not allowed; allowed: {', '.join(map(str, allowed))}",
    )
    return value


def mapping(value: Any, field_name: str) -> dict[str, Any]:
    require(
        isinstance(value, Mapping),
        field_name,
        f"{value!r} is not allowed; a mapping is required",
    )
    return dict(value)


def known_keys(values: Mapping[str, Any], allowed: Iterable[str], prefix: str) -> None:
    allowed = tuple(allowed)
    for key in values:
        if key not in allowed:
            raise ConfigError(f"{prefix}{key}", f"unknown key; allowed: {', '.join(allowed)}")


def _as_given(value: Any, field_name: str) -> Any:
    return value


@dataclass(frozen=True)
class Field:
    """One key of a section: its check (``check(value, field_name)`` returns the value kept),
    its value when absent, the message when it is required instead, and whether null or an empty
    value reads as absent (``conditions:`` left blank)."""

    check: Callable[[Any, str], Any] = _as_given
    default: Any = None
    required: str | None = None
    blank_is_default: bool = False


def read_section(values: Mapping[str, Any], fields: Mapping[str, Field], prefix: str) -> dict:
    """Every key of `fields`, checked, with defaults filled in: unknown keys first, then missing
    required ones, then each value in the table's order; fields are named `prefix` + key."""
    known_keys(values, fields, prefix)
    for key, spec in fields.items():
        if spec.required is not None and key not in values:
            raise ConfigError(f"{prefix}{key}", spec.required)
    section = {}
    for key, spec in fields.items():
        value = values.get(key, spec.default)
        if spec.blank_is_default and not value:
            value = spec.default
        section[key] = spec.check(value, f"{prefix}{key}")
    return section


def section(fields: Mapping[str, Field], *, optional: bool = False) -> Callable[[Any, str], Any]:
    """The check of a nested mapping read by its own `fields` (null passes when `optional`)."""

    def check(value: Any, field_name: str) -> dict | None:
        if optional and value is None:
            return None
        return read_section(mapping(value, field_name), fields, f"{field_name}.")

    return check
