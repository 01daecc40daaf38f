"""The time prediction against measured seconds per update, on a protocol fixed in advance.

Protocol (written before any run; changing it means changing this file):
- Two disjoint sets of configurations, listed below: `CALIBRATION` and `EVALUATION`. The script
  refuses to run if they share a point. The prediction has no constant fitted to any of them:
  its only inputs are the probe's timings of this machine's kernels and of the framework's
  overhead per call (`tune_lowmem.timing`); `--calibration` runs the calibration points alone,
  the only points on which the model may be examined and tuned.
- Evaluation, per point: `timing.predict_time` (the dry run's recorded calls, each probed on this
  machine; the probe's cache is a fresh folder of this run's, so every figure is measured here,
  now) against the measured seconds per update: the real `Trainer.train_step` on synthetic
  minibatches of the point's shapes, `WARM_UP` updates first, then the median wall time
  (`time.perf_counter`, around each call) of `UPDATES` updates, leaving out an update in which a
  sparse model rewires or an fp16 step is skipped, in a process of its own (as a trial's: the
  prediction's probe leaves its allocator in another state), with the page faults of each
  update (`resource.getrusage`) beside. The measurement shares no code with the prediction.
- The evaluation points span WideResNet, torchvision's ResNet-18 and MobileNet and the
  DC-Transformer (small, on 30/30-token sentence pairs), every technique and precision (fp32,
  bf16, amp-bf16, fp16, amp-fp16), packed sparse layers, microbatches of one example up to the
  whole batch, every checkpointing strategy, fused units and fused steps, Kahan and stochastic
  rounding, low-precision Adam state.
- Threads: 1 (`--threads`), so kernels choose the same paths on every run.
- Reported: median, 90th percentile (nearest rank) and worst absolute relative error of the
  predicted seconds per update, over all evaluation points and per model family; the targets
  are a median within 5% and a 90th percentile within 15% (issue 56).
- The machine (`machine.Watch`): a loaded machine is refused unless `--allow-load`, and its
  results are then labelled so.
- Order: the points run in the order listed; a run of all of them takes about 15 minutes at one
  thread on a quiet machine.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/time_accuracy.py
        [--only NAME ...] [--calibration] [--threads 1] [--allow-load]

Writes `benchmarks/results/time_accuracy.json` after every point (a cut-short run keeps what it
measured; `--only` and `--calibration` runs print and write nothing); the docs' table is
generated from it (`benchmarks/render_docs.py`, docs/time.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from machine import Watch, add_arguments, describe
from profiler_accuracy import dct, distribution, tv, wrn  # the same points' spelling

from tune_lowmem.config import TrialConfig
from tune_lowmem.train import Trainer

RESULTS = Path(__file__).parent / "results" / "time_accuracy.json"
COMMAND = (
    "PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/time_accuracy.py"
)
WARM_UP = 2
UPDATES = 7
MOST_TRIES = 3 * UPDATES  # updates tried for UPDATES that count (rewirings, skipped steps)
TARGETS = {"median": 0.05, "p90": 0.15}
DCT_LENGTHS = (30, 30)


def micro(size: int, **more) -> dict:
    return {"microbatch.size": size, **more}


def sparse(density: float, **more) -> dict:
    return {"sparsity.density": density, **more}


BF16, FP16 = {"precision": "bf16"}, {"precision": "fp16"}
AMP_BF16, AMP_FP16 = {"precision": "amp-bf16"}, {"precision": "amp-fp16"}

CALIBRATION = {
    "cal wrn-10-1 b16": wrn(10, 1, 16),
    "cal wrn-10-1 b16 bf16 micro4": wrn(10, 1, 16, **BF16, **micro(4)),
    "cal wrn-10-1 b24 micro1 density0.1": wrn(10, 1, 24, **micro(1), **sparse(0.1)),
    "cal wrn-10-1 b8 fp16": wrn(10, 1, 8, **FP16),
    "cal wrn-16-1 b16 residual-1 density0.2": wrn(
        16, 1, 16, checkpoint="residual-1", **sparse(0.2)
    ),
    "cal wrn-16-2 b32 amp-bf16 chain-min": wrn(16, 2, 32, **AMP_BF16, checkpoint="chain-min"),
    "cal resnet18 b8 micro2": tv("resnet18", 8, **micro(2)),
    "cal mobilenet b16 bf16": tv("mobilenet_v3_small", 16, **BF16),
    "cal dct e32x1 300tok": dct(32, 1, 300),
    "cal dct e64x1 600tok amp-bf16 micro100": dct(64, 1, 600, **AMP_BF16, **micro(100)),
    "cal dct e96x2 900tok residual-1 density0.3": dct(
        96, 2, 900, checkpoint="residual-1", **sparse(0.3)
    ),
}

EVALUATION = {
    # WideResNet: the three, each precision, each checkpointing strategy, microbatches
    # from one image to the whole batch, packed sparsity, fused units and steps, rounding
    "wrn-16-1 b50": wrn(16, 1, 50),
    "wrn-16-1 b50 micro10 residual-1": wrn(16, 1, 50, checkpoint="residual-1", **micro(10)),
    "wrn-16-1 b50 micro1 density0.05": wrn(16, 1, 50, **micro(1), **sparse(0.05)),
    "wrn-16-1 b50 micro5": wrn(16, 1, 50, **micro(5)),
    "wrn-16-1 b50 micro25 residual-2": wrn(16, 1, 50, checkpoint="residual-2", **micro(25)),
    "wrn-10-1 b32": wrn(10, 1, 32),
    "wrn-10-1 b32 bf16": wrn(10, 1, 32, **BF16),
    "wrn-10-1 b32 amp-bf16": wrn(10, 1, 32, **AMP_BF16),
    "wrn-10-1 b32 fp16": wrn(10, 1, 32, **FP16),
    "wrn-10-1 b32 amp-fp16": wrn(10, 1, 32, **AMP_FP16),
    "wrn-16-1 b32 residual-2*": wrn(16, 1, 32, checkpoint="residual-2*"),
    "wrn-16-1 b32 residual-2-nested": wrn(16, 1, 32, checkpoint="residual-2-nested"),
    "wrn-16-1 b32 chain-min": wrn(16, 1, 32, checkpoint="chain-min"),
    "wrn-10-1 b32 density0.1": wrn(10, 1, 32, **sparse(0.1)),
    "wrn-10-1 b32 simulated-micro8 density0.3": wrn(
        10, 1, 32, **micro(8, **{"microbatch.mode": "simulated"}), **sparse(0.3)
    ),
    "wrn-10-1 b24 fused-unit micro12": wrn(10, 1, 24, **{"model.fused_norm": "unit"}, **micro(12)),
    "wrn-10-1 b24 fused-block residual-1": wrn(
        10, 1, 24, checkpoint="residual-1", **{"model.fused_norm": "block"}
    ),
    "wrn-10-1 b24 fused-step-exact micro6": wrn(10, 1, 24, fused_step="exact", **micro(6)),
    "wrn-10-1 b8 bf16 heavy-ball fused-block micro2 density0.3": wrn(
        10,
        1,
        8,
        **BF16,
        fused_step="heavy-ball",
        **{"model.fused_norm": "block"},
        **micro(2),
        **sparse(0.3),
    ),
    "wrn-10-1 b16 bf16 kahan micro2": wrn(10, 1, 16, **BF16, precision_update="kahan", **micro(2)),
    "wrn-10-1 b32 bf16 stochastic": wrn(10, 1, 32, **BF16, precision_update="stochastic"),
    "wrn-28-2 b16": wrn(28, 2, 16),
    "wrn-28-2 b16 residual-2* micro4 density0.3": wrn(
        28, 2, 16, checkpoint="residual-2*", **micro(4), **sparse(0.3)
    ),
    # torchvision's ResNet-18 and MobileNet (v3, small) on CIFAR-10
    "resnet18 b16": tv("resnet18", 16),
    "resnet18 b16 bf16 blocks-1": tv("resnet18", 16, **BF16, checkpoint="blocks-1"),
    "resnet18 b16 blocks-2 micro4 density0.3": tv(
        "resnet18", 16, checkpoint="blocks-2", **micro(4), **sparse(0.3)
    ),
    "resnet18 b32 amp-bf16 micro1": tv("resnet18", 32, **AMP_BF16, **micro(1)),
    "mobilenet b32": tv("mobilenet_v3_small", 32),
    "mobilenet b32 amp-bf16 blocks-1": tv(
        "mobilenet_v3_small", 32, **AMP_BF16, checkpoint="blocks-1"
    ),
    "mobilenet b32 micro4 density0.2": tv("mobilenet_v3_small", 32, **micro(4), **sparse(0.2)),
    # the DC-Transformer on synthetic IWSLT'14-shaped batches
    "dct e64x2 600tok": dct(64, 2, 600),
    "dct e64x2 600tok bf16": dct(64, 2, 600, **BF16),
    "dct e64x2 600tok fp16": dct(64, 2, 600, **FP16),
    "dct e64x2 600tok residual-1 density0.4": dct(
        64, 2, 600, checkpoint="residual-1", **sparse(0.4)
    ),
    "dct e64x2 600tok amp-bf16 micro150": dct(64, 2, 600, **AMP_BF16, **micro(150)),
    "dct e64x2 600tok adam-int8": dct(64, 2, 600, adam_state="int8"),
    "dct e64x2 600tok adam-bf16 micro60": dct(64, 2, 600, adam_state="bf16", **micro(60)),
    "dct e128x3 1200tok": dct(128, 3, 1200),
}


def family(config: TrialConfig) -> str:
    """The model family a point belongs to, for the per-family errors."""
    if config.task == "dct-iwslt14":
        return "DC-Transformer"
    if config.task == "tv-cifar10":
        return {"resnet18": "ResNet-18", "mobilenet_v3_small": "MobileNet"}[config.model.arch]
    return "WideResNet"


def lengths_of(config: TrialConfig) -> tuple[int, int] | None:
    return DCT_LENGTHS if config.task == "dct-iwslt14" else None


def rewirings(trainer: Trainer) -> float:
    """How many times the trainer's sparse model has rewired (0 for a dense one)."""
    return sum(t.metrics().get("sparsity_rewirings", 0.0) for t in trainer.techniques)


def measured_update(flat: dict, threads: int) -> list[tuple[float, int]]:
    """Wall seconds and minor page faults of each counted update (see the protocol): the
    trial's own trainer on synthetic minibatches, timed around `Trainer.train_step` here."""
    torch.set_num_threads(threads)
    config = TrialConfig.from_dict(flat)
    task = config.task_type()(config, torch.device(config.device), synthetic=True)
    if (lengths := lengths_of(config)) is not None:
        task.set_synthetic_lengths(lengths)
    trainer = Trainer(config, task=task)
    batches = itertools.chain.from_iterable(map(task.train_batches, itertools.count()))
    for _ in range(WARM_UP):
        trainer.train_step(next(batches))
    counted: list[tuple[float, int]] = []
    for _ in range(MOST_TRIES):
        batch, before = next(batches), rewirings(trainer)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        stepped = trainer.train_step(batch)["stepped"]
        elapsed = time.perf_counter() - started
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        if stepped and rewirings(trainer) == before:
            counted.append((elapsed, faults))
        if len(counted) == UPDATES:
            break
    return counted


def measured_in_a_new_process(flat: dict, threads: int) -> list[tuple[float, int]]:
    """`measured_update` in a process of its own, as a trial has: nothing the prediction ran
    (the probe's allocations) shapes its allocator's state."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(measured_update, (flat, threads))


def evaluate(name: str, flat: dict, threads: int) -> dict:
    from tune_lowmem.timing import predict_time

    config = TrialConfig.from_dict(flat)
    started = time.perf_counter()
    predicted = predict_time(config, lengths_of(config), threads)
    predict_seconds = time.perf_counter() - started
    counted = measured_in_a_new_process(flat, threads)
    samples = [seconds for seconds, _ in counted]
    measured = statistics.median(samples)
    return {
        "name": name,
        "family": family(config),
        "config": flat,
        "predicted_update_s": predicted.update_seconds,
        "predicted_evaluation_s": predicted.evaluation_seconds,
        "predicted_epoch_s": predicted.epoch_seconds,
        "calls_per_update": predicted.calls_per_update,
        "unpriced_per_update": predicted.unpriced_per_update,
        "predicted_page_faults": predicted.page_faults_per_update,
        "measured_update_s": measured,
        "measured_samples_s": samples,
        "measured_page_faults": statistics.median(faults for _, faults in counted),
        "error": predicted.update_seconds / measured - 1,
        "prediction_seconds": predict_seconds,  # the dry run and the probe of its new calls
    }


def summarise(points: list[dict]) -> dict:
    families = sorted({p["family"] for p in points})
    return {
        "targets": TARGETS,
        "all": distribution([p["error"] for p in points]),
        "families": {
            f: distribution([p["error"] for p in points if p["family"] == f]) for f in families
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="these evaluation points alone; nothing written")
    parser.add_argument(
        "--calibration", action="store_true", help="the calibration points alone; nothing written"
    )
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    add_arguments(parser)
    args = parser.parse_args()
    shared = set(map(json.dumps, CALIBRATION.values())) & set(map(json.dumps, EVALUATION.values()))
    if shared or set(CALIBRATION) & set(EVALUATION):
        raise SystemExit(f"calibration and evaluation share points: {sorted(shared)}")
    unknown = sorted(set(args.only or []) - set(EVALUATION))
    if unknown:
        raise SystemExit(
            f"--only: {unknown} are not evaluation points; allowed: {list(EVALUATION)}"
        )
    points = CALIBRATION if args.calibration else EVALUATION
    if args.only:
        points = {name: EVALUATION[name] for name in args.only}
    writes = not (args.only or args.calibration)
    torch.set_num_threads(args.threads)
    # a fresh probe cache: every kernel this run prices is timed on this machine, in this run
    os.environ["TUNE_LOWMEM_CACHE"] = tempfile.mkdtemp(prefix="time-accuracy-")
    watch = Watch.start(args.threads, args.allow_load)
    results: dict = {
        "command": COMMAND + (f" --threads {args.threads}" if args.threads != 1 else ""),
        "torch": torch.__version__,
        "threads": args.threads,
        "protocol": {
            "calibration": CALIBRATION,
            "evaluation": EVALUATION,
            "warm_up": WARM_UP,
            "updates": UPDATES,
        },
        "points": [],
    }
    for name, flat in points.items():
        point = evaluate(name, flat, args.threads)
        results["points"].append(point)
        results["summary"] = summarise(results["points"])
        print(
            f"{name:58} predicted {point['predicted_update_s']:8.4f} s measured "
            f"{point['measured_update_s']:8.4f} s {point['error']:+7.1%}; page faults "
            f"{point['predicted_page_faults']:7.0f} / {point['measured_page_faults']:7.0f} "
            f"(prediction {point['prediction_seconds']:5.1f} s)",
            flush=True,
        )
        if writes:
            RESULTS.parent.mkdir(exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    results["machine"] = watch.stop()
    if writes:
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    summary = results["summary"]
    for label, d in [("all", summary["all"]), *summary["families"].items()]:
        print(
            f"{label}: {d['points']} points, median {d['median']:.1%}, p90 {d['p90']:.1%}, "
            f"worst {d['worst']:.1%}"
        )
    print(describe(results["machine"]))


if __name__ == "__main__":
    sys.exit(main())
