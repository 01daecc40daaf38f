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
- columns newer than a row (memory, metric and base columns) read empty there (`read`).

Reported metric names of the first version (`results.LEGACY_METRICS`) are the names module's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ..config import older_store_values


def later_fields() -> dict[str, Any]:
    """Config fields newer than the first stores -> the value every older row implicitly had:
    the built-in models' own, and what each technique declares (`Setting.older_stores`)."""
    return {"model.init_checkpoint": None, "model.fused_norm": "none", **older_store_values()}


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
