"""How this version reads stores written by earlier ones: the store's rules for older rows, in
one place, and the one place the store knows technique and task field names.

- config fields added since the first stores read, where an older row has none, as the value
  every such row trained with (`later_fields`: the built-in models' own, and what each technique
  declares in `Setting.older_stores`);
- config fields removed since (`REMOVED_FIELDS`) with the value every row that had them held;
- the first version's tuple fields, which it stored as JSON text (`JSON_LISTS`), read as lists
  (`lists_from_json`);
- a point's seed group, the hash the first version gave it (`first_version_point`), so the rows
  of a sweep resumed across versions still group with the ones written before;
- columns newer than a row (memory, metric and base columns) read empty there (`read`);
- the first version's names of reported metrics (`FIRST_METRICS`), read as today's wherever a
  metric is named (`records.store_column`, a space's objectives), and the memory names spaces
  of earlier versions gave their objectives (`old_memory_column`, for a store's saved spaces).

What else older stores and sweeps left is read where only its reader can: each technique
declares what older rows trained with (`Setting.older_stores`, gathered by `later_fields`); a
sweep's objectives, for rows written before the ``objectives`` column, come from its saved space
and, in a bare old store, are its first higher-is-better validation metric with memory
(`analysis.objectives`); the names Tune files of older sweeps pickle are `search.legacy`'s; the
early stopping's record reads a key it lacks as none (`search.scheduler`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ..config import older_store_values
from ..results import PARTS


def later_fields() -> dict[str, Any]:
    """Config fields newer than the first stores -> the value every older row implicitly had:
    the built-in models' own, and what each technique declares (`Setting.older_stores`)."""
    return {"model.init_checkpoint": None, "model.fused_norm": "none", **older_store_values()}


# The first version's names of reported metrics -> today's.
FIRST_METRICS = {
    **{f"memory_{part}_mb": f"memory.predicted_{part}_mb" for part in PARTS},
    "flops_per_step": "memory.flops_per_step",
    **{f"measured_{part}_mb": f"memory.measured_{part}_mb" for part in PARTS},
}
# The prefixes of memory names in spaces earlier versions saved -> today's, after ``memory.``.
OLD_MEMORY_PREFIXES = (
    ("memory_", "predicted_"),
    ("predicted_", "predicted_"),
    ("measured_", "measured_"),
)


def old_memory_column(name: str) -> str | None:
    """The memory column an earlier version's space meant by `name` ("memory_total_mb",
    "predicted_run_peak_mb", "flops_per_step"); None for any other name."""
    if name == "flops_per_step":
        return FIRST_METRICS[name]
    for old, new in OLD_MEMORY_PREFIXES:
        if name.startswith(old) and name.endswith("_mb"):
            return f"memory.{new}{name.removeprefix(old)}"
    return None


# Config fields removed since, with the value every row that had them held.
REMOVED_FIELDS = {"data.num_workers": 0}


# Tuple fields of the first version's built-in tasks, which it stored as JSON text.
JSON_LISTS = (
    "config.schedule.milestones",
    "config.schedule.betas",
    "config.model.encoder_kernels",
    "config.model.decoder_kernels",
)


def lists_from_json(data: pa.Table) -> pa.Table:
    """Stores of the first version held tuple fields as JSON text: read as lists."""
    for name in JSON_LISTS:
        if name in data.column_names and data[name].type == pa.string():
            values = [None if v is None else json.loads(v) for v in data[name].to_pylist()]
            index = data.column_names.index(name)
            data = data.set_column(index, name, pa.array(values))
    return data


def first_version_point(config: Mapping[str, Any]) -> dict[str, Any]:
    """A point's config (flat field -> plain value, seed left out) as the first version hashed
    it for its seed group: lists as their JSON text, fields added since only where they differ
    from the value every older row had, and removed ones with the value they had."""
    later = later_fields()
    point = {
        key: json.dumps(value) if isinstance(value, list) else value
        for key, value in config.items()
        if not (key in later and value == later[key])
    }
    for key, value in REMOVED_FIELDS.items():
        point.setdefault(key, value)
    return point
