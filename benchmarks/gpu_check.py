"""The prepared GPU check (issue 16): one GPU, under 8 minutes, one table per part.

  PYTHONPATH=$PWD python benchmarks/gpu_check.py

(a) predicted vs measured peak for 14 configurations of both paper tasks and every technique,
    the paper's count against `measure` and the CUDA allocator's view against
    `max_memory_allocated`, each with its error against the 5% target;
(b) the trial step's time against a plain PyTorch loop (target: within 3%), techniques off and
    each on;
(c) five trials packed on the GPU by a real local Ray cluster with `gpu: auto`: four of
    different sizes, none over its share, and one mispredicted that fails alone (infeasible);
(d) WideResNet-28-2 for a few epochs of the paper's schedule: images per second, accuracy;
then every GPU-marked test (`pytest -m gpu`). Without CUDA it says so in one line and exits 0.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tune_lowmem.config import TrialConfig

TARGET_MEMORY, TARGET_STEP = 0.05, 0.03
WRN = {"model.depth": 16, "model.width": 2, "schedule.batch_size": 128, "device": "cuda"}
DCT = {
    "task": "dct-iwslt14",
    "device": "cuda",
    "data.root": "/nonexistent/iwslt14",  # the profiler and the measurement use synthetic data
    "schedule.max_tokens": 4000,
}
MEMORY_CONFIGS = [  # (label, task base, technique fields): both tasks, every technique
    *(
        ("wrn " + p, WRN, {"precision": p})
        for p in ("fp32", "fp16", "bf16", "amp-fp16", "amp-bf16")
    ),
    ("wrn sparse 0.3", WRN, {"sparsity.density": 0.3}),
    ("wrn microbatch 32", WRN, {"microbatch.size": 32}),
    ("wrn checkpoint residual-2", WRN, {"checkpoint": "residual-2"}),
    ("wrn fused step heavy-ball", WRN, {"fused_step": "heavy-ball", "microbatch.size": 32}),
    (
        "wrn fp16+sparse+mb+ckpt",
        WRN,
        {
            "precision": "fp16",
            "sparsity.density": 0.1,
            "microbatch.size": 32,
            "checkpoint": "residual-1",
        },
    ),
    ("dct fp32", DCT, {}),
    ("dct fp16", DCT, {"precision": "fp16"}),
    ("dct sparse 0.25", DCT, {"sparsity.density": 0.25}),
    ("dct microbatch 1000", DCT, {"microbatch.size": 1000}),
    ("dct checkpoint residual-1", DCT, {"checkpoint": "residual-1"}),
    ("dct int8 Adam state", DCT, {"adam_state": "int8"}),
    ("dct fused Adam step", DCT, {"fused_step": "exact"}),
]
STEP_CONFIGS = [  # WRN's SGD: every technique but Adam's state
    ("off", {}),
    ("fp16", {"precision": "fp16"}),
    ("amp-bf16", {"precision": "amp-bf16"}),
    ("sparse 0.1", {"sparsity.density": 0.1}),
    ("microbatch 32", {"microbatch.size": 32}),
    ("checkpoint residual-2", {"checkpoint": "residual-2"}),
    ("fused step", {"fused_step": "exact"}),
]
PACKING_SPACE = """\
name: gpu-check-packing
base: {{task: "benchmarks.gpu_check_task:HungryBlobs", device: auto,
        schedule: {{epochs: 2, batch_size: 4096}}, data: {{train: 16384, val: 1024}},
        model: {{features: 256}}}}
params:
  model.hidden: {{type: choice, values: [{widths}]}}
objectives: {{val_accuracy: maximize, memory.predicted_total_mb: minimize}}
sampler: grid
resources: {{cpu: 1, gpu: auto, gpu_memory_mb: {card_mb:.0f}}}
max_concurrent: 5
"""
PACKING_WIDTHS = (1000, 1024, 2048, 4096, 8192)  # 1000: benchmarks.gpu_check_task.HOG_HIDDEN


def relative_error(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured if measured else float("inf")


def verdict(error: float, target: float) -> str:
    return "ok" if error <= target else "OVER"


def table(headers: list[str], rows: list[list[object]]) -> str:
    """A plain text table: floats with two decimals, columns as wide as their widest cell."""
    cells = [[f"{c:.2f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths))
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, cells)])


def config_of(base: dict, fields: dict) -> TrialConfig:
    return TrialConfig.from_dict({**base, **fields})


# ---- (a) memory --------------------------------------------------------------------------------


def memory_rows() -> list[list[object]]:
    from tune_lowmem.memory import MB
    from tune_lowmem.memory.cuda import predict_cuda
    from tune_lowmem.memory.measure import measure
    from tune_lowmem.memory.predict import predict

    capability = torch.cuda.get_device_capability()
    rows = []
    for label, base, fields in MEMORY_CONFIGS:
        config = config_of(base, fields)
        predicted, measured = predict(config), measure(config)
        view = predict_cuda(config, capability)
        paper_error = relative_error(predicted.total_bytes, measured.total_bytes)
        cuda_error = relative_error(view.allocated_bytes, measured.peak_bytes)
        rows.append(
            [
                label,
                predicted.total_bytes / MB,
                measured.total_bytes / MB,
                100 * paper_error,
                verdict(paper_error, TARGET_MEMORY),
                view.allocated_bytes / MB,
                measured.peak_bytes / MB,
                100 * cuda_error,
                verdict(cuda_error, TARGET_MEMORY),
            ]
        )
    return rows


# ---- (b) step time -----------------------------------------------------------------------------


def timed(step, batch, steps: int = 30, warmup: int = 5) -> float:
    """Seconds per step, the device drained before and after."""
    for _ in range(warmup):
        step(batch)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step(batch)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / steps


def plain_step(model, optimizer):
    """The loop a user would write: forward, loss, backward, step."""

    def step(batch):
        images, labels = batch
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step


def step_rows() -> list[list[object]]:
    from tune_lowmem.memory.synthetic import synthetic_task
    from tune_lowmem.train import Trainer

    device = torch.device("cuda")
    base = {**WRN, "model.depth": 28}
    reference_task = synthetic_task(config_of(base, {}), device)
    batch = next(iter(reference_task.train_batches(0)))
    model = reference_task.build_model().to(device)
    plain = timed(plain_step(model, reference_task.build_optimizer(model)), batch)
    rows = []
    for label, fields in STEP_CONFIGS:
        config = config_of(base, fields)
        trainer = Trainer(config, task=synthetic_task(config, device))
        seconds = timed(trainer.train_step, batch)
        ratio = seconds / plain
        target = verdict(abs(ratio - 1), TARGET_STEP) if not fields else "-"
        rows.append([label, 1000 * plain, 1000 * seconds, ratio, target])
    return rows


# ---- (c) packing -------------------------------------------------------------------------------


def packing_rows(folder: Path) -> list[list[object]]:
    from tune_lowmem import store
    from tune_lowmem.memory import MB
    from tune_lowmem.memory.share import memory_fraction, trial_share
    from tune_lowmem.search import launch
    from tune_lowmem.space import SearchSpace

    card_mb = torch.cuda.get_device_properties(0).total_memory / MB
    widths = ", ".join(map(str, PACKING_WIDTHS))
    space_file = folder / "packing.yaml"
    space_file.write_text(PACKING_SPACE.format(widths=widths, card_mb=card_mb))
    launch(space_file, store_root=folder / "store")
    space = SearchSpace.load(space_file)
    rows = []
    for _, row in store.read_trials(folder / "store", "gpu-check-packing").iterrows():
        width = int(row["config.model.hidden"])
        share = trial_share(space.resources, space.trial_config({"model.hidden": width}))
        limit = (memory_fraction(share, card_mb) or 1.0) * card_mb
        reserved = row.get("memory.cuda_max_reserved_mb", math.nan)
        within = "yes" if not math.isnan(reserved) and reserved <= limit else "NO"
        rows.append(
            [
                width,
                row["status"],
                share,
                limit,
                row["memory.predicted_total_mb"],
                reserved,
                within,
                (row["failure_reason"] or "")[:60],
            ]
        )
    return sorted(rows)


# ---- (d) WideResNet-28-2 -----------------------------------------------------------------------


def wrn_rows(epochs: int = 3) -> list[list[object]]:
    from tune_lowmem.train import Trainer

    config = config_of(
        {"model.depth": 28, "model.width": 2, "device": "cuda", "schedule.epochs": epochs}, {}
    )
    trainer = Trainer(config)
    history = trainer.run()
    images = len(trainer.task.data.train)
    return [
        [
            m["epoch"],
            m["epoch_seconds"],
            images / m["epoch_seconds"],
            m.get("val_accuracy", float("nan")),
        ]
        for m in history
    ]


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device on this machine; nothing was checked")
        return 0
    started = time.perf_counter()
    print(f"gpu_check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}\n")
    print("(a) peak memory, predicted vs measured (target: 5%)")
    print(
        table(
            [
                "config",
                "paper MB",
                "measured MB",
                "err %",
                "",
                "cuda view MB",
                "cuda peak MB",
                "err %",
                "",
            ],
            memory_rows(),
        )
    )
    print("\n(b) step time, WRN-28-2 batch 128: trial step vs plain PyTorch loop (target: 3%)")
    print(table(["techniques", "plain ms", "trial ms", "ratio", ""], step_rows()))
    print("\n(c) trials packed on one GPU by Ray with gpu: auto (width 1000 is mispredicted)")
    with tempfile.TemporaryDirectory() as folder:
        print(
            table(
                [
                    "width",
                    "status",
                    "share",
                    "limit MB",
                    "predicted MB",
                    "reserved MB",
                    "within",
                    "reason",
                ],
                packing_rows(Path(folder)),
            )
        )
    print("\n(d) WideResNet-28-2, the paper's schedule over 3 epochs")
    print(table(["epoch", "seconds", "images/s", "val accuracy"], wrn_rows()))
    print(f"\nparts (a)-(d): {time.perf_counter() - started:.0f} s; GPU-marked tests:", flush=True)
    return subprocess.call([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "tests"], cwd=REPO)


if __name__ == "__main__":
    sys.exit(main())
