"""The exact values the search merges come from the techniques' and tasks' own declarations."""

from __future__ import annotations

from typing import ClassVar

import pytest

from tune_lowmem.config import ConfigError
from tune_lowmem.search import exact
from tune_lowmem.techniques.base import EVERY


def test_the_builtin_declarations_give_the_documented_exact_values():
    assert dict(exact.exact_values()) == {
        "checkpoint": EVERY,
        "model.fused_norm": EVERY,
        "sparsity.storage": EVERY,
        "fused_step": ("none", "exact"),
        "cuda_workspace.cublas": EVERY,
        "cuda_workspace.cudnn_limit_mb": EVERY,
    }
    plain = {"checkpoint": "none", "model.fused_norm": "none", "sparsity.storage": "csr"}
    saving = {"checkpoint": "residual-1", "model.fused_norm": "block", "sparsity.storage": "best"}
    assert exact.training_key(plain) == exact.training_key(saving)
    fused = [exact.training_key({"fused_step": v}) for v in ("none", "exact", "heavy-ball")]
    assert fused[0] == fused[1] != fused[2]


def test_two_owners_declaring_one_param_differently_are_refused():
    class Strict:
        EXACT: ClassVar = {"checkpoint": ("none",)}

    class Loose:
        EXACT: ClassVar = {"checkpoint": EVERY}

    with pytest.raises(
        ConfigError, match=r"^checkpoint: declared exact differently by Strict and Loose; one"
    ):
        exact._declared((Strict, Loose))
