"""The device check: what only a GPU can show, in one call that fits a short lease.

  python3 benchmarks/gpu_check.py [--out DIR] [--budget 420] [--size full|dry|quick]
        [--parts workspaces,context,run_peak,tests,packing,memory,step,wrn]

It runs with the device machine's own python3 and packages (torch 2.11 or newer; no Ray, Optuna,
duckdb or jsonschema) on a copy of the tree with CIFAR-10 carried in `gpu_data/` (see
docs/gpu-check.md). It prints the versions first, then runs each part in a process of its own,
timed, printing each row as it is measured; a part that fails records its traceback as its
outcome and the next part runs. No part starts once `--budget` seconds have passed, and a part
still running `--grace` seconds after that is stopped. Everything printed goes to
`gpu_check.log`, and the versions, the machine's state (`machine.Watch`, never refused: the
lease is too short to lose), every row and every outcome to `gpu_check.json`, under $OUT
(or `--out`); where the context and run-peak parts ran on a card, the figures they measured go
to `cuda_calibration.json` there, in the form of `tune_lowmem/memory/cuda_calibration.json`.
Parts, the most telling first:

- workspaces: the BLAS workspaces torch's rule for this release and card gives
  (`memory.cuda_libraries`), kind by kind, against what torch allocates;
- context: what a trial's process holds on the card beyond its allocator (the CUDA context),
  measured from outside it;
- run_peak: the searched run peak against the whole run's `torch.cuda.max_memory_allocated`
  (`memory.whole_run`), on the memory ladder's rungs (a few updates of real CIFAR-10 each, their
  first rewiring brought forward, an evaluation and a checkpoint) and the quickstart front's
  points (`results/quickstart_front.json`, their whole schedule), predicted as the trial
  predicts (workspaces probed on the card) and as the driver does (torch's rules); each against
  5%; the reserved peak per allocated byte beside it;
- tests: the GPU-marked tests of `GPU_TEST_MODULES` (modules that import without Ray);
- packing: trials of a plug-in task as plain processes, each asking `gpu: auto` and held to its
  share of one card as the Ray trainable holds it, and one mispredicted trial that must end out
  of memory alone;
- memory: a step's memory as the paper counts it, predicted (`predict`) against the run's peak
  step (`memory.stepping.at_peak`), its model and optimizer parts as the allocator holds them
  (`tests/allocator_parts.py`) and its activation part as `measure` samples the allocator; the
  model and optimizer parts alone against the allocator's; each against 5%;
- step: the trial's step time against a plain PyTorch loop (interleaved rounds, medians);
- wrn: WideResNet-28-2 on CIFAR-10 for three epochs of the paper's schedule.

`--size full` (the default with CUDA) is the device run; without CUDA the default is `dry`: the
same parts on the CPU at small sizes, each CUDA-only comparison reported as "skipped: no CUDA".
`quick` is `dry` with fewer configurations, for the test that keeps the script working.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tune_lowmem.config import TrialConfig

TARGET_MEMORY, TARGET_STEP = 0.05, 0.03
NO_CUDA = "skipped: no CUDA"
MiB = 1 << 20
QUARTER = "quarter"  # a microbatch of a quarter of the minibatch (examples or tokens)
GPU_TEST_MODULES = (
    "tests/test_gpu_cuda.py",
    "tests/test_memory.py",
    "tests/test_data_feed.py",
    "tests/test_timing.py",
    "tests/test_trial_time.py",
)
ABSENT_ON_DEVICE = ("ray", "optuna", "duckdb", "jsonschema")  # none is on the device machine
NOMINAL_CARD_MB = 80_000.0  # the card the shares are sized for where there is none (dry runs)
TASK_SCRIPT = REPO / "benchmarks" / "gpu_check_task.py"
DATA_FOLDER = REPO / "gpu_data"  # CIFAR-10's archive, carried with the tree to the device

MEMORY_CONFIGS = [  # (label, task, technique fields): both tasks, every technique
    *(
        ("wrn " + p, "wrn", {"precision": p})
        for p in ("fp32", "fp16", "bf16", "amp-fp16", "amp-bf16")
    ),
    ("wrn sparse 0.3", "wrn", {"sparsity.density": 0.3}),
    ("wrn microbatch 1/4", "wrn", {"microbatch.size": QUARTER}),
    ("wrn checkpoint residual-2", "wrn", {"checkpoint": "residual-2"}),
    (
        "wrn fused heavy-ball mb 1/4",
        "wrn",
        {"fused_step": "heavy-ball", "microbatch.size": QUARTER},
    ),
    (
        "wrn fp16+sparse+mb+ckpt",
        "wrn",
        {
            "precision": "fp16",
            "sparsity.density": 0.1,
            "microbatch.size": QUARTER,
            "checkpoint": "residual-1",
        },
    ),
    ("dct fp32", "dct", {}),
    ("dct fp16", "dct", {"precision": "fp16"}),
    ("dct sparse 0.25", "dct", {"sparsity.density": 0.25}),
    ("dct microbatch 1/4", "dct", {"microbatch.size": QUARTER}),
    ("dct checkpoint residual-1", "dct", {"checkpoint": "residual-1"}),
    ("dct int8 Adam state", "dct", {"adam_state": "int8"}),
    ("dct fused Adam step", "dct", {"fused_step": "exact"}),
    (
        "wrn cuBLAS :16:8, cuDNN 0 MiB",
        "wrn",
        {"cuda_workspace.cublas": ":16:8", "cuda_workspace.cudnn_limit_mb": 0},
    ),
]
STEP_CONFIGS = [  # WRN's SGD: every technique but Adam's state, each alone
    ("off", {}),
    ("fp16", {"precision": "fp16"}),
    ("amp-bf16", {"precision": "amp-bf16"}),
    ("sparse 0.1", {"sparsity.density": 0.1}),
    ("microbatch 1/4", {"microbatch.size": QUARTER}),
    ("checkpoint residual-2", {"checkpoint": "residual-2"}),
    ("fused step", {"fused_step": "exact"}),
]
PACKING_TASK = "benchmarks.gpu_check_task:HungryBlobs"
TINY_DCT_MODEL = {"embed_dim": 16, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1}
TINY_DCT_MODEL |= {"encoder_kernels": [3], "decoder_kernels": [3]}  # one layer each


@dataclass(frozen=True)
class Size:
    """How big each part runs: the device's sizes, or the CPU dry run's."""

    device: str
    wrn: dict  # the memory part's WRN base
    dct: dict  # the memory part's DC-Transformer base
    memory_configs: int  # how many of MEMORY_CONFIGS
    step: dict  # the step part's WRN
    step_configs: int  # how many of STEP_CONFIGS
    step_rounds: tuple[int, int, int]  # warm-up steps, rounds, steps per round
    packing: dict  # the packed trials' sizes (`packing_plan`)
    packing_widths: tuple[int, ...]  # the first is the mispredicted one
    wrn_run: dict = field(default_factory=dict)  # the WideResNet run
    run_peak: dict = field(default_factory=dict)  # the run-peak part's WRN and its data
    run_peak_rungs: tuple[int, ...] = ()  # rungs of memory_ladder.wrn_rungs()
    quickstart_points: int = 0  # how many of the quickstart front's points (a full run each)


FULL_DCT = {"task": "dct-iwslt14", "data.root": "/nonexistent/iwslt14"}  # synthetic batches
SIZES = {
    "full": Size(
        device="cuda",
        wrn={"model.depth": 16, "model.width": 2, "schedule.batch_size": 128},
        dct={**FULL_DCT, "schedule.max_tokens": 4000},
        memory_configs=len(MEMORY_CONFIGS),
        step={"model.depth": 28, "model.width": 2, "schedule.batch_size": 128},
        step_configs=len(STEP_CONFIGS),
        step_rounds=(5, 7, 10),
        packing={"batch": 4096, "train": 16384, "val": 1024, "features": 256, "hog_mb": 5000},
        packing_widths=(1000, 1024, 2048, 4096, 8192),
        wrn_run={"model.depth": 28, "model.width": 2, "schedule.epochs": 3},
        run_peak={"model.depth": 28, "model.width": 2, "schedule.batch_size": 100},
        run_peak_rungs=(0, 5, 7, 12, 23, 27),
        quickstart_points=3,
    ),
    "dry": Size(
        device="cpu",
        wrn={"model.depth": 10, "model.width": 1, "schedule.batch_size": 16},
        dct={**FULL_DCT, "schedule.max_tokens": 600, "model": TINY_DCT_MODEL},
        memory_configs=len(MEMORY_CONFIGS),
        step={"model.depth": 10, "model.width": 1, "schedule.batch_size": 16},
        step_configs=len(STEP_CONFIGS),
        step_rounds=(1, 3, 2),
        packing={"batch": 32, "train": 128, "val": 32, "features": 8, "hog_mb": 1},
        packing_widths=(1000, 16, 32, 64, 128),
        wrn_run={
            "model.depth": 10,
            "model.width": 1,
            "schedule.epochs": 3,
            "schedule.batch_size": 20,
            "data.train_subset": 200,
            "data.val_size": 100,
            "data.test_subset": 100,
        },
        run_peak={"model.depth": 10, "model.width": 1, "schedule.batch_size": 20},
        run_peak_rungs=(0, 7, 27),
        quickstart_points=0,
    ),
}
SIZES["quick"] = Size(
    **{
        **SIZES["dry"].__dict__,
        "memory_configs": 1,
        "step_configs": 1,
        "step_rounds": (1, 1, 1),
        "packing_widths": (1000, 16),
        "wrn_run": {**SIZES["dry"].wrn_run, "schedule.epochs": 1},
        "run_peak_rungs": (7,),
    }
)


class Skipped(Exception):
    """A part that cannot run here: its outcome is the message."""


@dataclass
class Part:
    title: str
    headers: list[str]
    run: Callable[[Size, Callable[[list], None]], str]  # rows through emit; returns its checks


def config_of(base: dict, fields: dict, device: str) -> TrialConfig:
    """A config of `base` with `fields`; a microbatch of `QUARTER` is a quarter of the batch."""
    batch = base.get("schedule.batch_size") or base.get("schedule.max_tokens")
    resolved = {k: batch // 4 if v == QUARTER else v for k, v in fields.items()}
    return TrialConfig.from_dict({**base, "device": device, **resolved})


def relative_error(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured if measured else float("inf")


def verdict(error: float, target: float) -> str:
    return "ok" if error <= target else "OVER"


def cell(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def table(headers: list[str], rows: list[list[object]]) -> str:
    """A plain text table: floats with two decimals, columns as wide as their widest cell."""
    cells = [[cell(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths))
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, cells)])


def text_of(value: object) -> str:
    """A store cell as text: a missing one (None, or NaN as pandas reads a null) is empty."""
    return value if isinstance(value, str) else ""


def cuda() -> bool:
    return torch.cuda.is_available()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def versions() -> dict[str, object]:
    """What ran the check: Python, torch, CUDA, cuDNN, the GPU; which packages are absent."""
    found = {}
    for name in ("numpy", "pandas", "pyarrow", "pytest", *ABSENT_ON_DEVICE):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    gpu = {"gpu": NO_CUDA}
    if cuda():
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        gpu = {
            "gpu": properties.name,
            "capability": f"{properties.major}.{properties.minor}",
            "gpu_memory_mb": round(properties.total_memory / 1e6),
        }
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        **gpu,
        **found,
    }


# ---- memory ------------------------------------------------------------------------------------


def memory_part(size: Size, emit) -> str:
    from tests.allocator_parts import allocator_parts
    from tune_lowmem.memory import MB
    from tune_lowmem.memory.measure import measure
    from tune_lowmem.memory.predict import predict
    from tune_lowmem.memory.stepping import at_peak

    bases = {"wrn": size.wrn, "dct": size.dct}
    within = {"paper": 0, "held": 0}
    configs = [*MEMORY_CONFIGS[: size.memory_configs]]
    if size.memory_configs < len(MEMORY_CONFIGS):  # a few: one of each task
        configs = [next(c for c in MEMORY_CONFIGS if c[1] == task) for task in bases]
    for label, task, fields in configs:
        config = config_of(bases[task], fields, size.device)
        predicted, measured = predict(config), at_peak(measure, config)
        held = sum(allocator_parts(config))
        paper_error = relative_error(predicted.total_bytes, held + measured.activation_bytes)
        held_error = relative_error(predicted.model_bytes + predicted.optimizer_bytes, held)
        within["paper"] += paper_error <= TARGET_MEMORY
        within["held"] += held_error <= TARGET_MEMORY
        emit(
            [
                label,
                predicted.total_bytes / MB,
                (held + measured.activation_bytes) / MB,
                100 * paper_error,
                verdict(paper_error, TARGET_MEMORY),
                held / MB,
                100 * held_error,
                verdict(held_error, TARGET_MEMORY),
            ]
        )
    return (
        f"paper count within 5%: {within['paper']}/{len(configs)}; model and optimizer against "
        f"the allocator within 5%: {within['held']}/{len(configs)}"
    )


def workspaces_part(size: Size, emit) -> str:
    """torch's rule for this release and card (read in its source: `cuda_libraries`) against
    what it allocates on a fresh stream, by kind."""
    from tune_lowmem.memory.cuda_libraries import BlasRule, probe_blas, release

    if size.device != "cuda":
        raise Skipped(NO_CUDA)
    capability = torch.cuda.get_device_capability()
    rule = BlasRule.of(capability, release())
    probe = probe_blas(torch.device("cuda"))
    rows = [
        (
            "cuBLAS, kept per handle and stream",
            rule.cublas_bytes * rule.cublas_kept,
            probe.cublas_kept,
        ),
        (
            "cuBLAS, one per call",
            rule.cublas_bytes * (not rule.cublas_kept),
            probe.cublas_per_call,
        ),
        ("cuBLASLt, its own", rule.lt_bytes, probe.lt_kept),
    ]
    for label, counted, allocated in rows:
        emit([label, counted / MiB, allocated / MiB, "ok" if counted == allocated else "OFF"])
    agree = sum(counted == allocated for _, counted, allocated in rows)
    return f"{agree}/{len(rows)} workspace kinds as torch's source reads (capability {capability})"


# ---- the CUDA context, beside the allocator ------------------------------------------------------

CONTEXT_CHILD = """
import sys, torch
from tune_lowmem.memory.synthetic import synthetic_task
from tune_lowmem.train import Trainer
from tune_lowmem.config import TrialConfig
config = TrialConfig.from_dict({flat!r})
trainer = Trainer(config, task=synthetic_task(config, torch.device("cuda")))
trainer.train_step(next(iter(trainer.task.train_batches(0))))
trainer.model.eval()
with torch.no_grad():
    trainer.task.evaluation_pass(trainer.model, trainer.task.synthetic_evaluation_batch(torch.Generator()))
torch.cuda.synchronize()
print(torch.cuda.memory_reserved(), flush=True)
sys.stdin.readline()
"""


def context_part(size: Size, emit) -> str:
    """What a trial's process holds on the card outside its caching allocator (the CUDA context,
    the kernels it loaded, the libraries' handles), measured from outside it: the card's free
    memory before a trial-like process starts and while it holds what a step and an evaluation
    left, less what its allocator reserved. The card must be otherwise idle (the parts run one
    at a time)."""
    if size.device != "cuda":
        raise Skipped(NO_CUDA)
    figures = []
    for label, flat in (
        ("wrn", {**size.run_peak, "device": "cuda"}),
        ("dct", {**size.dct, "device": "cuda"}),
    ):
        free_before, _ = torch.cuda.mem_get_info()
        child = subprocess.Popen(
            [sys.executable, "-c", CONTEXT_CHILD.format(flat=flat)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        reserved = int(child.stdout.readline())
        free_during, _ = torch.cuda.mem_get_info()
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait()
        context = free_before - free_during - reserved
        figures.append(context)
        emit([label, (free_before - free_during) / 1e6, reserved / 1e6, context / 1e6])
    return f"context_mb {max(figures) / 1e6:.1f}"


# ---- the run's peak on the card --------------------------------------------------------------------


def run_peak_configs(size: Size) -> list[tuple[str, dict]]:
    """The ladder's rungs (their first rewiring brought to update 2, each run a few updates of
    real CIFAR-10 with an evaluation and a checkpoint) and the quickstart front's points (their
    whole schedule), as flat configs on this size's device."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from memory_ladder import wrn_rungs

    rungs = wrn_rungs()
    batch = size.run_peak["schedule.batch_size"]
    short = {"schedule.epochs": 1, "data.train_subset": 4 * batch}
    short |= {"data.val_size": 100, "data.test_subset": 100}
    configs = []
    for index in size.run_peak_rungs:
        label, flat = rungs[index]
        rewires = flat.get("sparsity.density", 1.0) < 1
        period = {"sparsity.period_multiplier": 0.02} if rewires else {}
        configs.append((f"rung {index}: {label}", {**size.run_peak, **short, **flat, **period}))
    front = REPO / "benchmarks" / "results" / "quickstart_front.json"
    if size.quickstart_points and front.exists():
        points = json.loads(front.read_text())["points"][: size.quickstart_points]
        configs += [(f"quickstart {p['trial_id']}", p["config"]) for p in points]
    return [(label, {**flat, "device": size.device}) for label, flat in configs]


def run_peak_part(size: Size, emit) -> str:
    """The searched run peak against the whole run's own peak (`memory.whole_run`): on CUDA,
    `torch.cuda.max_memory_allocated` over the run, against the prediction made as the trial
    makes it (workspaces probed on this card) and as the driver makes it (torch's rules for
    this release and card); the reserved peak per allocated byte beside it (the share's rule).
    On the CPU (a dry run), the allocator's replay against the prediction's tensors and
    workspace (`run_peak_storage`: the allocator serves no heap object)."""
    import dataclasses as dc

    from tune_lowmem.config import TrialConfig
    from tune_lowmem.memory import MB
    from tune_lowmem.memory.cuda import trial_target
    from tune_lowmem.memory.predict import predict, run_peak_storage
    from tune_lowmem.memory.whole_run import measure_run

    within = {"card": 0, "driver": 0}
    ratios, configs = [], run_peak_configs(size)
    for label, flat in configs:
        config = TrialConfig.from_dict(flat)
        target = trial_target(config)
        if target is None:  # on the CPU: tensors and workspace, as the allocator sees them
            card = driver = run_peak_storage(config)
        else:
            card = predict(config, target=target).run_peak_bytes
            driver = predict(config, target=dc.replace(target, on_card=False)).run_peak_bytes
        run = measure_run(config)
        errors = [relative_error(figure, run.peak_bytes) for figure in (card, driver)]
        within["card"] += errors[0] <= TARGET_MEMORY
        within["driver"] += errors[1] <= TARGET_MEMORY
        if run.reserved_bytes is not None:
            ratios.append(run.reserved_bytes / run.peak_bytes)
        emit(
            [
                label[:40],
                card / MB,
                driver / MB,
                run.peak_bytes / MB,
                100 * errors[0],
                100 * errors[1],
                verdict(errors[0], TARGET_MEMORY),
                "-" if run.reserved_bytes is None else run.reserved_bytes / MB,
                f"{run.updates} updates, {run.checkpoints} checkpoints; peak in {run.peak_during}",
            ]
        )
    ratio = f"; reserved_per_allocated {max(ratios):.3f}" if ratios else ""
    return (
        f"within 5%: {within['card']}/{len(configs)} as the trial predicts, "
        f"{within['driver']}/{len(configs)} as the driver does{ratio}"
    )


# ---- step time ---------------------------------------------------------------------------------


def timed(step, batch, steps: int, device: torch.device) -> float:
    """Seconds per step, the device drained before and after."""
    synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        step(batch)
    synchronize(device)
    return (time.perf_counter() - started) / steps


def interleaved(first, second, batch, rounds: tuple[int, int, int], device) -> tuple[float, float]:
    """Median seconds per step of two steps timed in alternating rounds, after a warm-up."""
    warmup, count, steps = rounds
    for step in (first, second):
        timed(step, batch, warmup, device)
    times = [
        (timed(first, batch, steps, device), timed(second, batch, steps, device))
        for _ in range(count)
    ]
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)


def plain_step(model, optimizer, task):
    """The loop a user would write: the minibatch to the device, forward, loss, backward, step."""

    def step(batch):
        images, labels = task.on_device((batch.images(), batch.labels))
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step


def step_part(size: Size, emit) -> str:
    from tune_lowmem.memory.synthetic import synthetic_task
    from tune_lowmem.train import Trainer

    device = torch.device(size.device)
    reference = synthetic_task(config_of(size.step, {}, size.device), device)
    batch = next(iter(reference.train_batches(0)))
    model = reference.build_model().to(device)
    plain = plain_step(model, reference.build_optimizer(model), reference)
    ratios = {}
    for label, fields in STEP_CONFIGS[: size.step_configs]:
        config = config_of(size.step, fields, size.device)
        trainer = Trainer(config, task=synthetic_task(config, device))
        plain_s, trial_s = interleaved(plain, trainer.train_step, batch, size.step_rounds, device)
        ratios[label] = trial_s / plain_s
        target = verdict(abs(ratios[label] - 1), TARGET_STEP) if not fields else "-"
        emit([label, 1000 * plain_s, 1000 * trial_s, ratios[label], target])
    return f"techniques off: {ratios['off']:.3f} x the plain loop (target within 3%)"


# ---- packing -----------------------------------------------------------------------------------


def packing_plan(size: Size, card_mb: float) -> dict:
    """The packed trials' base config and resources, as a search space would give them."""
    p = size.packing
    base = {"task": PACKING_TASK, "device": "auto", "schedule.epochs": 2}
    base |= {"schedule.batch_size": p["batch"], "data.train": p["train"], "data.val": p["val"]}
    base |= {"model.features": p["features"], "model.hog_mb": p["hog_mb"]}
    return {"base": base, "resources": {"cpu": 1, "gpu": "auto", "gpu_memory_mb": card_mb}}


def packing_part(size: Size, emit) -> str:
    from gpu_check_task import HOG_HIDDEN, SWEEP, packing_trial

    from tune_lowmem import store
    from tune_lowmem.memory import MB
    from tune_lowmem.memory.share import memory_fraction, trial_share

    on_cuda = size.device == "cuda"
    card_mb = torch.cuda.get_device_properties(0).total_memory / MB if on_cuda else NOMINAL_CARD_MB
    widths, plan = size.packing_widths, packing_plan(size, card_mb)
    assert widths[0] == HOG_HIDDEN, widths
    with tempfile.TemporaryDirectory() as folder:
        plan_file, root = Path(folder, "plan.json"), Path(folder, "store")
        plan_file.write_text(json.dumps(plan))
        trials = [
            subprocess.Popen(
                [sys.executable, str(TASK_SCRIPT), str(plan_file), str(width), str(root)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for width in widths
        ]
        for width, trial in zip(widths, trials):
            output, _ = trial.communicate()
            last = output.strip().splitlines()[-1:] or ["(no output)"]
            print(f"  trial width {width}: exit {trial.returncode}; {last[0]}", flush=True)
        rows = store.read_trials(root, SWEEP).sort_values("config.model.hidden")
    outcomes = {}
    for _, row in rows.iterrows():
        width = int(row["config.model.hidden"])
        config, resources = packing_trial(plan, width)
        share = trial_share(resources, config)
        limit = (memory_fraction(share, card_mb) or 1.0) * card_mb
        reserved = row["memory.cuda_max_reserved_mb"]
        within = ("yes" if reserved <= limit else "NO") if on_cuda else NO_CUDA
        reason = text_of(row["failure_reason"])
        outcomes[width] = (row["status"], reason, within)
        emit(
            [
                width,
                row["status"],
                share,
                limit,
                row["memory.predicted_total_mb"],
                reserved if on_cuda else "-",
                within,
                reason[:60],
            ]
        )
    others = [w for w in widths if w != HOG_HIDDEN]
    completed = sum(outcomes.get(w, ("",))[0] == "completed" for w in others)
    summary = f"{completed}/{len(others)} others completed"
    if not on_cuda:
        return f"{summary}; held to shares and the out-of-memory outcome: {NO_CUDA}"
    held = sum(outcomes.get(w, ("", "", ""))[2] == "yes" for w in others)
    hog = outcomes.get(HOG_HIDDEN, ("missing", "", ""))
    alone = hog[0] == "infeasible" and hog[1].startswith("out of memory")
    verdict_of_hog = "ok" if alone else "NOT out of memory"
    return f"{summary}, {held} within their shares; mispredicted: {hog[0]} ({verdict_of_hog})"


# ---- WideResNet-28-2 ---------------------------------------------------------------------------


def wrn_part(size: Size, emit) -> str:
    from tune_lowmem.train import Trainer

    config = config_of(size.wrn_run, {}, size.device)
    trainer = Trainer(config)
    images = len(trainer.task.data.train)

    def on_epoch(metrics, _trainer) -> None:
        seconds = metrics["epoch_seconds"]
        emit(
            [
                metrics["epoch"],
                seconds,
                images / seconds,
                metrics["train_loss"],
                metrics.get("val_accuracy", float("nan")),
            ]
        )

    history = trainer.run(on_epoch)
    model = f"WRN-{config.model.depth}-{config.model.width}"
    return f"{model}, {images} training images; val accuracy {history[-1]['val_accuracy']:.4f}"


# ---- GPU-marked tests --------------------------------------------------------------------------


def tests_part(size: Size, emit) -> str:
    pytest = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider"]
    if size.device != "cuda":  # they cannot run: that they collect without Ray is checked
        listed = subprocess.run(
            [*pytest, "-q", "--collect-only", *GPU_TEST_MODULES],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        ids = [line for line in listed.stdout.splitlines() if "::" in line]
        if listed.returncode != 0:
            raise RuntimeError(f"collection failed:\n{listed.stdout[-3000:]}{listed.stderr}")
        for module in GPU_TEST_MODULES:
            emit([module, "collected", sum(i.startswith(module) for i in ids), "-"])
        raise Skipped(f"{NO_CUDA} ({len(ids)} GPU tests collected without Ray)")
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder, "junit.xml")
        subprocess.run(
            [*pytest, "-q", f"--junitxml={report}", *GPU_TEST_MODULES], cwd=REPO, check=False
        )
        cases = ElementTree.parse(report).getroot().iter("testcase")
        counts: dict[str, int] = {}
        for case in cases:
            failed = (
                case.find("failure") if case.find("failure") is not None else case.find("error")
            )
            outcome = "skipped" if case.find("skipped") is not None else "passed"
            outcome = "FAILED" if failed is not None else outcome
            counts[outcome] = counts.get(outcome, 0) + 1
            message = (failed.get("message") or "")[:80] if failed is not None else ""
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
            emit([name, outcome, float(case.get("time", 0)), message])
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))


PARTS = {  # the most telling first: the budget may leave the last unstarted
    "workspaces": Part(
        "BLAS workspaces: torch's rule for this release and card vs allocated by torch",
        ["workspace", "counted MiB", "allocated MiB", ""],
        workspaces_part,
    ),
    "context": Part(
        "the CUDA context: a trial's process on the card beyond its allocator",
        ["trial", "used MB", "reserved MB", "context MB"],
        context_part,
    ),
    "run_peak": Part(
        "the run's peak: predicted (by the trial, by the driver) vs the whole run measured",
        [
            "config",
            "trial MB",
            "driver MB",
            "measured MB",
            "err %",
            "driver err %",
            "",
            "reserved MB",
            "run",
        ],
        run_peak_part,
    ),
    "tests": Part(
        f"GPU-marked tests of {', '.join(GPU_TEST_MODULES)}",
        ["test", "outcome", "seconds", "message"],
        tests_part,
    ),
    "packing": Part(
        "trials packed on one card as processes (width 1000 is mispredicted)",
        ["width", "status", "share", "limit MB", "predicted MB", "reserved MB", "within", "reason"],
        packing_part,
    ),
    "memory": Part(
        "a step's memory as the paper counts it, predicted vs measured (target 5%)",
        [
            "config",
            "paper MB",
            "measured MB",
            "err %",
            "",
            "model+opt MB (allocator)",
            "err %",
            "",
        ],
        memory_part,
    ),
    "step": Part(
        "step time: the trial's step vs a plain PyTorch loop (target 3%)",
        ["techniques", "plain ms", "trial ms", "ratio", ""],
        step_part,
    ),
    "wrn": Part(
        "WideResNet on CIFAR-10, the paper's schedule",
        ["epoch", "seconds", "images/s", "train loss", "val accuracy"],
        wrn_part,
    ),
}


# ---- one part, in its own process ----------------------------------------------------------------


def run_part(name: str, size: Size, result_file: Path) -> int:
    """Run one part here, printing each row as it comes; its rows and outcome to `result_file`."""
    part = PARTS[name]
    rows: list[list] = []
    widths = [max(len(h), 10) for h in part.headers]
    widths[0] = max(widths[0], 28)  # labels

    def emit(row: list) -> None:
        rows.append([c if isinstance(c, (int, float, str)) else str(c) for c in row])
        print("  " + "  ".join(cell(c).ljust(w) for c, w in zip(row, widths)), flush=True)

    print("  " + "  ".join(h.ljust(w) for h, w in zip(part.headers, widths)), flush=True)
    result = {"rows": rows, "outcome": "ok", "checks": "", "traceback": None}
    try:
        result["checks"] = part.run(size, emit)
    except Skipped as skipped:
        result["outcome"] = f"skipped: {skipped}".replace("skipped: skipped: ", "skipped: ")
    except Exception as error:  # noqa: BLE001 - any failure is this part's outcome, told as such
        result["outcome"] = f"failed: {type(error).__name__}: {error}".splitlines()[0][:200]
        result["traceback"] = traceback.format_exc()
        print(result["traceback"], flush=True)
    result_file.write_text(json.dumps(result, default=str))
    return 0


# ---- the whole check -----------------------------------------------------------------------------


class Log:
    """Everything said, on the console and in the log file."""

    def __init__(self, path: Path):
        self.file = path.open("w", buffering=1)

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.file.write(text + "\n")


def run_isolated(name: str, size_name: str, log: Log, limit_s: float, folder: Path) -> dict:
    """One part in a process of its own (a crash or a CUDA error there ends it alone), stopped
    with everything it started after `limit_s` seconds."""
    result_file = folder / f"{name}.json"
    command = [sys.executable, __file__, "--size", size_name, "--run-part", name]
    process = subprocess.Popen(
        [*command, "--result", str(result_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    reader = threading.Thread(target=lambda: [log.say(line.rstrip()) for line in process.stdout])
    reader.start()
    try:
        process.wait(timeout=max(1.0, limit_s))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        reader.join()
        return {"outcome": f"stopped: still running after {limit_s:.0f} s", "rows": []}
    reader.join()
    if not result_file.exists():
        return {"outcome": f"crashed: exit {process.returncode}", "rows": []}
    return json.loads(result_file.read_text())


def check(args: argparse.Namespace) -> int:
    out = Path(args.out or os.environ.get("OUT") or tempfile.mkdtemp(prefix="gpu_check-"))
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "gpu_check.log")
    from machine import Watch, describe

    watch = Watch.start(torch.get_num_threads(), allow_load=True)
    started = time.monotonic()
    found = versions()
    log.say("gpu_check: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    log.say(f"size {args.size}; budget {args.budget:.0f} s (+{args.grace:.0f} s grace); out {out}")
    report = {"versions": found, "size": args.size, "budget_s": args.budget, "parts": []}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.parts:
            part, elapsed = PARTS[name], time.monotonic() - started
            entry = {"part": name, "title": part.title, "headers": part.headers}
            log.say(f"\n[{name}] {part.title}")
            if elapsed >= args.budget:
                entry.update(outcome=f"not started: budget of {args.budget:.0f} s spent", rows=[])
            else:
                limit = args.budget + args.grace - elapsed
                entry.update(run_isolated(name, args.size, log, limit, Path(folder)))
            entry["seconds"] = round(time.monotonic() - started - elapsed, 1)
            log.say(
                f"[{name}] {entry['outcome']} in {entry['seconds']:.1f} s. {entry.get('checks') or ''}"
            )
            report["parts"].append(entry)
    report["seconds"] = round(time.monotonic() - started, 1)
    report["machine"] = watch.stop()
    calibration = measured_calibration(report)
    if calibration is not None:  # the package's figures, measured on this card
        (out / "cuda_calibration.json").write_text(json.dumps(calibration, indent=2) + "\n")
        log.say(f"measured cuda_calibration.json: {calibration}")
    log.say(describe(report["machine"]))
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    log.say(f"\nsummary ({report['seconds']:.0f} s; {out / 'gpu_check.json'}):")
    summary = [
        [p["part"], p["outcome"], p["seconds"], p.get("checks") or ""] for p in report["parts"]
    ]
    log.say(table(["part", "outcome", "seconds", "checks"], summary))
    bad = [p for p in report["parts"] if p["outcome"].startswith(("failed", "crashed", "stopped"))]
    return 1 if bad else 0


def measured_calibration(report: dict) -> dict | None:
    """`tune_lowmem/memory/cuda_calibration.json` as this run measured it (the context part's
    largest context, the run-peak part's largest reserved per allocated byte), or None where
    either part did not run on a card."""
    parts = {p["part"]: p for p in report["parts"]}
    context, peaks = parts.get("context"), parts.get("run_peak")
    if not (context and peaks and context["outcome"] == "ok" and peaks["outcome"] == "ok"):
        return None
    ratios = [row[7] / row[3] for row in peaks["rows"] if isinstance(row[7], float)]
    if not context["rows"] or not ratios:
        return None
    versions = report["versions"]
    return {
        "context_mb": round(max(row[3] for row in context["rows"]), 1),
        "reserved_per_allocated": round(max(ratios), 4),
        "measured": True,
        "source": (
            f"measured by benchmarks/gpu_check.py (parts context and run_peak) on "
            f"{versions['gpu']} (capability {versions.get('capability')}), torch "
            f"{versions['torch']}, CUDA {versions['cuda']}, {time.strftime('%Y-%m-%d')}"
        ),
    }


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder for gpu_check.json and gpu_check.log (default $OUT)")
    parser.add_argument(
        "--budget", type=float, default=420.0, help="seconds after which no part starts"
    )
    parser.add_argument(
        "--grace", type=float, default=60.0, help="seconds a started part may run past it"
    )
    parser.add_argument("--size", choices=sorted(SIZES), help="default: full with CUDA, else dry")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"any of {','.join(PARTS)}")
    parser.add_argument("--run-part", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.size = args.size or ("full" if cuda() else "dry")
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"--parts: {unknown[0]!r} is not a part; allowed: {', '.join(PARTS)}")
    if args.size == "full" and not cuda():
        parser.error("--size: full needs a CUDA device; allowed here: dry, quick")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if DATA_FOLDER.is_dir():  # CIFAR-10 carried with the tree
        os.environ.setdefault("TUNE_LOWMEM_DATA", str(DATA_FOLDER))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONUNBUFFERED"] = "1"
    sys.path.insert(0, str(REPO / "benchmarks"))
    if args.run_part:
        return run_part(args.run_part, SIZES[args.size], args.result)
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
