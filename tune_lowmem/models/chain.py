"""Checkpoint placement for a chain of stages by dynamic programming (in the spirit of rotor:
Beaumont et al. 2019, optimal checkpointing for heterogeneous chains; Griewank's revolve).

A model that runs as a chain of stages x_{t+1} = stage_t(x_t) can be trained with nested
checkpoints: a *plan* for the stages s..e-1 is a tuple of children run one after the other,
each either a stage index (run as usual: autograd keeps what it saves) or a plan of its own for
the stages s'..u-1 run as one checkpointed segment (only its input is kept; in the backward pass
it is recomputed following its own plan, so a stage can run forward more than twice). This is
what `torch.utils.checkpoint` does when checkpoints nest (`run_plan`).

`frontier` finds, for the whole chain, every plan that no other beats in both estimated peak
bytes and recomputed FLOPs, from per-stage costs (`StageCost`, estimated by the model), and
`point` picks one of them by how much it may recompute (the strategies chain-k). The
estimate only places the checkpoints; what a plan really holds is what the profiler measures by
running it. Memory model of a plan's backward pass (bytes beyond its input, which the caller
holds, the incoming gradient included):
- a stage t run as usual, then the rest of the chain: while the rest is backpropagated, t's
  saved tensors and its output (the rest's input) are alive on top of the rest's own peak; then
  t's backward holds its saved tensors, the gradient of its output and its working set;
- a checkpointed child (s..u-1), then the rest: the rest's peak on top of x_u, then the child's
  own peak (its recomputation and backward).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import torch
from torch import nn

from .segments import run_checkpointed

Plan = tuple  # children: int (a stage run as usual) or a Plan (a checkpointed sub-chain)


@dataclasses.dataclass(frozen=True)
class StageCost:
    """One stage's estimated costs: bytes of its input; bytes its forward keeps for the backward
    beyond that input; bytes its backward needs beyond those and its output's gradient (its
    input's gradient and temporaries); forward FLOPs."""

    input_bytes: int
    saved_bytes: int
    backward_bytes: int
    flops: int


@dataclasses.dataclass(frozen=True, order=True)
class Option:
    """A plan with its estimated backward peak and recomputed FLOPs."""

    peak: int
    recompute: int
    plan: Plan = dataclasses.field(compare=False)


@functools.lru_cache(maxsize=64)
def frontier(costs: tuple[StageCost, ...], output_bytes: int) -> tuple[Option, ...]:
    """The plans for the whole chain that are Pareto-optimal in (peak, recomputed FLOPs), by
    increasing peak (so by decreasing recomputation); the first, of least peak, recomputes the
    least of those of its peak. Cached: a model asks for its input's shape at every step."""
    n = len(costs)
    size = [c.input_bytes for c in costs] + [output_bytes]
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c.flops)

    @functools.cache
    def front(s: int, e: int) -> tuple[Option, ...]:
        stage = costs[s]
        kept = stage.saved_bytes + size[s + 1]
        own = kept + stage.backward_bytes
        if s + 1 == e:
            options = [Option(own, 0, (s,))]
        else:
            options = [
                Option(max(own, kept + r.peak), r.recompute, (s, *r.plan)) for r in front(s + 1, e)
            ]
        for u in range(s + 1, e):  # stages s..u-1 checkpointed, then the rest
            again = prefix[u] - prefix[s]  # they run forward once more
            for q in front(s, u):
                for r in front(u, e):
                    peak = max(size[u] + r.peak, q.peak)
                    options.append(
                        Option(peak, again + q.recompute + r.recompute, (q.plan, *r.plan))
                    )
        return _pareto(options)

    return front(0, n)


def _pareto(options: list[Option]) -> tuple[Option, ...]:
    best: list[Option] = []
    for option in sorted(options, key=lambda o: (o.peak, o.recompute, depth(o.plan))):
        if not best or option.recompute < best[-1].recompute:
            best.append(option)
    return tuple(best)


def depth(plan: Plan) -> int:
    return max((1 + depth(c) for c in plan if isinstance(c, tuple)), default=0)


def point(costs: tuple[StageCost, ...], output_bytes: int, k: int, points: int) -> Option:
    """The frontier's point k of 0..`points` (`strategies`' chain-k): of the plans that
    recompute at most (1 - k / points) of what the least-memory plan recomputes, the one of least
    estimated peak. Point 0 is the least-memory plan, point `points` recomputes nothing."""
    front = frontier(costs, output_bytes)
    return next(o for o in front if o.recompute * points <= front[0].recompute * (points - k))


def stages_of(plan: Plan) -> list[int]:
    """The stage indices a plan runs, in order."""
    return [t for c in plan for t in (stages_of(c) if isinstance(c, tuple) else [c])]


def run_plan(plan: Plan, stages: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """Run the chain's stages following `plan`, each sub-plan as a nested checkpoint."""
    for child in plan:
        if isinstance(child, tuple):
            modules = [stages[t] for t in stages_of(child)]
            x = run_checkpointed(functools.partial(run_plan, child, stages), modules, x)
        else:
            x = stages[child](x)
    return x
