"""The profiler's prediction against an independent measurement, on a protocol fixed in advance.

Protocol (written before any run; changing it means changing this file):
- Two disjoint sets of configurations, listed below: `CALIBRATION` and `EVALUATION`. The script
  refuses to run if they share a point.
- Calibration: the one constant of the prediction, `memory.predict.HEAP_BYTES_PER_STORAGE` (the
  CPU heap's bytes per live storage beyond its data: tensor, storage and autograd objects), is
  computed here, never typed by hand: for each calibration point, the gap between the tracker's
  measured activation part on the CPU heap (`memory.measure`, glibc's bytes in use) and the
  predicted tensor storage, divided by the storages alive at the predicted peak; the constant is
  their median. It is written to
  `tune_lowmem/memory/calibration.json`, which `predict` reads.
- Evaluation, per point: `predict` (fake tensors) against `memory.allocations` (one real step on
  the CPU, torch's allocator reports replayed from the profiler's memory events; no code shared
  with the prediction). Compared: the predicted tensor storage (the stored total, sparse layers
  packed, less the heap objects that the allocator never serves) against the
  allocator's model + optimizer + activation; and the activation parts alone. Secondary, the
  heap view: `predict`'s stored total with the calibrated heap objects against the tracker's
  measured stored total (`memory.measure`), which reads glibc's heap, on the evaluation points
  predicted under `HEAP_VIEW_MAX_MB` (and, since the ladder's rungs were added, of at most
  `HEAP_VIEW_MAX_IMAGES` images a minibatch: its probe after every operator of a batch-100 step
  of 50 microbatches takes hours).
- Measured steps: the prediction is a run's peak, and a sparse run's peak may be a step that
  rewires (`memory.predict.occasional_work`). So a point whose run rewires is measured in both
  views at two steps placed with `Trainer.seek`, its first update (a plain step, which leaves
  its gradients held; the step after the warm-up may itself rewire, and a rewiring drops the
  sparse layers' gradients) and its first rewiring update, and its measured figures are those
  of the step with the larger total; every other point at the step after the warm-up. The point
  records which step it was.
- The run's peak (added before its first run): at each point also `predict`'s run peak (the peak
  step with its minibatch, or an evaluation batch's pass; its tensor storage, heap objects off)
  against the allocator's (`Allocations.run_peak_bytes`: the most bytes live over the measured
  step and one evaluation batch after it, the larger over the measured steps), once with
  operators' internal temporaries left out (what the prediction models) and once with them
  (workspace-inclusive: what the run really holds). The WRN-28-2 points at batch 100 are
  fp32, since this machine's half-precision convolutions take minutes a step.
- Workspace (added before its first run, with the two ladder rungs below): `predict` counts
  operators' workspace on the CPU (`memory.workspace`: each distinct convolution and batch-norm
  backward call run once on zeros; no constant fitted), so the run's peak is judged
  workspace-inclusive, predicted with workspace against the allocator's run peak with kernels'
  temporaries: that is the summary's `run_peak` and its misses. The tensors alone
  (`predict(..., workspace=False)` against the allocator's peak without temporaries) are
  `run_tensor_peak`. Evaluation points add WRN-28-2 at batch 100 as the memory ladder's rungs
  23 (the paper's combination: fp16, chain-min with the fused block, microbatch 10, 30%
  nonzeros) and 27 (bf16, chain-min, fused block, exact fused step, microbatch 2, 10%
  nonzeros), each evaluating at its microbatch.
- Order: evaluation points run smallest predicted first, so a run cut short has the most.
- Reported: median, 90th percentile and worst absolute relative error of each view over
  evaluation points whose measured total is at least 1 MB (`FLOOR_MB`), and every point whose
  workspace-inclusive run peak misses the goal (`GOAL`, 3%; `total_misses`: the step's total).
- Threads: 1 (`torch.set_num_threads`), so kernels choose the same paths on every run.

    nice -n 10 .venv/bin/python benchmarks/profiler_accuracy.py [--only NAME ...] [--no-heap]

Writes `benchmarks/results/profiler_accuracy.json` after every point (a cut-short run keeps what
it measured); the docs' tables are generated from it (`benchmarks/render_docs.py`).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory import MB
from tune_lowmem.memory import predict as predict_module
from tune_lowmem.memory.allocations import measure_allocations
from tune_lowmem.memory.measure import measure
from tune_lowmem.memory.stepping import peak_steps
from tune_lowmem.outcome import MEASURED_STORED_TOTAL, memory_columns

RESULTS = Path(__file__).parent / "results" / "profiler_accuracy.json"
CALIBRATION_FILE = Path(predict_module.__file__).with_name("calibration.json")
FLOOR_MB = 1.0
GOAL = 0.03
HEAP_VIEW_MAX_MB = 5.0  # the tracker's heap view only where its extra real step is cheap
HEAP_VIEW_MAX_IMAGES = 32  # and not at the ladder's batch 100 (the heap probe after each operator)
DCT_LENGTHS = (30, 30)
REFERENCE = 1024  # bytes per storage of calibration's counting dry run


def wrn(depth: int, width: int, batch: int, **settings) -> dict:
    flat = {"model.depth": depth, "model.width": width, "schedule.batch_size": batch}
    return {**flat, "device": "cpu", **settings}


def dct(embed: int, layers: int, tokens: int, **settings) -> dict:
    kernels = [3, 7, 15, 31, 31, 31, 31][:layers]
    model = {
        "embed_dim": embed,
        "ffn_dim": 2 * embed,
        "encoder_layers": layers,
        "decoder_layers": layers,
        "encoder_kernels": kernels,
        "decoder_kernels": kernels[: max(1, layers)],
    }
    flat = {"task": "dct-iwslt14", "model": model, "schedule.max_tokens": tokens}
    return {**flat, "device": "cpu", **settings}


def tv(arch: str, batch: int, **settings) -> dict:
    flat = {"task": "tv-cifar10", "model.arch": arch, "schedule.batch_size": batch}
    return {**flat, "device": "cpu", **settings}


def tiny(hidden: int, batch: int, **settings) -> dict:
    flat = {"task": "tests.tiny_task:TinyBlobs", "model.hidden": hidden}
    return {**flat, "schedule.batch_size": batch, "device": "cpu", **settings}


BF16, FP16 = {"precision": "bf16"}, {"precision": "fp16"}

CALIBRATION = {
    "cal wrn-10-1 b32 bf16 fused-unit micro8": wrn(
        10, 1, 32, **BF16, **{"model.fused_norm": "unit", "microbatch.size": 8}
    ),
    "cal dct e32x1 300tok bf16 micro100": dct(32, 1, 300, **BF16, **{"microbatch.size": 100}),
    "cal tiny h256 b64": tiny(256, 64),
    "cal mobilenet b16": tv("mobilenet_v3_small", 16),
}

EVALUATION = {
    # WideResNet: every checkpointing strategy, precision, sparsity, fused units and steps,
    # microbatching of both modes, momentum and update rounding, from 1 MB to 60 MB
    "wrn-10-1 b8": wrn(10, 1, 8),
    "wrn-10-1 b32": wrn(10, 1, 32),
    "wrn-10-1 b32 fp16": wrn(10, 1, 32, **FP16),
    "wrn-10-1 b32 bf16 residual-2": wrn(10, 1, 32, **BF16, checkpoint="residual-2"),
    "wrn-10-1 b32 amp-fp16": wrn(10, 1, 32, precision="amp-fp16"),
    "wrn-10-1 b32 amp-bf16 micro8": wrn(10, 1, 32, precision="amp-bf16", **{"microbatch.size": 8}),
    "wrn-10-1 b32 residual-1": wrn(10, 1, 32, checkpoint="residual-1"),
    "wrn-16-1 b32 residual-2*": wrn(16, 1, 32, checkpoint="residual-2*"),
    "wrn-16-1 b32 residual-2-nested": wrn(16, 1, 32, checkpoint="residual-2-nested"),
    "wrn-16-1 b32 bf16 residual-2*-nested micro8": wrn(
        16, 1, 32, **BF16, checkpoint="residual-2*-nested", **{"microbatch.size": 8}
    ),
    "wrn-16-1 b32 chain-min": wrn(16, 1, 32, checkpoint="chain-min"),
    "wrn-10-1 b32 density0.1": wrn(10, 1, 32, **{"sparsity.density": 0.1}),
    "wrn-10-1 b32 bf16 density0.3 simulated-micro8": wrn(
        10,
        1,
        32,
        **BF16,
        **{"sparsity.density": 0.3, "microbatch.size": 8, "microbatch.mode": "simulated"},
    ),
    "wrn-10-1 b32 fused-unit": wrn(10, 1, 32, **{"model.fused_norm": "unit"}),
    "wrn-10-1 b32 fused-block residual-1": wrn(
        10, 1, 32, checkpoint="residual-1", **{"model.fused_norm": "block"}
    ),
    "wrn-10-1 b32 fused-step-exact": wrn(10, 1, 32, fused_step="exact"),
    "wrn-10-1 b16 bf16 heavy-ball fused-block micro4 density0.3": wrn(
        10,
        1,
        16,
        **BF16,
        fused_step="heavy-ball",
        **{"model.fused_norm": "block", "microbatch.size": 4, "sparsity.density": 0.3},
    ),
    "wrn-10-1 b32 fused-step-exact momentum-bf16": wrn(
        10, 1, 32, fused_step="exact", momentum_dtype="bf16"
    ),
    "wrn-10-1 b16 bf16 kahan micro2": wrn(
        10, 1, 16, **BF16, precision_update="kahan", **{"microbatch.size": 2}
    ),
    "wrn-10-1 b32 bf16 stochastic fused-unit": wrn(
        10, 1, 32, **BF16, precision_update="stochastic", **{"model.fused_norm": "unit"}
    ),
    # WRN-28-2 at the paper's batch 100, evaluating at the training microbatch (the run's peak)
    "wrn-28-2 b100": wrn(28, 2, 100),
    "wrn-28-2 b100 residual-2* micro10 density0.3": wrn(
        28, 2, 100, checkpoint="residual-2*", **{"microbatch.size": 10, "sparsity.density": 0.3}
    ),
    "wrn-28-2 b100 eval500": wrn(28, 2, 100, **{"schedule.eval_batch_size": 500}),
    "wrn-28-2 b100 ladder rung 23": wrn(
        28,
        2,
        100,
        **FP16,
        checkpoint="chain-min",
        **{"model.fused_norm": "block", "microbatch.size": 10, "sparsity.density": 0.3},
    ),
    "wrn-28-2 b100 ladder rung 27": wrn(
        28,
        2,
        100,
        **BF16,
        checkpoint="chain-min",
        fused_step="exact",
        **{"model.fused_norm": "block", "microbatch.size": 2, "sparsity.density": 0.1},
    ),
    # DynamicConv Transformer on synthetic IWSLT'14-shaped batches (30/30-token pairs)
    "dct e32x1 300tok": dct(32, 1, 300),
    "dct e64x2 600tok bf16": dct(64, 2, 600, **BF16),
    "dct e64x2 600tok fp16": dct(64, 2, 600, **FP16),
    "dct e64x2 600tok residual-1 density0.4": dct(
        64, 2, 600, checkpoint="residual-1", **{"sparsity.density": 0.4}
    ),
    "dct e64x2 600tok amp-bf16 micro200": dct(
        64, 2, 600, precision="amp-bf16", **{"microbatch.size": 200}
    ),
    "dct e64x2 600tok adam-bf16": dct(64, 2, 600, adam_state="bf16"),
    "dct e64x2 600tok adam-int8": dct(64, 2, 600, adam_state="int8"),
    "dct e64x2 600tok bf16 adam-int8 residual-1 micro300": dct(
        64, 2, 600, **BF16, adam_state="int8", checkpoint="residual-1", **{"microbatch.size": 300}
    ),
    "dct e128x3 1000tok": dct(128, 3, 1000),
    # torchvision models on CIFAR-10
    "resnet18 b16": tv("resnet18", 16),
    "resnet18 b16 bf16 blocks-1": tv("resnet18", 16, **BF16, checkpoint="blocks-1"),
    "resnet18 b16 blocks-2 micro4 density0.3": tv(
        "resnet18", 16, checkpoint="blocks-2", **{"microbatch.size": 4, "sparsity.density": 0.3}
    ),
    "mobilenet b32": tv("mobilenet_v3_small", 32),
    "mobilenet b32 amp-bf16 blocks-1": tv(
        "mobilenet_v3_small", 32, precision="amp-bf16", checkpoint="blocks-1"
    ),
    "vit-tiny b16": tv("vit_tiny", 16),
    "vit-tiny b16 bf16 blocks-2 micro8": tv(
        "vit_tiny", 16, **BF16, checkpoint="blocks-2", **{"microbatch.size": 8}
    ),
    # the test suite's user task (an MLP), from under 1 MB to over 1 GB
    "tiny h64 b16": tiny(64, 16),
    "tiny h1024 b256": tiny(1024, 256),
    "tiny h1024 b256 bf16 blocks-1": tiny(1024, 256, **BF16, checkpoint="blocks-1"),
    "tiny h2048 b512 micro128": tiny(2048, 512, **{"microbatch.size": 128}),
    "tiny h6144 b16": tiny(6144, 16),  # weights, gradients and momentum dominate
    "tiny h9216 b16": tiny(9216, 16),  # the largest point, over 1 GB
    "tiny h1024 b256 density0.2 fp16": tiny(1024, 256, **FP16, **{"sparsity.density": 0.2}),
}


def lengths_of(config: TrialConfig) -> tuple[int, int] | None:
    return DCT_LENGTHS if config.task == "dct-iwslt14" else None


def predicted_storage(config: TrialConfig, workspace: bool = True) -> tuple[int, int, int]:
    """The predicted stored total, activation and run's peak, tensor storage only (no heap
    objects)."""
    lengths = lengths_of(config)
    report = predict_module.predict(config, lengths, workspace)
    objects = predict_module.heap_object_bytes(config, lengths)
    run_peak = predict_module.run_peak_storage(config, lengths, workspace)
    return report.total_bytes - objects, report.activation_bytes - objects, run_peak


def heap_constant_for(config: TrialConfig, target: int) -> int:
    """The bytes per live storage at which `predict`'s activation part reaches `target` (the
    tracker's measured activation on the CPU heap): the storages alive at the predicted peak are
    counted from a dry run with `REFERENCE` bytes each, and the gap shared among them."""
    lengths = lengths_of(config)
    predict_module.HEAP_BYTES_PER_STORAGE = REFERENCE
    predict_module.dry_run.cache_clear()
    run = predict_module.dry_run(predict_module.shape_key(config, lengths), lengths)
    storages = run.object_bytes / REFERENCE
    return round((target - run.activation_bytes) / storages)


def calibrate(results: dict) -> int:
    per_point = {}
    for name, flat in CALIBRATION.items():
        config = TrialConfig.from_dict(flat)
        target = measure(config, lengths_of(config)).activation_bytes
        per_point[name] = heap_constant_for(config, target)
        print(f"calibration {name}: {per_point[name]} bytes per live storage", flush=True)
    constant = round(statistics.median(per_point.values()))
    predict_module.HEAP_BYTES_PER_STORAGE = constant
    predict_module.dry_run.cache_clear()
    source = {"script": "benchmarks/profiler_accuracy.py", "points": per_point}
    CALIBRATION_FILE.write_text(
        json.dumps({"heap_bytes_per_storage": constant, "calibration": source}, indent=1) + "\n"
    )
    results["calibration"] = {"heap_bytes_per_storage": constant, "per_point": per_point}
    print(f"HEAP_BYTES_PER_STORAGE = {constant} (median) -> {CALIBRATION_FILE}", flush=True)
    return constant


def evaluate(name: str, flat: dict, heap: bool) -> dict:
    config = TrialConfig.from_dict(flat)
    lengths = lengths_of(config)
    started = time.perf_counter()
    total, activation, run_peak = predicted_storage(config)
    run_tensor_peak = predicted_storage(config, workspace=False)[2]
    steps = {update: measure_allocations(config, lengths, update) for update in peak_steps(config)}
    update, allocator = max(steps.items(), key=lambda step: step[1].total_bytes)
    run_tensors = max(step.run_tensor_peak_bytes for step in steps.values())
    run_held = max(step.run_peak_bytes for step in steps.values())
    point = {
        "name": name,
        "config": flat,
        "predicted_storage_mb": total / MB,
        "predicted_activation_mb": activation / MB,
        "measured_update": update,  # None: the step after the warm-up
        "allocator_totals_by_update_mb": {str(u): a.total_bytes / MB for u, a in steps.items()},
        **allocator.to_dict(),
        "error_total": total / allocator.total_bytes - 1,
        "error_activation": activation / allocator.activation_bytes - 1,
        "predicted_run_peak_mb": run_peak / MB,  # with this CPU's workspace
        "predicted_run_tensor_peak_mb": run_tensor_peak / MB,
        "allocator_run_tensor_peak_mb": run_tensors / MB,
        "allocator_run_peak_mb": run_held / MB,
        "error_run_peak": run_peak / run_held - 1,
        "error_run_tensor_peak": run_tensor_peak / run_tensors - 1,
    }
    batch = flat.get("schedule.batch_size", 0)
    if heap and total / MB < HEAP_VIEW_MAX_MB and batch <= HEAP_VIEW_MAX_IMAGES:
        predicted = predict_module.predict(config, lengths)
        measured = max(
            memory_columns(predicted, measure(config, lengths, u))[MEASURED_STORED_TOTAL]
            for u in steps
        )
        point["heap_predicted_mb"] = predicted.total_mb
        point["heap_measured_mb"] = measured
        point["error_heap_total"] = predicted.total_mb / measured - 1
    point["seconds"] = time.perf_counter() - started
    return point


def distribution(errors: list[float]) -> dict:
    """Median, 90th percentile (nearest rank) and worst of the absolute errors."""
    values = sorted(abs(e) for e in errors)
    if not values:
        return {}
    rank = max(0, -(-9 * len(values) // 10) - 1)
    median = statistics.median(values)
    return {"points": len(values), "median": median, "p90": values[rank], "worst": values[-1]}


def summarise(points: list[dict]) -> dict:
    counted = [p for p in points if p["allocator_total_mb"] >= FLOOR_MB]
    summary = {
        "floor_mb": FLOOR_MB,
        "goal": GOAL,
        "total": distribution([p["error_total"] for p in counted]),
        "activation": distribution([p["error_activation"] for p in counted]),
        "run_peak": distribution([p["error_run_peak"] for p in counted]),
        "run_tensor_peak": distribution([p["error_run_tensor_peak"] for p in counted]),
        "misses": [p["name"] for p in counted if abs(p["error_run_peak"]) > GOAL],
        "total_misses": [p["name"] for p in counted if abs(p["error_total"]) > GOAL],
        "below_floor": [p["name"] for p in points if p["allocator_total_mb"] < FLOOR_MB],
    }
    heap = [p["error_heap_total"] for p in counted if "error_heap_total" in p]
    if heap:
        summary["heap_total"] = distribution(heap)
    return summary


def rerun_of(names: list[str]) -> dict:
    """The result file with `names` to be measured again under the calibration it holds: the
    other points kept as they are, the rerun's command noted beside the full run's."""
    unknown = sorted(set(names) - set(EVALUATION))
    if unknown:
        raise SystemExit(
            f"--only: {unknown} are not evaluation points; allowed: {list(EVALUATION)}"
        )
    results = json.loads(RESULTS.read_text())
    constant = results["calibration"]["heap_bytes_per_storage"]
    if constant != predict_module.HEAP_BYTES_PER_STORAGE:
        raise SystemExit(
            f"the result file's points were predicted with HEAP_BYTES_PER_STORAGE {constant}, "
            f"memory/calibration.json holds {predict_module.HEAP_BYTES_PER_STORAGE}: run all points"
        )
    rerun = {
        "command": " ".join([results["command"], "--only", *map(repr, names)]),
        "points": names,
    }
    results["reruns"] = [*results.get("reruns", []), rerun]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        nargs="+",
        help="measure these points again, in place in the result file (no calibration)",
    )
    parser.add_argument("--no-heap", action="store_true", help="skip the tracker's heap view")
    args = parser.parse_args()
    shared = set(map(json.dumps, CALIBRATION.values())) & set(map(json.dumps, EVALUATION.values()))
    if shared:
        raise SystemExit(f"calibration and evaluation share points: {sorted(shared)}")
    torch.set_num_threads(1)
    results: dict = {
        "command": "nice -n 10 .venv/bin/python benchmarks/profiler_accuracy.py",
        "torch": torch.__version__,
        "machine": platform.machine(),
        "threads": 1,
        "protocol": {"calibration": CALIBRATION, "evaluation": EVALUATION},
        "points": [],
    }
    if args.only:
        results = rerun_of(args.only)
    else:
        calibrate(results)
    RESULTS.parent.mkdir(exist_ok=True)
    size = {  # from shapes alone: no operator runs for real before the first point's heap view
        name: predicted_storage(TrialConfig.from_dict(EVALUATION[name]), workspace=False)[2]
        for name in args.only or EVALUATION
    }
    names = sorted(size, key=size.__getitem__)
    for name in names:
        point = evaluate(name, EVALUATION[name], heap=not args.no_heap)
        results["points"] = [p for p in results["points"] if p["name"] != name] + [point]
        results["summary"] = summarise(results["points"])
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        print(
            f"{name:58} pred {point['predicted_storage_mb']:9.3f} alloc "
            f"{point['allocator_total_mb']:9.3f} MB {point['error_total']:+7.2%} "
            f"(act {point['error_activation']:+7.2%}"
            + (f", heap {point['error_heap_total']:+7.2%}" if "error_heap_total" in point else "")
            + f") run peak {point['error_run_peak']:+7.2%}, tensors alone "
            f"{point['error_run_tensor_peak']:+7.2%} {point['seconds']:5.1f}s",
            flush=True,
        )
    summary = results["summary"]
    for view in ("run_peak", "run_tensor_peak", "total", "activation", "heap_total"):
        if view in summary:
            d = summary[view]
            print(
                f"{view}: {d['points']} points >= {FLOOR_MB} MB: median {d['median']:.2%}, "
                f"p90 {d['p90']:.2%}, worst {d['worst']:.2%}"
            )
    print(f"miss the {GOAL:.0%} goal: {', '.join(summary['misses']) or 'none'}")


if __name__ == "__main__":
    main()
