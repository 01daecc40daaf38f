"""The memory ladder's newer parts (`benchmarks/memory_ladder.py`): its rung at the chain plan of
least recomputation within 5% of the paper's combination's run peak, its timing of real updates
(rewiring ones left out), and the rendered table's time columns beside the memory ratios."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

from tests.conftest import tiny_wrn_config
from tune_lowmem.config import TrialConfig
from tune_lowmem.models.strategies import CHAIN_PLANS
from tune_lowmem.techniques.rewiring import planned_run, rewires_after

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_least_recomputation_rung_is_the_last_plan_within_five_percent():
    ladder = benchmark("memory_ladder")
    base = {"model.depth": 16, "model.width": 1, "schedule.batch_size": 8, "device": "cpu"}
    paper = {"checkpoint": "chain-min", "model.fused_norm": "none", "microbatch.size": 4}
    chosen = ladder.LeastRecomputation(paper).resolve(base)

    def peak(strategy: str) -> float:
        return ladder.run_peak_mb(TrialConfig.from_dict({**base, **paper, "checkpoint": strategy}))

    k = CHAIN_PLANS.index(chosen["checkpoint"])
    assert {**chosen, "checkpoint": "chain-min"} == paper
    assert peak(chosen["checkpoint"]) <= 1.05 * peak("chain-min")
    assert all(peak(plan) > 1.05 * peak("chain-min") for plan in CHAIN_PLANS[k + 1 :])
    assert 0 < k < len(CHAIN_PLANS) - 1  # the toy has plans on both sides of the limit


def test_timed_updates_leave_out_the_rewiring_ones():
    config = tiny_wrn_config(
        **{
            "sparsity.density": 0.5,
            "sparsity.period_schedule": "constant",
            "sparsity.constant_period": 2,
        }
    )
    ladder = benchmark("memory_ladder")
    seconds = ladder.timed_updates(config, 1, 1, 3)
    run = planned_run(config)  # the synthetic trainer's
    per_epoch = run.updates_per_epoch
    rewiring = [u for u in range(10) if rewires_after(config.sparsity, run, u // per_epoch, u)]
    assert rewiring and len(seconds) == 3 and all(s > 0 for s in seconds.values())
    assert not set(seconds) & set(rewiring)  # timed updates run past a rewiring, without it
    assert max(seconds) > min(rewiring)


def test_the_rendered_ladder_shows_time_beside_memory():
    docs = benchmark("render_docs")
    stored = json.loads((BENCHMARKS / "results" / "memory_ladder.json").read_text())["run-peak"]
    untimed = docs.memory_ladder(stored)
    timed = copy.deepcopy(stored)
    for row in timed["wrn"]["rows"]:
        row.update(measured_update_s=0.25 * (1 + row["index"]), measured_slowdown=1 + row["index"])
    timed["wrn"]["time"] = {
        "threads": 1,
        "warm_up": 2,
        "updates": 5,
        "machine": {"quiet": False, "label": "a test's record"},
    }
    rendered = docs.memory_ladder(timed)
    assert "s/update" not in untimed and "| x run | s/update | x time | act MB |" in rendered
    assert "| 17 | + microbatch 1 | 2.65 | 150.8x | 4.500 | 18.00x | 1.04 |" in rendered
    assert "median of 5 updates after 2 warm-up steps" in rendered
    assert "a test's record" in rendered
