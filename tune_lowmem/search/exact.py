"""Which choices of a param train the same model: they change memory, never the results.

Why: a sampler that learns accuracy from trials need not learn it twice for two points that
train alike. `EXACT_VALUES` lists, per param, the values that give the plain step's results
(bit for bit or within rounding; docs/techniques.md gives each technique's exactness, and the
techniques' exactness tests prove it): every checkpointing strategy, every fused BN-ReLU mode,
every sparse storage layout (it only changes how memory is counted), and the unfused and the
exact fused step (not `heavy-ball`, which is lossy). Two points that differ only in such values
share one training key (`training_key`), so they share one accuracy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

EVERY = None  # every value of the param is exact
EXACT_VALUES: dict[str, tuple[str, ...] | None] = {
    "checkpoint": EVERY,
    "model.fused_norm": EVERY,
    "sparsity.storage": EVERY,
    "fused_step": ("none", "exact"),
}
SAME_TRAINING = "<exact>"  # what an exact value reads as in a training key


def exact(name: str, value: Any) -> bool:
    """Whether `value` of param `name` trains as the plain step does."""
    if name not in EXACT_VALUES:
        return False
    values = EXACT_VALUES[name]
    return values is EVERY or value in values


def training_key(params: Mapping[str, Any]) -> str:
    """The point with each exact value replaced by one marker: equal for points that train
    the same model."""
    same = {n: SAME_TRAINING if exact(n, v) else v for n, v in params.items()}
    return json.dumps(same, sort_keys=True, default=str)
