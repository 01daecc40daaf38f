"""The memory ladders: the paper's combinations, then the new techniques one at a time.

WideResNet-28-2 (batch 100, the paper's, unless --batch) or, with --task dct, the DynamicConv
Transformer (a full 4,000-token minibatch of 30-token sentence pairs). Each rung is one
`TrialConfig`, on top of the one before within its chain. Sparse layers are trained packed
(`techniques.packed`), so per rung, from the profiler's dry run (`memory.predict`, fake tensors):
- "run peak": the run's peak, the searched memory: the most bytes live at once over a training
  step (with its minibatch as the device holds it), a sparse run's first rewiring and an
  evaluation batch, operators' workspace on this CPU included (`memory.workspace`), the CPU
  heap's objects left out (torch's allocator, which measures it, never serves them);
  "x run" its ratio to the baseline's;
- "act": a step's activation part; "stored": a step's total as the paper counts it
  (`memory.predicted_total_mb`); "acc csr": the same with sparse weights counted as CSR
  (`memory.stored.accounted`), with their ratios to the baseline's stored total;
- in the rows only: the run's peak of tensors alone (`workspace=False`, from shapes), the
  activation part of the step and, for a rung whose run rewires, of its first rewiring, and
  FLOPs per step against the baseline's.
With --measure, each rung named is measured independently of the prediction, at the ladder's
batch (every rung on one basis), in a process of its own under a time limit
(`memory.allocations`: torch's allocator reports every allocation and free to torch.profiler,
replayed): at each step that may be the run's peak (`stepping.peak_steps`: the step after the
warm-up, or a sparse run's first update and its first rewiring's), with one evaluation batch
after it, the most bytes live at once, everything included (weights, state, gradients, the
minibatch, activations, kernels' workspace; the synthetic data set is none), the larger over
those steps: "meas run", its ratio to the measured baseline's, and the prediction's error.
With --measure-time, every rung printed is timed too, each in a process of its own on
torch's threads (OMP_NUM_THREADS): the real `Trainer.train_step` at the ladder's batch on
synthetic minibatches (`memory.stepping`), warmed up until one step has updated the weights and
then `--time-warm-up` steps more, then the median over `--time-updates` updates of seconds per
update, an update after which the run rewires left out (a rewiring is not a step's cost); "s/upd"
is that median and "x time" its ratio to the baseline rung's. The machine's state around the
timing is recorded with it (`machine.Watch`): a loaded machine is refused unless --allow-load,
and then the record says so.
The last WRN rung is the paper's combination (chain-min's rung, 23) at the chain plan that
recomputes least while the run's predicted peak stays within 5% of that rung's
(`LeastRecomputation`: chain-8 down to chain-0, the first whose predicted run peak is within).
With --key KEY the rows go to benchmarks/results/memory_ladder.json, the benchmark's one result
file, as task TASK of its entry KEY (a run of both tasks is two commands with the same key), with
the config every rung is on top of and the heap constant its stored totals were predicted with
(`HEAP_BYTES_PER_STORAGE`), so that `tests/test_result_drift.py` can predict them again, and,
when timed, the timing's settings and machine record.

    .venv/bin/python benchmarks/memory_ladder.py [--task wrn|dct] [--batch 100]
        [--measure 0 23 31] [--measure-timeout 3600] [--only 1 5] [--key KEY]
        [--measure-time [--time-updates 5] [--time-warm-up 2] [--time-timeout 7200]
        [--allow-load]]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB
from tune_lowmem.memory import predict as predict_module
from tune_lowmem.memory.allocations import Allocations, measure_allocations
from tune_lowmem.memory.predict import (
    dry_run,
    occasional_work,
    predict,
    run_peak_storage,
    shape_key,
)
from tune_lowmem.memory.stepping import peak_steps, synthetic_trainer, warm_up
from tune_lowmem.memory.stored import accounted
from tune_lowmem.models.strategies import CHAIN_PLANS
from tune_lowmem.techniques.rewiring import RunLength, rewires_after

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Watch, add_arguments, describe

RESULTS = Path(__file__).parent / "results" / "memory_ladder.json"

PAPER = {  # the paper's ratios to its baseline (Sohoni et al. 2019, Table 3 and text)
    "fp16 + residual-2*": "9.5x",
    "+ microbatch 10": "33.2x",
    "+ 30% nonzeros": "60.7x",
    "fp16 + chain-min + fused block": "9.5x",
    "+ microbatch 10 (chain-min)": "33.2x",
    "+ 30% nonzeros (chain-min)": "60.7x",
    "+ microbatch 250 tokens": "8.7x",
}
FP16_CHAIN = [
    ("fp16 + residual-2*", {"precision": "fp16", "checkpoint": "residual-2*"}),
    ("+ microbatch 10", {"microbatch.size": 10}),
    ("+ 30% nonzeros", {"sparsity.density": 0.3}),
]
BLOCK = {"model.fused_norm": "block"}
# the new means on top of the last fused-block rung, one at a time (bf16: the fused step does not
# fit fp16's dynamic loss scaling, and bf16 weights take the same bytes)
BEYOND = [
    ("bf16 in place of fp16", {"precision": "bf16"}),
    ("+ fused step, exact (Nesterov)", {"fused_step": "exact"}),
    ("+ fused step heavy-ball (lossy)", {"fused_step": "heavy-ball"}),
    ("+ microbatch 5", {"microbatch.size": 5}),
    ("+ microbatch 2", {"microbatch.size": 2}),
    ("+ 10% nonzeros", {"sparsity.density": 0.1}),
    ("+ microbatch 1", {"microbatch.size": 1}),
]
FP32_STATE = [  # bf16 momentum only applies where the weights are fp32
    (
        "fp32 res-2* + block + mb 10 + 30% + h-ball",
        {
            "checkpoint": "residual-2*",
            **BLOCK,
            "microbatch.size": 10,
            "sparsity.density": 0.3,
            "fused_step": "heavy-ball",
        },
    ),
    ("+ bf16 momentum (lossy)", {"momentum_dtype": "bf16"}),
]
# the best exact combination (no lossy choice; microbatching's BN statistics over microbatches
# are the paper's), and what it takes beyond it
EXACT = [
    ("bf16 + chain-min + fused block", {"precision": "bf16", "checkpoint": "chain-min", **BLOCK}),
    ("+ fused step exact (exact chain)", {"fused_step": "exact"}),
    ("+ microbatch 2 (exact chain)", {"microbatch.size": 2}),
    ("+ 10% nonzeros (exact chain)", {"sparsity.density": 0.1}),
    ("+ microbatch 1 (exact chain)", {"microbatch.size": 1}),
    ("+ 5% nonzeros (exact chain)", {"sparsity.density": 0.05}),
]
# the paper's combination made real (chain-min's last rung) with each layer's smaller index layout
BEST = [("+ storage best (chain-min)", {"sparsity.storage": "best"})]
# the lossy choices on top of the exact chain's last rung (each labelled lossy)
LOSSY = [("+ fused step heavy-ball (lossy, on 5% exact)", {"fused_step": "heavy-ball"})]
WITHIN = 0.05  # the least-recomputation rung keeps the run's peak within this share
# the paper's chain with the DP-placed nested checkpoints in place of residual-2*
CHAIN_MIN = [
    ("fp32 chain-min + fused block", {"checkpoint": "chain-min", **BLOCK}),
    ("fp16 + chain-min + fused block", {"precision": "fp16"}),
    ("+ microbatch 10 (chain-min)", {"microbatch.size": 10}),
    ("+ 30% nonzeros (chain-min)", {"sparsity.density": 0.3}),
]
DCT = [
    ("baseline fp32", {}),
    ("fp16", {"precision": "fp16"}),
    ("+ residual-1", {"checkpoint": "residual-1"}),
    ("+ microbatch 250 tokens", {"microbatch.size": 250}),
    ("+ 40% nonzeros", {"sparsity.density": 0.4}),
    ("+ 10% nonzeros", {"sparsity.density": 0.1}),
]
INT8 = {"adam_state": "int8"}
# the Adam means, one at a time: on the paper's combination (rung 3) and on its 40% rung (4);
# the fused step (no fp16: loss scaling) without microbatches, where it saves the gradients;
# bf16 moments where the weights are fp32
DCT_BEYOND = [
    ("paper's + int8 Adam moments (lossy)", 3, {**INT8}),
    ("40% nonzeros + int8 Adam moments (lossy)", 4, {**INT8}),
    ("10% nonzeros + int8 Adam moments (lossy)", 5, {**INT8}),
]
DCT_FUSED = [
    ("bf16 + residual-1, no microbatch", {"precision": "bf16", "checkpoint": "residual-1"}),
    ("+ fused Adam step, exact", {"fused_step": "exact"}),
    ("+ int8 Adam moments (lossy)", {**INT8}),
    ("+ 40% nonzeros", {"sparsity.density": 0.4}),
]
# the paper's combination at the sparsity that first reaches its 8.7x on the run's peak, exact:
# without sparsity (or int8 moments, lossy) its fp16 weights and gradients and fp32 Adam moments
# (12 bytes a weight) alone hold more than 2437.65 / 8.7 MB; with bf16 in place of fp16 (moments
# in bf16, the weights' dtype: 8 bytes a weight) still more
DCT_AT_PAPERS_RATIO = [
    ("paper's + 30% nonzeros", 3, {"sparsity.density": 0.3}),
    ("paper's with bf16 in place of fp16", 3, {"precision": "bf16"}),
]
DCT_FP32_STATE = [
    ("fp32 + residual-1 + microbatch 250", {"checkpoint": "residual-1", "microbatch.size": 250}),
    ("+ bf16 Adam moments (lossy)", {"adam_state": "bf16"}),
    ("int8 in place of bf16 moments (lossy)", {**INT8}),
]


class LeastRecomputation(NamedTuple):
    """A rung's config chosen on the ladder's base when the rung is run: `flat` (a chain plan's
    rung) at the chain plan that recomputes least (chain-8, then down) while the run's predicted
    peak stays within `WITHIN` of `flat`'s own; chain-0, `flat`'s plan when it is chain-min, if
    no other does."""

    flat: dict

    def resolve(self, base: dict) -> dict:
        def peak(flat: dict) -> float:
            return run_peak_mb(TrialConfig.from_dict({**base, **flat}))

        limit = (1 + WITHIN) * peak(self.flat)
        plans = ({**self.flat, "checkpoint": plan} for plan in reversed(CHAIN_PLANS[1:]))
        return next(
            (flat for flat in plans if peak(flat) <= limit), {**self.flat, "checkpoint": "chain-0"}
        )


Rung = tuple[str, dict | LeastRecomputation]


def chain(steps: list[tuple[str, dict]], start: dict | None = None) -> list[tuple[str, dict]]:
    """Each step's config on top of the ones before it (and of `start`)."""
    flat, rungs = dict(start or {}), []
    for label, step in steps:
        flat = {**flat, **step}
        rungs.append((label, dict(flat)))
    return rungs


def wrn_rungs() -> list[Rung]:
    ladder = [
        ("baseline fp32", {}),
        ("fp32 residual-2*", {"checkpoint": "residual-2*"}),
        ("fp32 residual-2*-nested", {"checkpoint": "residual-2*-nested"}),
        (
            "fp32 residual-2* + fused unit",
            {"checkpoint": "residual-2*", "model.fused_norm": "unit"},
        ),
        ("fp32 residual-2* + fused block", {"checkpoint": "residual-2*", **BLOCK}),
        *chain(FP16_CHAIN),
    ]
    fused = chain([(f"{label} + fused block", {**step, **BLOCK}) for label, step in FP16_CHAIN])
    return [
        *ladder,
        *fused,
        *chain(BEYOND, fused[-1][1]),
        *chain(FP32_STATE),
        *(paper := chain(CHAIN_MIN)),
        *(exact := chain(EXACT)),
        *chain(LOSSY, exact[-1][1]),
        *chain(BEST, paper[-1][1]),
        (
            f"paper's (23) at least recomputation, run peak +{WITHIN:.0%}",
            LeastRecomputation(paper[-1][1]),
        ),
    ]


def dct_rungs() -> list[tuple[str, dict]]:
    paper = chain(DCT)

    def on_paper(rungs: list[tuple[str, int, dict]]) -> list[tuple[str, dict]]:
        return [(label, {**paper[base][1], **step}) for label, base, step in rungs]

    return [
        *paper,
        *on_paper(DCT_BEYOND),
        *chain(DCT_FUSED),
        *chain(DCT_FP32_STATE),
        *on_paper(DCT_AT_PAPERS_RATIO),
    ]


def timed_updates(config: TrialConfig, threads: int, warm: int, updates: int) -> dict[int, float]:
    """Seconds of `updates` updates of `config` by its real `Trainer.train_step` on `threads`
    CPU threads, by 0-based update, after the warm-up (`stepping.warm_up`, then `warm` steps);
    an update after which the run rewires is left out, and one more taken."""
    torch.set_num_threads(threads)
    trainer, batches = synthetic_trainer(config, None)
    warm_up(trainer, batches)
    for _ in range(warm):
        trainer.train_step(next(batches))
    run, seconds = RunLength.of(config, trainer.task), {}
    while len(seconds) < updates:
        batch, update = next(batches), trainer.updates
        rewires = config.sparsity.enabled and rewires_after(
            config.sparsity, run, trainer.epoch, update
        )
        started = time.perf_counter()
        trainer.train_step(batch)
        if not rewires:
            seconds[update] = time.perf_counter() - started
    return seconds


def _update_seconds(flat: dict, threads: int, warm: int, updates: int) -> list[float]:
    """`timed_updates` of `flat`'s config, in order (what a process of its own returns)."""
    return list(timed_updates(TrialConfig.from_dict(flat), threads, warm, updates).values())


def _run_peak(flat: dict) -> tuple[list[int | None], Allocations]:
    """The allocator's run peak of `flat`'s config: the measurement at each step that may be the
    run's peak, each with an evaluation after it, the one with the larger peak kept."""
    config = TrialConfig.from_dict(flat)
    updates = peak_steps(config)
    steps = [measure_allocations(config, None, update) for update in updates]
    return updates, max(steps, key=lambda step: step.run_peak_bytes)


def in_own_process(fn: Callable, args: tuple, timeout: float):
    """``fn(*args)`` in a process of its own (the profiler's trace, the allocator and the
    kernels' caches start clean), None when it runs past `timeout` seconds."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # leaving it ends the process
        try:
            return pool.apply_async(fn, args).get(timeout)
        except multiprocessing.TimeoutError:
            return None


def base_config(task: str, batch: int) -> dict:
    """What every rung of `task`'s ladder is on top of (`batch`: WRN images per minibatch)."""
    if task == "wrn":
        return {"model.depth": 28, "model.width": 2, "schedule.batch_size": batch, "device": "cpu"}
    return {"task": "dct-iwslt14", "schedule.max_tokens": 4000, "device": "cpu"}


THIS_MACHINE = ("run_peak_mb", "x_run_peak")  # with this CPU's workspace: not from shapes alone


def run_peak_mb(config: TrialConfig, workspace: bool = True) -> float:
    """The predicted run's peak in MB, tensor storage (with this CPU's operators' workspace when
    `workspace`), the CPU heap's objects left out: what torch's allocator can be held to."""
    return run_peak_storage(config, workspace=workspace) / MB


def predicted_fields(config: TrialConfig, baseline: TrialConfig | None) -> dict:
    """A rung's figures from the profiler's dry run (see the module docstring), its ratios to
    the `baseline` rung's prediction (None: the rung is the baseline)."""
    held, csr = predict(config), accounted(config, "csr")
    base = predict(baseline) if baseline is not None else held
    run_peak = run_peak_mb(config)
    return {
        "run_peak_mb": run_peak,
        "x_run_peak": (run_peak_mb(baseline) if baseline is not None else run_peak) / run_peak,
        "run_tensor_peak_mb": run_peak_mb(config, workspace=False),
        "activation_mb": held.activation_bytes / MB,
        "stored_mb": held.total_mb,
        "accounted_csr_mb": csr.total_mb,
        "x_stored": held.ratio_to(base),
        "x_accounted_csr": csr.ratio_to(base),
        "flops_ratio": held.flops_per_step / base.flops_per_step,
        **activation_parts(config),
    }


def measured_fields(config: TrialConfig, timeout: float, baseline: float | None) -> dict:
    """The row's measured figures (see the module docstring); `baseline`: the measured
    baseline's run peak in MB, if measured."""
    started = time.perf_counter()
    result = in_own_process(_run_peak, (config.to_flat(),), timeout)
    fields = {"measure_seconds": round(time.perf_counter() - started)}
    if result is None:
        return {**fields, "measured": f"timed out after {timeout:g} s"}
    updates, step = result
    peak = step.run_peak_bytes / MB
    return {
        **fields,
        "measured_updates": updates,  # None: the step after the warm-up
        "measured_run_peak_mb": peak,
        "x_measured_run_peak": None if baseline is None else baseline / peak,
        "measured_run_tensor_peak_mb": step.run_tensor_peak_bytes / MB,
        "measured_step_total_mb": step.total_bytes / MB,
        "error_run_peak": run_peak_mb(config) / peak - 1,
    }


class Timing(NamedTuple):
    """How the rungs are timed (see the module docstring)."""

    threads: int
    warm_up: int
    updates: int
    timeout: float

    def fields(self, config: TrialConfig, baseline: float | None) -> dict:
        """The row's timed figures: seconds per update (median), each update's, and the ratio
        to `baseline`, the baseline rung's median (None: not timed, so no ratio)."""
        started = time.perf_counter()
        args = (config.to_flat(), self.threads, self.warm_up, self.updates)
        seconds = in_own_process(_update_seconds, args, self.timeout)
        fields = {"time_seconds": round(time.perf_counter() - started)}
        if seconds is None:
            return {**fields, "timed": f"timed out after {self.timeout:g} s"}
        median = statistics.median(seconds)
        return {
            **fields,
            "measured_update_s": median,
            "measured_update_samples_s": seconds,
            "measured_slowdown": None if baseline is None else median / baseline,
        }

    def settings(self) -> dict:
        return {"threads": self.threads, "warm_up": self.warm_up, "updates": self.updates}


def activation_parts(config: TrialConfig) -> dict:
    """The step's activation part and, when the run rewires, its first rewiring's (MB)."""
    run = dry_run(shape_key(config))
    parts = {"step_activation_mb": sum(run.activation(False)) / MB}
    if occasional_work(config):
        parts["rewiring_activation_mb"] = sum(run.occasional) / MB
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", choices=("wrn", "dct"), default="wrn")
    parser.add_argument("--batch", type=int, default=100, help="WRN images per minibatch")
    parser.add_argument("--measure", type=int, nargs="*", default=[], help="rung indices")
    parser.add_argument("--measure-timeout", type=float, default=3600, help="seconds per rung")
    parser.add_argument("--only", type=int, nargs="*", help="rungs to print (the baseline too)")
    parser.add_argument(
        "--key", help="write the rows as task --task of entry KEY of results/memory_ladder.json"
    )
    parser.add_argument("--measure-time", action="store_true", help="time every rung printed")
    parser.add_argument("--time-updates", type=int, default=5, help="updates timed per rung")
    parser.add_argument("--time-warm-up", type=int, default=2, help="steps before the timed ones")
    parser.add_argument("--time-timeout", type=float, default=7200, help="seconds per rung")
    add_arguments(parser)
    args = parser.parse_args()
    base = base_config(args.task, args.batch)
    timing = watch = None
    if args.measure_time:
        threads = torch.get_num_threads()
        watch = Watch.start(threads, args.allow_load)  # a loaded machine refused before any work
        timing = Timing(threads, args.time_warm_up, args.time_updates, args.time_timeout)
    if args.task == "wrn":
        title, ladder = f"WRN-28-2, batch {args.batch}", wrn_rungs()
    else:
        title, ladder = "DC-Transformer, 4000 tokens (30-token pairs)", dct_rungs()
    print(f"{title}; MB = 10**6 bytes; ratios to the fp32 baseline's")
    print(
        f"{'#':>2} {'rung':42} {'run peak':>8} {'x run':>6} {'act':>7} {'stored':>7} "
        f"{'x stored':>8} {'acc csr':>7} {'x csr':>6} {'paper':>6} {'FLOPs':>6} | "
        f"{'meas run':>8} {'x meas':>7} {'error':>7} {'s':>5} | {'s/upd':>7} {'x time':>6}"
    )
    baseline, baseline_measured, baseline_time, rows = None, None, None, []
    for index, (label, flat) in enumerate(ladder):
        if args.only is not None and index not in {0, *args.only}:
            continue
        if isinstance(flat, LeastRecomputation):
            flat = flat.resolve(base)
            label = f"{label}: {flat['checkpoint']}"
        if args.task == "wrn" and args.batch % flat.get("microbatch.size", 1):
            print(f"{index:>2} {label:42} (microbatch does not divide batch {args.batch})")
            continue
        config = TrialConfig.from_dict({**base, **flat})
        row = {"index": index, "rung": label, "config": flat, "paper": PAPER.get(label)}
        row.update(predicted_fields(config, baseline))
        baseline = baseline or config
        line = (
            f"{index:>2} {label:42} {row['run_peak_mb']:8.2f} {row['x_run_peak']:5.1f}x "
            f"{row['activation_mb']:7.2f} {row['stored_mb']:7.2f} {row['x_stored']:7.2f}x "
            f"{row['accounted_csr_mb']:7.2f} {row['x_accounted_csr']:5.1f}x "
            f"{PAPER.get(label, ''):>6} {row['flops_ratio']:5.2f}x"
        )
        if index in args.measure:
            row.update(measured_fields(config, args.measure_timeout, baseline_measured))
            if index == 0 and "measured_run_peak_mb" in row:
                baseline_measured = row["measured_run_peak_mb"]
                row["x_measured_run_peak"] = 1.0
            line += " | " + (
                f"{row['measured_run_peak_mb']:8.2f} {row['x_measured_run_peak'] or 0:6.1f}x "
                f"{row['error_run_peak']:+7.2%}"
                if "measured_run_peak_mb" in row
                else f"{row['measured']:>24}"
            )
            line += f" {row['measure_seconds']:5}"
        if timing is not None:
            row.update(timing.fields(config, baseline_time))
            if index == 0 and "measured_update_s" in row:
                baseline_time = row["measured_update_s"]
                row["measured_slowdown"] = 1.0
            line += " | " + (
                f"{row['measured_update_s']:7.3f} {row['measured_slowdown'] or 0:5.2f}x"
                if "measured_update_s" in row
                else row["timed"]
            )
        rows.append(row)
        print(line, flush=True)
    entry = {
        "title": title,
        "config": base,
        "heap_bytes_per_storage": predict_module.HEAP_BYTES_PER_STORAGE,
        "rows": rows,
    }
    if watch is not None:
        entry["time"] = {**timing.settings(), "machine": watch.stop()}
        print(describe(entry["time"]["machine"]))
    if args.key:
        entries = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
        entries.setdefault(args.key, {})[args.task] = entry
        RESULTS.write_text(json.dumps(entries, indent=1) + "\n")


if __name__ == "__main__":
    main()
