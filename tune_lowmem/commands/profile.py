"""`tune-lowmem profile`: a configuration's training memory, predicted (and measured), against
the same model's baseline without any technique."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json

from ..analysis.counted import ACCOUNTED, STORED, counted
from ..outcome import (
    MB,
    MEASURED_STORED_TOTAL,
    PARTS,
    PREDICTED_PARTS,
    PREDICTED_STORED_TOTAL,
    column,
    memory_columns,
)

# each source's total as the step holds it (`outcome.memory_columns`)
STORED_TOTAL = {"predicted": PREDICTED_STORED_TOTAL, "measured": MEASURED_STORED_TOTAL}
from . import add_config_arguments, config_from_arguments
from .threads import add_threads_argument, apply_threads


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "profile",
        help="model / optimizer / activation memory, FLOPs and predicted time of one configuration",
    )
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--measure",
        action="store_true",
        help="also run real training steps and measure them: with the project's tracker, and "
        "independently from torch's allocator reports (the profiler's memory events)",
    )
    parser.add_argument(
        "--whole-run",
        action="store_true",
        help="with --measure: also run the trial's whole schedule on its data (every epoch's "
        "evaluation, a checkpoint saved and restored after each) and measure its peak: torch's "
        "CPU allocator's reports replayed, or on CUDA max_memory_allocated; as long as the trial",
    )
    parser.add_argument(
        "--lengths",
        type=int,
        nargs=2,
        metavar=("SOURCE", "TARGET"),
        help="for tasks with sequences (the translation task): tokens of each synthetic "
        "sentence pair (default 30 30, a typical IWSLT'14 batch)",
    )
    parser.add_argument(
        "--capability",
        metavar="MAJOR.MINOR",
        help="for a CUDA trial (device cuda): the compute capability of the GPU it will run on, "
        "whose workspaces its run peak counts (default: this machine's GPU, else 9.0, Hopper)",
    )
    add_threads_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..memory import baseline_config
    from ..memory.allocations import measure_allocations
    from ..memory.cuda import trial_target
    from ..memory.measure import measure
    from ..memory.predict import heap_object_bytes, predict, run_peak_storage
    from ..memory.stepping import at_peak, peak_steps
    from ..memory.synthetic import synthetic_task
    from ..memory.whole_run import measure_run
    from ..preflight import cuda_present
    from ..timing import predict_time
    from ..validation import ConfigError, positive_int

    config = config_from_arguments(args)
    if args.whole_run and not args.measure:
        raise ConfigError("--whole-run", "is a measurement: --measure is required with it")
    if args.measure:
        cuda_present(config.device, "device (with --measure)")
    lengths = (
        None if args.lengths is None else tuple(positive_int(n, "--lengths") for n in args.lengths)
    )
    capability = None if args.capability is None else compute_capability(args.capability)
    task = synthetic_task(config, torch.device("cpu"), lengths)  # refuses what it cannot profile
    apply_threads(args)  # the kernels a prediction's workspace and time are of, and a measurement
    target = trial_target(config, capability=capability)
    predicted = functools.partial(predict, target=target)
    ways = {"predicted": predicted} | ({"measured": measure} if args.measure else {})
    baselines = {name: way(baseline_config(config), lengths) for name, way in ways.items()}
    # a run is predicted at its peak: measured at each step that may be it, the larger kept
    reports = {"predicted": predicted(config, lengths)}
    allocations = run_peaks = None
    if args.measure:
        reports["measured"] = at_peak(measure, config, lengths)
        steps = [measure_allocations(config, lengths, update) for update in peak_steps(config)]
        allocations = max(steps, key=lambda step: step.total_bytes)  # as `at_peak` keeps
        run_peaks = max(steps, key=lambda step: step.run_peak_bytes)
    whole = measure_run(config) if args.whole_run else None
    columns = memory_columns(reports["predicted"], reports.get("measured"))
    totals = {source: columns[STORED_TOTAL[source]] for source in reports}
    objects = heap_object_bytes(config, lengths)
    times = {
        "this": predict_time(config, lengths),
        "baseline": predict_time(baseline_config(config), lengths),
    }
    if args.json:
        result = {
            name: {
                **report.to_dict(),
                f"{name}_stored_total_mb": totals[name],
                "ratio_to_baseline": report.ratio_to(baselines[name]),
            }
            for name, report in reports.items()
        }
        result["predicted"]["predicted_heap_objects_mb"] = objects / MB
        result["baseline"] = {name: report.to_dict() for name, report in baselines.items()}
        keys = {k for r in (*reports.values(), *baselines.values()) for k in r.to_dict()}
        keys |= {f"{name}_stored_total_mb" for name in reports}
        result["counted"] = {k: counted(column(k)) for k in sorted(keys) if counted(column(k))}
        result["time"] = time_figures(times["this"], times["baseline"])
        if allocations is not None:
            result["allocator"] = allocations.to_dict()
            result["allocator"].update(
                allocator_run_peak_mb=run_peaks.run_peak_bytes / MB,
                allocator_run_tensor_peak_mb=run_peaks.run_tensor_peak_bytes / MB,
            )
        if whole is not None:
            result["whole_run"] = {**dataclasses.asdict(whole), "peak_mb": whole.peak_bytes / MB}
        print(json.dumps(result))
        return 0
    sparse = totals["predicted"] != reports["predicted"].total_mb
    print(describe(config, task))
    print(table(reports, baselines, totals, sparse, objects, times))
    print(time_note(times["this"]))
    if target is None:
        print(run_peak_note(reports["predicted"], run_peaks, run_peak_storage(config, lengths)))
    else:
        print(cuda_note(reports["predicted"].cuda, target))
    print(
        SPARSE_NOTE
        if sparse
        else packed_note(config, lengths)
        if config.sparsity.enabled
        else DENSE_NOTE
    )
    if args.measure:
        print(peak_note(config, reports["predicted"], reports["measured"], task, objects))
        print(allocator_note(allocations, totals["predicted"] - objects / MB))
    if whole is not None:
        storage = run_peak_storage(config, lengths) if target is None else None
        print(whole_run_note(whole, reports["predicted"], storage))
    return 0


def compute_capability(text: str) -> tuple[int, int]:
    """`--capability` as (major, minor), or one line naming the flag."""
    from ..validation import ConfigError

    major, dot, minor = text.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        raise ConfigError(
            "--capability", f"{text!r} is not allowed; MAJOR.MINOR (e.g. 9.0 or 8.0) is required"
        )
    return int(major), int(minor)


def cuda_note(cuda, target) -> str:
    """A CUDA trial's run peak as its caching allocator will count it, by part, and beside it
    the context and what the allocator reserves (`memory.cuda`)."""
    from ..memory.cuda import calibration

    major, minor = target.capability
    where = "probed on this GPU" if target.on_card else "by torch's rules"
    cudnn = (
        "cuDNN's convolution workspace unknown here (no GPU, no cuda_workspace.cudnn_limit_mb): "
        "left out, the trial probes it on its card"
        if cuda.cudnn_bytes is None
        else f"cuDNN's at the peak {cuda.cudnn_bytes / MB:.3f} MB"
    )
    measured = (
        "measured" if calibration()["measured"] else "provisional, not yet measured on a card"
    )
    return (
        f"on CUDA (compute capability {major}.{minor}, torch {'.'.join(map(str, target.version))}"
        f", workspaces {where}): the run's peak as the caching allocator counts it "
        f"{cuda.run_peak_bytes / MB:.3f} MB, of which the allocator's 512-byte blocks "
        f"{cuda.rounding_bytes / MB:.3f} MB, BLAS workspaces {cuda.blas_bytes / MB:.3f} MB; "
        f"{cudnn}; beside it the CUDA context {cuda.context_bytes / MB:.0f} MB, reserved "
        f"{cuda.reserved_bytes / MB:.3f} MB ({measured}: memory/cuda_calibration.json)"
    )


def run_peak_note(predicted, measured, storage: int) -> str:
    """The run's peak, the figure a search under a budget holds a trial to: predicted (and its
    tensor storage with operators' workspace, the CPU heap's objects left out: `storage`) and,
    when measured, torch's allocator's over a step and an evaluation, with and without kernels'
    internal temporaries."""
    said = (
        f"the run's peak (each step with its minibatch, an evaluation batch): predicted "
        f"{predicted.run_peak_bytes / MB:.3f} MB ({storage / MB:.3f} "
        "MB of tensor storage and operators' workspace)"
    )
    if measured is None:
        return said
    return (
        f"{said}; torch's allocator: {measured.run_peak_bytes / MB:.3f} MB, "
        f"{measured.run_tensor_peak_bytes / MB:.3f} MB without kernels' internal temporaries"
    )


def describe(config, task) -> str:
    """One line naming what was profiled; `task` is the synthetic task it was profiled on."""
    micro = config.microbatch
    micro_text = "none" if micro.size is None else f"{micro.size} ({micro.mode})"
    return (
        f"{config.task} {task.describe()}, {config.precision}, "
        f"checkpoint {config.checkpoint}, microbatch {micro_text}, "
        f"density {config.sparsity.density:g}"
        " (MB = 10^6 bytes)"
    )


LABEL_WIDTH = 28
SPARSE_NOTE = (
    f"sparse weights: {ACCOUNTED} counts them as CSR (what a sparse kernel would keep; the "
    f"figure searched and stored as memory.predicted_total_mb), {STORED} as the masked step "
    "holds them (dense, with bool masks); the measured column's stored total is its measured "
    "activation with the weights, gradients and state the step holds"
)
DENSE_NOTE = f"no sparse weights: {STORED} = {ACCOUNTED}"


def packed_note(config, lengths) -> str:
    """What a sparse configuration's figures count, with the paper's CSR accounting beside."""
    from ..memory.stored import accounted

    csr = accounted(config, "csr", lengths).total_mb
    return (
        f"sparse layers trained packed (nonzero values, their {config.sparsity.storage} indices, "
        f"gradients and state of the nonzeros; the dense weight one layer at a time): {STORED} = "
        f"{ACCOUNTED}; the paper's CSR accounting: {csr:.3f} MB"
    )


def time_figures(this, baseline) -> dict:
    """The predicted time (`timing.TimePrediction`) as the JSON holds it: the ``time.`` columns'
    figures, what an epoch holds, and the baseline's update beside this one's."""
    return {
        **this.to_dict(),
        "updates_per_epoch": this.updates_per_epoch,
        "evaluation_batches": this.evaluation_batches,
        "baseline_predicted_update_s": baseline.update_seconds,
        "predicted_slowdown": this.update_seconds / baseline.update_seconds,
    }


def time_note(prediction) -> str:
    """What the predicted time rows are for: the device, and what an epoch holds."""
    batches = prediction.evaluation_batches
    evaluation = "no evaluation pass" if batches is None else f"{batches} evaluation batches"
    return (
        f"time predicted for {prediction.device.describe()} (docs/time.md): an epoch of "
        f"{prediction.updates_per_epoch} updates and {evaluation}; a sparse model's rewiring "
        "left out"
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def table(
    reports: dict,
    baselines: dict,
    totals: dict,
    sparse: bool,
    objects: int = 0,
    times: dict | None = None,
) -> str:
    """One column per report: its parts and totals (the stored ones from `totals`, by source),
    each labelled stored or accounted (`counted`; a dense
    configuration's are equal, said once by `DENSE_NOTE`), the predicted stored total's tensor
    storage (without `objects`, the CPU heap's tensor and autograd objects it counts), FLOPs, the
    baseline (dense: stored), the ratios, measured, the peak of all PyTorch held and, predicted,
    the seconds of an update, an evaluation and an epoch with the update's slowdown against the
    baseline's (`times`: this configuration's and the baseline's `TimePrediction`)."""
    rows: dict[str, list[str]] = {}
    for source, report in reports.items():
        values, baseline = report.to_dict(), baselines[source]
        stored_mb, peak = totals[source], values.get(f"{source}_peak_mb")
        cells = {
            **{
                _label(f"{part} MB", part, sparse): f"{values[f'{source}_{part}_mb']:.3f}"
                for part in PARTS
            },
            **({f"total MB, {STORED}": f"{stored_mb:.3f}"} if sparse else {}),
            "tensor storage MB": (
                f"{stored_mb - objects / MB:.3f}" if source == "predicted" else "-"
            ),
            "GFLOPs per step": f"{values['flops_per_step'] / 1e9:.2f}",
            f"baseline total MB, {STORED}": f"{baseline.total_mb:.3f}",
            _label("baseline / this", "total", sparse): f"{report.ratio_to(baseline):.2f}",
            **(
                {f"baseline / this, {STORED}": f"{baseline.total_mb / stored_mb:.2f}"}
                if sparse
                else {}
            ),
            "peak MB, all held": "-" if peak is None else f"{peak:.3f}",
        }
        if times is not None:
            this = times["this"] if source == "predicted" else None
            cells.update(
                {
                    "s per update": _seconds(this and this.update_seconds),
                    "s per evaluation": _seconds(this and this.evaluation_seconds),
                    "s per epoch": _seconds(this and this.epoch_seconds),
                    "slowdown (time / baseline)": (
                        "-"
                        if this is None
                        else f"{this.update_seconds / times['baseline'].update_seconds:.2f}"
                    ),
                }
            )
        for label, cell in cells.items():
            rows.setdefault(label, []).append(cell)
    lines = [f"{'':{LABEL_WIDTH}}" + "".join(f"{name:>12}" for name in reports)]
    lines += [
        f"{label:{LABEL_WIDTH}}" + "".join(f"{cell:>12}" for cell in cells)
        for label, cells in rows.items()
    ]
    return "\n".join(lines)


def _label(row: str, part: str, sparse: bool) -> str:
    """A row's label: how its figure (of `part`) counts where a sparse weight makes a difference;
    the totals always say it (a dense configuration's total is stored, and equal accounted)."""
    how = counted(PREDICTED_PARTS[part])
    if row.startswith("total"):
        return f"{row}, {how if sparse else STORED}"
    return f"{row}, {how}" if sparse and how == ACCOUNTED else row


def peak_note(config, predicted, measured, task, objects: int) -> str:
    """What the measured peak holds beyond the predicted (stored) total: the input minibatch,
    which neither part counts, and the rest, said by device."""
    from ..data.batch import batch_tensors
    from ..train import resolve_device

    batch = sum(t.nbytes for t in batch_tensors(next(iter(task.train_batches(0)))))
    rest = measured.peak_bytes - predicted.total_bytes - batch
    where = (
        "cuDNN/cuBLAS workspaces and the allocator's 512-byte rounding, not predicted"
        if resolve_device(config.device).type != "cpu"
        else "the rest of the CPU heap; kernels' workspace is freed inside each operator and "
        "never sampled"
    )
    return (
        f"measured peak {measured.peak_bytes / MB:.3f} MB = predicted stored total "
        f"{predicted.total_bytes / MB:.3f} MB (of which {objects / MB:.3f} MB the CPU heap's "
        f"tensor and autograd objects) + the input minibatch {batch / MB:.3f} MB "
        f"{'+' if rest >= 0 else '-'} {abs(rest) / MB:.3f} MB: {where}"
    )


def whole_run_note(whole, predicted, storage: int | None) -> str:
    """The whole run as measured (`memory.whole_run`) beside the searched run peak: on the CPU its
    tensor storage and operators' workspace (`storage`: the allocator serves no heap object)."""
    searched = predicted.run_peak_bytes if storage is None else storage
    error = whole.peak_bytes / searched - 1
    what = "max_memory_allocated" if whole.device == "cuda" else "torch's CPU allocator"
    return (
        f"the whole run ({whole.epochs} epoch{'s' * (whole.epochs != 1)}, {whole.updates} "
        "updates, an evaluation and "
        f"{'a checkpoint saved and restored' if whole.checkpoints else 'no checkpoint'} after "
        f"each epoch) on its data, {what}: peak {whole.peak_bytes / MB:.3f} MB, during "
        f"{whole.peak_during}; predicted {searched / MB:.3f} MB ({error:+.2%} measured against it; "
        "the data set's host copy in neither)"
    )


def allocator_note(allocations, predicted_storage_mb: float) -> str:
    """The independent measurement (`memory.allocations`) beside the predicted tensor storage:
    the allocator sees tensor storage and kernels' workspace, not the CPU heap's objects."""
    values = allocations.to_dict()
    error = allocations.total_bytes / MB / predicted_storage_mb - 1
    return (
        "torch's allocator (profiler memory events, no code shared with the prediction): "
        f"model {values['allocator_model_mb']:.3f} + optimizer "
        f"{values['allocator_optimizer_mb']:.3f} + activation "
        f"{values['allocator_activation_mb']:.3f} = {values['allocator_total_mb']:.3f} MB, "
        f"predicted tensor storage {predicted_storage_mb:.3f} MB ({error:+.2%}); alive before "
        f"the step {values['allocator_before_mb']:.3f} MB, peak over the step "
        f"{values['allocator_peak_mb']:.3f} MB"
    )
