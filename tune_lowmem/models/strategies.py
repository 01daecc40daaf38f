"""The checkpointing strategies' names, and the one check of a name against a model's.

A model with strategies of its own declares them (`CHECKPOINT_STRATEGIES`, read by its task);
any other model has the generic rule's (`GENERIC_STRATEGIES`). Whoever takes a strategy (a
model's `set_grad_checkpointing`, the generic rule, the checkpointing technique's validation of a
config against its task) checks it here, so every refusal reads the same.

The chain plans (`models.chain`) are named ``chain-k``, k = 0 .. `CHAIN_POINTS`: k indexes the
chain's time-memory frontier by recomputation, so that each step of k buys back the same share
of time whatever the model (the frontier's length and shape are the model's and the input's).
chain-k is the plan of least estimated peak among the frontier's plans that recompute at most
(1 - k / CHAIN_POINTS) of the FLOPs the least-memory plan recomputes: chain-0 is that plan
(``chain-min``, its older name), chain-`CHAIN_POINTS` recomputes nothing, and along k the
recomputation never grows and the estimated peak never falls.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..validation import require

# The checkpointing strategies of any model built of sequential stages of blocks (the generic
# rule, for a model with no strategies of its own): none, each block its own segment, each run
# of two consecutive blocks one segment.
GENERIC_STRATEGIES = ("none", "blocks-1", "blocks-2")

CHAIN_MIN = "chain-min"  # the least-memory chain plan, chain-0
CHAIN_POINTS = 8  # chain-k: k = 0 .. CHAIN_POINTS, in steps of 1/8 of chain-min's recomputation
CHAIN_PLANS = tuple(f"chain-{k}" for k in range(CHAIN_POINTS + 1))
CHAIN_STRATEGIES = (CHAIN_MIN, *CHAIN_PLANS)
NOT_A_CHAIN = "chain plans need a model that runs as one chain of stages (the WideResNet)"


def chain_point(strategy: str) -> int | None:
    """k of a chain strategy (chain-min is chain-0); None for any other strategy."""
    if strategy == CHAIN_MIN:
        return 0
    return CHAIN_PLANS.index(strategy) if strategy in CHAIN_PLANS else None


def check(strategy: str, allowed: Sequence[str]) -> str:
    """`strategy` if it is one of `allowed` (a model's strategies), else the one-line
    `ConfigError` of the field ``checkpoint`` naming them (and, for a chain plan asked of a
    model that has none, why)."""
    chain_asked = isinstance(strategy, str) and strategy.startswith("chain-")
    why = "; " + NOT_A_CHAIN if chain_asked and not set(CHAIN_STRATEGIES) & set(allowed) else ""
    require(
        isinstance(strategy, str) and strategy in allowed,
        "checkpoint",
        f"{strategy!r} is not allowed{why}; allowed: {', '.join(allowed)}",
    )
    return strategy
