"""One field of `TrialConfig` that a technique owns: its name, type, default, and what rows of
stores written before it existed read for it. A technique lists its settings in `SETTINGS`; the
config assembles its fields from them, the store its columns, the search its parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """A value (``type`` an annotation such as ``str`` or ``int | None``) or a section (``type``
    a frozen dataclass with ``validate(prefix)``; its fields become ``name.field`` columns)."""

    name: str  # the TrialConfig field, and its store column (or its columns' prefix)
    type: Any
    default: Any = None  # a value's default; a section's is its dataclass's defaults
    # What a row of a store written before the setting existed trained with, column -> value.
    # None: its defaults (a setting newer than the first store); {}: every store has its columns.
    older_stores: Mapping[str, Any] | None = None

    @property
    def is_section(self) -> bool:
        return dataclasses.is_dataclass(self.type)

    def default_value(self) -> Any:
        return self.type() if self.is_section else self.default

    def older_values(self) -> dict[str, Any]:
        """Store column (without ``config.``) -> the value older rows read for it."""
        if self.older_stores is not None:
            return dict(self.older_stores)
        if not self.is_section:
            return {self.name: self.default}
        section = self.default_value()
        return {
            f"{self.name}.{f.name}": getattr(section, f.name) for f in dataclasses.fields(section)
        }
