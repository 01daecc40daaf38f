"""The types of a trial's config fields: one source for the validator and the store's columns.

Each field's annotation (``int``, ``float | None``, ``tuple[float, ...]``, ...) gives a `Kind`:
what Python values it takes and the Arrow type of its store column. `TrialConfig.validate`
checks every field against its kind before any range check, and the store builds its columns
from the same kinds, so a config that validates is one the store can write. Booleans are not
numbers, integers fit int64, floats are finite, lists are lists (a list column in the store).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .validation import ConfigError

INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Kind:
    """What one field holds: a scalar type, or a list of them (of a fixed length or any)."""

    scalar: type  # bool, int, float or str
    is_list: bool = False
    length: int | None = None  # a fixed-length tuple annotation, e.g. tuple[float, float]
    optional: bool = False  # `X | None`: null allowed

    @property
    def arrow(self) -> pa.DataType:
        scalar = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}
        return pa.list_(scalar[self.scalar]) if self.is_list else scalar[self.scalar]

    def describe(self) -> str:
        names = {
            bool: "true or false",
            int: "an integer within int64",
            float: "a finite number",
            str: "text",
        }
        plural = {bool: "true/false", int: "integers", float: "finite numbers", str: "texts"}
        if self.is_list:
            count = "" if self.length is None else f"{self.length} "
            text = f"a list of {count}{plural[self.scalar]}"
        else:
            text = names[self.scalar]
        return f"{text} or null" if self.optional else text

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if not self.is_list:
            return scalar_fits(value, self.scalar)
        return (
            isinstance(value, (list, tuple))
            and (self.length is None or len(value) == self.length)
            and all(scalar_fits(item, self.scalar) for item in value)
        )

    def check(self, value: Any, field_name: str) -> Any:
        if not self.accepts(value):
            raise ConfigError(
                field_name, f"{value!r} is not allowed; {self.describe()} is required"
            )
        return value


def scalar_fits(value: Any, scalar: type) -> bool:
    """`value` is a `scalar` as the store holds it: no bool as a number, int64, finite floats."""
    is_bool = isinstance(value, (bool, np.bool_))
    if scalar is bool:
        return is_bool
    if scalar is str:
        return isinstance(value, str)
    if is_bool or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    if scalar is int:
        return isinstance(value, (int, np.integer)) and INT64[0] <= int(value) <= INT64[1]
    return math.isfinite(float(value))


def kind_of(hint: Any) -> Kind:
    """The `Kind` of a dataclass field's annotation."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        (hint,) = args
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        fixed = None if len(args) == 2 and args[1] is Ellipsis else len(args)
        return Kind(args[0], is_list=True, length=fixed, optional=optional)
    return Kind(hint, optional=optional)


def section_kinds(section: Any, prefix: str = "") -> Iterable[tuple[str, Kind]]:
    """Dotted field name -> `Kind` for every leaf field of a (nested) config dataclass."""
    hints = typing.get_type_hints(type(section))
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            yield from section_kinds(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", kind_of(hints[f.name])


def check_types(config: Any, kinds: Iterable[tuple[str, Kind]]) -> None:
    """Every leaf field of `config` against its kind, naming the first that is wrong."""
    for name, kind in kinds:
        value = config
        for part in name.split("."):
            value = getattr(value, part)
        kind.check(value, name)
