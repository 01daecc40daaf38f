"""chain-min and chain-k: nested checkpoints placed by the chain DP. The DP is checked against a
brute-force search over every plan, scored by simulating the plan's backward pass; every point of
its frontier (chain-k) is exact against the plain model (outputs, gradients and BN buffers),
recomputes less along k (counted by torch's FLOP counter) for no less predicted memory, and the
profiler predicts what it holds."""

import functools
import random

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tests.conftest import tiny_wrn_config
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.memory.measure import measure
from tune_lowmem.memory.predict import predict
from tune_lowmem.models import chain
from tune_lowmem.models.chain import StageCost
from tune_lowmem.models.strategies import CHAIN_PLANS, CHAIN_POINTS
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


@pytest.mark.parametrize("seed", range(4))
def test_each_point_is_the_least_peak_within_its_share_of_recomputation(seed):
    costs, output = random_chain(seed, n=6)
    front = chain.frontier(costs, output)
    points = [chain.point(costs, output, k, CHAIN_POINTS) for k in range(CHAIN_POINTS + 1)]
    assert points[0] == front[0] and points[-1].recompute == 0
    for k, option in enumerate(points):
        budget = front[0].recompute * (1 - k / CHAIN_POINTS)
        assert option.recompute <= budget
        assert option.peak == min(o.peak for o in front if o.recompute <= budget)
    assert [o.peak for o in points] == sorted(o.peak for o in points)


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
    assert chain.depth(model.chain_plan((6, 3, 16, 16), 0)) >= 2  # some stages run thrice
    assert_exact(fused, "chain-min")


@pytest.mark.parametrize("strategy", CHAIN_PLANS)
def test_every_chain_plan_is_exact(strategy):
    """timm's habit: outputs and gradients equal with each plan on and off."""
    assert_exact("none", strategy)


def assert_exact(fused: str, strategy: str) -> None:
    ref_loss, ref_grads, ref_state = step(fused, "none")
    loss, grads, state = step(fused, strategy)
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


@pytest.mark.parametrize("strategy", ["chain-1", "chain-4"])
def test_the_dry_run_runs_the_plan_a_step_trains_with(strategy):
    """The profiler's fake step and a real training step run the same placement: the same
    FLOPs, recomputation included, and the same activation memory within the profiler's error
    (WRN-16-1 at 8 images, where both plans recompute, each its own share)."""
    flat = {"model.depth": 16, "schedule.batch_size": 8}
    config = tiny_wrn_config(checkpoint=strategy, **flat)
    predicted, measured = predict(config), measure(config)
    assert predicted.flops_per_step == measured.flops_per_step
    assert predicted.activation_bytes == pytest.approx(measured.activation_bytes, rel=0.03)
    plain = predict(tiny_wrn_config(**flat), workspace=False).flops_per_step
    assert predicted.flops_per_step > plain


def recomputed_flops(strategy: str) -> int:
    """FLOPs of one training forward and backward of WRN-16-1 on 8 images beyond the plain
    step's, counted by torch (`FlopCounterMode`): what the strategy recomputes."""

    def counted(strategy: str) -> int:
        model = WideResNet(depth=16, width=1)
        model.set_grad_checkpointing(strategy)
        x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        with FlopCounterMode(display=False) as counter:
            F.cross_entropy(model(x), torch.zeros(8, dtype=torch.long)).backward()
        return counter.get_total_flops()

    return counted(strategy) - counted("none")


def test_along_k_recomputation_falls_and_predicted_memory_does_not():
    """chain-0 .. chain-8 on a toy WRN-16-1 at 8 images: torch counts less recomputation at each
    step of k where the plan changes (none at the last), and the dry run predicts at least as
    much activation memory."""
    flat = {"model.depth": 16, "schedule.batch_size": 8}
    plans = [WideResNet(depth=16, width=1).chain_plan((8, 3, 32, 32), k) for k in range(9)]
    assert len(set(plans)) >= 6  # the toy's frontier has that many points to walk
    recomputed = [recomputed_flops(strategy) for strategy in CHAIN_PLANS]
    memory = [
        predict(tiny_wrn_config(checkpoint=strategy, **flat), workspace=False).activation_bytes
        for strategy in CHAIN_PLANS
    ]
    for k in range(CHAIN_POINTS):
        same = plans[k] == plans[k + 1]
        assert recomputed[k + 1] == recomputed[k] if same else recomputed[k + 1] < recomputed[k]
        assert memory[k + 1] >= memory[k]
    assert recomputed[-1] == 0 and memory[-1] > memory[0]


def test_unknown_strategy_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match=r"^checkpoint: 'chain-max' .*chain-min[^\n]*$"):
        tiny_wrn_config(checkpoint="chain-max")


def test_a_k_off_the_frontier_names_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"^checkpoint: 'chain-9' is not allowed; allowed: .*"):
        tiny_wrn_config(checkpoint="chain-9")
    with pytest.raises(ConfigError, match=r"chain-min, chain-0, chain-1, .*, chain-8$"):
        WideResNet(depth=10, width=1).set_grad_checkpointing("chain--1")


@pytest.mark.parametrize(
    "flat, allowed",
    [
        ({"task": "dct-iwslt14"}, "none, residual-1"),
        ({"task": "tv-cifar10", "model.arch": "resnet18"}, "none, blocks-1, blocks-2"),
    ],
)
def test_a_model_that_is_not_one_chain_refuses_chain_plans(flat, allowed):
    with pytest.raises(ConfigError) as refused:
        TrialConfig.from_dict({**flat, "checkpoint": "chain-2"})
    assert str(refused.value) == (
        "checkpoint: 'chain-2' is not allowed; chain plans need a model that runs as one chain "
        f"of stages (the WideResNet); allowed: {allowed}"
    )
