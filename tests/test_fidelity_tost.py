"""fidelity.py's equivalence test against values worked out independently: the t distribution
with 2 degrees of freedom has the closed form F(t) = 1/2 + t / (2 sqrt(t^2 + 2)), and scipy's
one-sample t-test against a mean shifted by the margin is the same pair of one-sided tests."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]


def fidelity():
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "benchmarks/fidelity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def tail_df2(t: float) -> float:
    """P(T > t) for Student's t with 2 degrees of freedom, by its closed form."""
    return 0.5 - t / (2 * math.sqrt(t * t + 2))


# the 95% quantile with 2 degrees of freedom: t / sqrt(t^2 + 2) = 0.9, so t^2 = 1.62 / 0.19
T95_DF2 = math.sqrt(1.62 / 0.19)


def test_a_wide_spread_crosses_the_margin_and_is_not_equivalent():
    # mean 0, SD 1, n 3: standard error 1/sqrt(3); the 90% half-width 2.92/sqrt(3) = 1.686 > 1.5
    result = fidelity().tost([-1.0, 0.0, 1.0], margin=1.5, alpha=0.05)
    half = T95_DF2 / math.sqrt(3)
    assert result["interval"] == pytest.approx([-half, half])
    assert result["p_lower"] == pytest.approx(tail_df2(1.5 * math.sqrt(3)))  # 0.0608
    assert result["p_upper"] == pytest.approx(result["p_lower"])
    assert result["p_lower"] > 0.05 and not result["equivalent"]


def test_a_narrow_spread_inside_the_margin_is_equivalent():
    # mean 0.2, SD 0.5, n 3: the interval 0.2 +- 0.843 lies inside (-1.5, 1.5)
    result = fidelity().tost([-0.3, 0.2, 0.7], margin=1.5, alpha=0.05)
    se = 0.5 / math.sqrt(3)
    assert result["mean"] == pytest.approx(0.2) and result["sd"] == pytest.approx(0.5)
    assert result["interval"] == pytest.approx([0.2 - T95_DF2 * se, 0.2 + T95_DF2 * se])
    assert result["p_lower"] == pytest.approx(tail_df2(1.7 / se))
    assert result["p_upper"] == pytest.approx(tail_df2(1.3 / se))
    assert max(result["p_lower"], result["p_upper"]) < 0.05 and result["equivalent"]


@pytest.mark.parametrize("shift, equivalent", [(0.3, True), (1.2, False), (-1.2, False)])
def test_twenty_seeds_agree_with_scipys_shifted_one_sample_tests(shift, equivalent):
    rng = random.Random(7)
    diffs = [shift + rng.gauss(0, 1.5) for _ in range(20)]
    result = fidelity().tost(diffs, margin=1.5, alpha=0.05)
    lower = stats.ttest_1samp(diffs, -1.5, alternative="greater").pvalue
    upper = stats.ttest_1samp(diffs, 1.5, alternative="less").pvalue
    assert result["p_lower"] == pytest.approx(lower) and result["p_upper"] == pytest.approx(upper)
    low, high = result["interval"]
    assert result["equivalent"] is equivalent is (-1.5 < low and high < 1.5)


def test_too_few_or_identical_differences_are_refused():
    with pytest.raises(ValueError, match="at least 2"):
        fidelity().tost([0.1], margin=1.5, alpha=0.05)
    with pytest.raises(ValueError, match="all equal"):
        fidelity().tost([0.1, 0.1], margin=1.5, alpha=0.05)


def test_the_verdict_judges_the_final_epochs_validation_accuracy_in_points():
    module = fidelity()
    theirs = {seed: [(2.0, 0.20), (1.5, 0.300)] for seed in module.SEEDS}
    # the first epoch and the train loss differ widely; the final accuracies by 0.1 +- 0.2 points
    ours = {
        seed: [(9.0, 0.90), (0.1, 0.300 + (0.001 if i % 2 else 0.003))]
        for i, seed in enumerate(module.SEEDS)
    }
    result = module.judge(ours, theirs)
    assert [s["diff_points"] for s in result["seeds"]] == pytest.approx(
        [0.1 if i % 2 else 0.3 for i in range(len(module.SEEDS))]
    )
    assert result["mean"] == pytest.approx(0.2) and result["equivalent"]
    assert result["protocol"]["margin_points"] == module.MARGIN == 1.5


def test_rows_of_a_run_split_over_processes_are_joined_and_checked(tmp_path):
    module = fidelity()
    lines = [f"{kind} seed {seed}: [(2.0, 0.3)]" for seed in module.SEEDS for kind in module.SIDES]
    first, second = tmp_path / "first.err", tmp_path / "second.err"
    first.write_text("\n".join(["project seed 5: [(9.0, 0.9)]", *lines[:5]]) + "\n")
    second.write_text("\n".join(lines[3:]) + "\n")  # overlapping, agreeing
    done = module.read_rows([str(first), str(second)])
    assert len(done) == 2 * len(module.SEEDS) and ("project", 5) not in done
    seeds = module.SEEDS
    with pytest.raises(SystemExit, match=f"no rows for independent {seeds[2]}, project {seeds[3]}"):
        module.read_rows([str(first)])
    second.write_text(second.read_text().replace("(2.0, 0.3)", "(2.0, 0.4)", 1))
    with pytest.raises(SystemExit, match="differs"):
        module.read_rows([str(first), str(second)])


@pytest.mark.parametrize("n", [20, 30, 40])
def test_power_agrees_with_the_noncentral_t_approximation(n):
    # at a true difference of 0 each one-sided test fails with P(T' < t_crit), T' noncentral
    # with parameter margin / standard error; the two fail together rarely, so the power is
    # about 1 - 2 P(T' < t_crit) where the power is high (the approximation ignores that both
    # share one sample SD, which matters at low power)
    sd, module = 2.19, fidelity()
    ncp, critical = 1.5 / (sd / math.sqrt(n)), stats.t.ppf(0.95, n - 1)
    approximate = 1 - 2 * stats.nct.cdf(critical, n - 1, ncp)
    assert module.power(n, sd, 1.5, 0.05) == pytest.approx(max(approximate, 0), abs=0.03)


def test_the_protocols_seed_count_has_the_power_it_claims():
    module = fidelity()
    assert module.power(10, module.OBSERVED_SD) == pytest.approx(0.31, abs=0.01)  # protocol 1
    assert len(module.SEEDS) == module.seeds_needed(module.OBSERVED_SD) == 20
    assert module.power(20, module.OBSERVED_SD) >= module.POWER > module.power(19, 2.19)
    at_margin = module.power(20, module.OBSERVED_SD, true_difference=module.MARGIN)
    assert at_margin == pytest.approx(module.ALPHA, abs=0.002)  # simulation error 0.0005
    used = {*range(9), *range(100, 110)}  # the pilot's seeds and protocol 1's
    assert used.isdisjoint(module.SEEDS)
