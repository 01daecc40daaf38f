"""A search space's ``params`` section: each searched field's distribution, read by its type's
keys (`FIELDS`) and checked as a range. Kept apart from the space so that what reads a
distribution (the space, its conditions and proofs in `constraints`) imports it from below."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..validation import (
    ConfigError,
    Field,
    checked,
    choice,
    is_int,
    is_number,
    mapping,
    optional_flag,
    read_section,
    require,
)

PARAM_TYPES = ("uniform", "loguniform", "int", "choice")
GRID_LIMIT = 1_000_000  # the most values a sampler may have to list: a range's, or a grid's


@dataclass(frozen=True)
class Param:
    """One searched field and its distribution."""

    name: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    values: tuple = ()
    # a choice's order: None (absent) orders numbers by value and leaves other values
    # unordered; true orders the values as listed; false leaves them unordered
    ordered: bool | None = None

    def order(self) -> tuple | None:
        """A choice's values from first to last (`ordered`), or None: unordered categories (or
        a range, which is ordered as it is)."""
        if self.kind != "choice" or self.ordered is False:
            return None
        if self.ordered:
            return self.values
        return tuple(sorted(self.values)) if numeric(self.values) else None

    def probes(self) -> list[Any]:
        """Values that must each give a valid config: every choice, every integer (few), the ends."""
        if self.kind == "choice":
            return list(self.values)
        if self.kind == "int":
            grid = range(self.low, self.high + 1, self.step or 1)
            return list(grid) if len(grid) <= 64 else [self.low, self.high]
        return [float(self.low), float(self.high)]

    def suggest(self, trial) -> Any:
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.values))
        if self.kind == "int":
            return trial.suggest_int(self.name, self.low, self.high, step=self.step or 1)
        return trial.suggest_float(
            self.name, self.low, self.high, step=self.step, log=self.kind == "loguniform"
        )

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "choice":
            spec = {"type": "choice", "values": list(self.values)}
            return spec if self.ordered is None else {**spec, "ordered": self.ordered}
        spec = {"type": self.kind, "low": self.low, "high": self.high}
        return spec if self.step is None else {**spec, "step": self.step}


def param_specs(raw: Any, field_name: str) -> dict[str, Param]:
    """Each searched field's distribution, read by its type's keys."""
    raw = mapping(raw, field_name)
    require(bool(raw), field_name, "at least one searched field is required")
    return {
        name: _param(name, mapping(spec, f"{field_name}.{name}"), f"{field_name}.{name}")
        for name, spec in raw.items()
    }


def _param(name: str, spec: dict[str, Any], prefix: str) -> Param:
    """One param by its type's keys (`FIELDS`), then its range as a whole."""
    kind = choice(spec.get("type"), PARAM_TYPES, f"{prefix}.type")
    others = {k: v for k, v in spec.items() if k != "type"}
    values = read_section(others, FIELDS[kind], f"{prefix}.")
    if kind == "choice":
        return Param(name, kind, values=values["values"], ordered=values["ordered"])
    low, high, step = values["low"], values["high"], values.get("step")
    require(
        low < high,
        f"{prefix}.high",
        f"{high!r} is not allowed; an empty range: high > low ({low!r}) is required",
    )
    if kind == "loguniform":
        require(low > 0, f"{prefix}.low", f"{low!r} is not allowed; loguniform needs low > 0")
    if step is not None:
        count = (high - low) / step
        require(
            math.isfinite(count) and abs(count - round(count)) < 1e-9,
            f"{prefix}.step",
            f"{step!r} is not allowed; high - low ({high - low!r}) must be a multiple of it",
        )
    if kind == "int" or step is not None:  # a grid of values: a sampler must be able to list it
        count = round((high - low) / (step or 1)) + 1
        require(
            count <= GRID_LIMIT,
            f"{prefix}.{'high' if step is None else 'step'}",
            f"{high if step is None else step!r} is not allowed; the range has {count:.3g} values, "
            f"at most {GRID_LIMIT} are allowed",
        )
    return Param(name, kind, low=low, high=high, step=step)


def _choice_values(values: Any, field_name: str) -> tuple:
    """A choice param's values: a non-empty list of distinct finite scalars."""
    require(
        isinstance(values, list) and len(values) > 0,
        field_name,
        f"{values!r} is not allowed; a non-empty list is required",
    )
    for value in values:
        require(
            value is None or isinstance(value, (str, int, float, bool)),
            field_name,
            f"{value!r} is not allowed; numbers, text, true/false or null are required",
        )
    for i, value in enumerate(values):
        require(
            not (isinstance(value, float) and not math.isfinite(value)),
            field_name,
            f"{value!r} is not allowed; finite numbers are required",
        )
        same = [other for other in values[:i] if other == value]
        if same:
            raise ConfigError(
                field_name,
                f"{same[0]!r} and {value!r} are the same choice "
                "(they compare equal); distinct values are required",
            )
    return tuple(values)


def numeric(values: tuple | list) -> bool:
    """Whether a choice's values are all numbers (not true/false): ordered by value."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _range_fields(
    kind: str, number: Callable[[Any], bool], what: str, *, stepped: bool = True
) -> dict[str, Field]:
    """low and high, both required and each `what`, and (`stepped`) an optional step > 0."""

    def end(value: Any, field_name: str) -> Any:
        return checked(value, number(value), field_name, what)

    def step(value: Any, field_name: str) -> Any:
        ok = value is None or (number(value) and value > 0)
        return checked(value, ok, field_name, f"{what} > 0")

    ends = Field(end, required=f"required for type {kind}")
    return {"low": ends, "high": ends, **({"step": Field(step)} if stepped else {})}


FIELDS = {  # a param's keys besides its type
    "uniform": _range_fields("uniform", is_number, "a finite number"),
    "loguniform": _range_fields("loguniform", is_number, "a finite number", stepped=False),
    "int": _range_fields("int", is_int, "an integer"),
    "choice": {"values": Field(_choice_values), "ordered": Field(optional_flag)},
}
