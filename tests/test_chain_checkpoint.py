"""chain-min: nested checkpoints placed by the chain DP. The DP is checked against a brute-force
search over every plan, scored by simulating the plan's backward pass; the strategy is exact
against the plain model (gradients and BN buffers), and the profiler predicts what it holds."""

import functools
import random

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import tiny_wrn_config
from tune_lowmem.config import ConfigError
from tune_lowmem.memory.measure import measure
from tune_lowmem.memory.predict import predict
from tune_lowmem.models import chain
from tune_lowmem.models.chain import StageCost
from tune_lowmem.models.wideresnet import WideResNet


def all_plans(s: int, e: int):
    """Every plan for stages s..e-1: a first child (stage s, or a checkpointed s..u-1 with any
    plan of its own) followed by any plan of the rest."""
    if s == e:
        yield ()
        return
    for rest in all_plans(s + 1, e):
        yield (s, *rest)
    for u in range(s + 1, e):
        for inner in all_plans(s, u):
            for rest in all_plans(u, e):
                yield (inner, *rest)


def simulate(plan, costs, output_bytes):
    """(peak, recomputed FLOPs) of a plan by walking its forward and backward passes, holding
    each stage's saved bytes and output until its backward (an output only until the backward
    of the stage or checkpoint that produced it begins), peaks taken at each stage's backward
    with the gradient of its output and its working set."""
    size = [c.input_bytes for c in costs] + [output_bytes]
    held, peak, recompute = {}, 0, 0

    def forward(plan):
        for child in plan:
            if isinstance(child, tuple):
                held[("x", chain.stages_of(child)[-1] + 1)] = size[chain.stages_of(child)[-1] + 1]
            else:
                held[("saved", child)] = costs[child].saved_bytes
                held[("x", child + 1)] = size[child + 1]

    def backward(plan):
        nonlocal peak, recompute
        for child in reversed(plan):
            stages = chain.stages_of(child) if isinstance(child, tuple) else [child]
            del held[("x", stages[-1] + 1)]
            if isinstance(child, tuple):
                recompute += sum(costs[t].flops for t in stages)
                forward(child)
                backward(child)
            else:
                gradient = size[child + 1]
                peak = max(peak, sum(held.values()) + gradient + costs[child].backward_bytes)
                del held[("saved", child)]

    forward(plan)
    backward(plan)
    assert not held
    return peak, recompute


def random_chain(seed: int, n: int = 5):
    rng = random.Random(seed)
    costs = tuple(
        StageCost(rng.randint(1, 9), rng.randint(0, 9), rng.randint(0, 9), rng.randint(1, 9))
        for _ in range(n)
    )
    return costs, rng.randint(1, 9)


@pytest.mark.parametrize("seed", range(4))
def test_frontier_is_the_brute_force_pareto_front(seed):
    costs, output = random_chain(seed)
    scored = {simulate(plan, costs, output) for plan in all_plans(0, len(costs))}
    pareto = sorted(
        (p, r)
        for p, r in scored
        if not any(q <= p and s < r or q < p and s <= r for q, s in scored)
    )
    front = chain.frontier(costs, output)
    assert [(o.peak, o.recompute) for o in front] == pareto
    for option in front:  # each plan really scores what the DP says
        assert simulate(option.plan, costs, output) == (option.peak, option.recompute)
    assert chain.least_memory(costs, output) == front[0].plan


@functools.cache
def step(fused: str, strategy: str):
    """Loss, gradients and state (BN buffers) after one training forward/backward of WRN-16-1
    in fp32 on 16x16 images."""
    torch.manual_seed(0)
    model = WideResNet(depth=16, width=1)
    model.set_fused_norm(fused)
    model.set_grad_checkpointing(strategy)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(6, 3, 16, 16, generator=generator)
    y = torch.randint(0, 10, (6,), generator=generator)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return loss.detach(), grads, {n: b.clone() for n, b in model.state_dict().items()}


@pytest.mark.parametrize("fused", ["none", "block"])
def test_chain_min_is_exact(fused):
    model = WideResNet(depth=16, width=1)
    model.set_fused_norm(fused)
    plan = chain.least_memory(*model.chain_costs((6, 3, 16, 16)))
    assert chain.depth(plan) >= 2  # checkpoints nest: some stages run forward three times
    ref_loss, ref_grads, ref_state = step(fused, "none")
    loss, grads, state = step(fused, "chain-min")
    torch.testing.assert_close(loss, ref_loss)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    for name in ref_state:  # running statistics updated once, as by the plain step
        torch.testing.assert_close(state[name], ref_state[name], msg=name)


def test_chain_min_is_predicted_and_holds_less_than_residual_2star():
    block = {"model.fused_norm": "block", "schedule.batch_size": 32}
    config = tiny_wrn_config(checkpoint="chain-min", **block)
    predicted, measured = predict(config), measure(config)
    assert predicted.activation_bytes == pytest.approx(measured.activation_bytes, rel=0.03)
    assert predicted.flops_per_step == measured.flops_per_step
    paper = predict(tiny_wrn_config(checkpoint="residual-2*", **block))
    assert predicted.activation_bytes < paper.activation_bytes
    plain = predict(tiny_wrn_config(**block))
    assert predicted.flops_per_step > plain.flops_per_step  # what the recomputation costs


def test_unknown_strategy_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match=r"^checkpoint: 'chain-max' .*chain-min[^\n]*$"):
        tiny_wrn_config(checkpoint="chain-max")
