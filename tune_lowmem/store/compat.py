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
- columns newer than a row (memory, time, metric and base columns) read empty there (`read`);
- columns renamed since (`outcome.RENAMED`: `memory.measured_run_peak_mb`, a side run's step and
  evaluation batch, is `memory.measured_step_eval_peak_mb` from schema version 2), read under
  today's name in rows of an older schema (`renamed_columns`).

The names earlier versions gave reported metrics and objectives ("memory_total_mb",
"predicted_run_peak_mb", the renamed columns) are the outcome vocabulary's, read as today's by
its one rule wherever a name is given (`outcome.column`: a result, a space, a flag, a row's
``objectives``); they sit below the store, which every layer reaches through it.

What else older stores and sweeps left is read where only its reader can: each technique
declares what older rows trained with (`Setting.older_stores`, gathered by `later_fields`); a
sweep's objectives, for rows written before the ``objectives`` column, come from its saved space
and, in a bare old store, are its first higher-is-better validation metric with memory
(`analysis.objectives`); the names Tune files of older sweeps pickle are `search.legacy`'s; the
early stopping's record reads a key it lacks as none (`search.stopping.asha`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..config import older_store_values
from ..outcome import RENAMED


def later_fields() -> dict[str, Any]:
    """Config fields newer than the first stores -> the value every older row implicitly had:
    the built-in models' own, and what each technique declares (`Setting.older_stores`)."""
    return {"model.init_checkpoint": None, "model.fused_norm": "none", **older_store_values()}


def renamed_columns(data: pa.Table) -> pa.Table:
    """Rows of a schema older than a column's renaming (`outcome.RENAMED`) read with its value
    under today's name; the old name stays only where a newer row holds a value of its own."""
    for old, (new, since) in RENAMED.items():
        if old not in data.column_names or "schema_version" not in data.column_names:
            continue
        older = pc.less(data["schema_version"], since)
        values = data[old].cast(pa.float64())
        if new in data.column_names:
            moved = pc.if_else(older, values, data[new].cast(pa.float64()))
            data = data.set_column(data.column_names.index(new), new, moved)
        else:
            moved = pc.if_else(older, values, pa.nulls(len(data), pa.float64()))
            data = data.append_column(new, moved)
        kept = pc.if_else(older, pa.nulls(len(data), pa.float64()), values)
        data = data.drop_columns(old)
        if kept.null_count < len(data):
            data = data.append_column(old, kept)
    return data


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
