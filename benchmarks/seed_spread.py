"""How far one trainer's accuracy moves from seed to seed on the fidelity proxy: the spread the
fidelity margin (benchmarks/fidelity.py, `MARGIN`) is read against.

The project's trainer, the fp32 baseline (no technique), trains the fidelity recipe
(WideResNet-16-2, 4 epochs on 2,000 CIFAR-10 images, batch 100, 1,000 validation images:
`fidelity.project_run`) with each of `SEEDS`, fresh seeds that no fidelity protocol used (the
pilot used 0-8, protocol 1 100-109, protocol 2 110-129), so the spread is measured apart from
the runs the margin judges. Each seed draws its own initial weights, validation split and
augmentation, as a trial's seed does. The endpoint is fidelity's: final-epoch validation
accuracy, in points. The result (every seed's accuracies, their mean and sample SD, the margin
in units of that SD, and the SD of a difference between two such trainers' seeds if they
spread alike and independently, sqrt(2) SD) goes to benchmarks/results/seed_spread.json, which
benchmarks/README.md renders beside the fidelity verdict.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/seed_spread.py --jobs 2

Its cost is 16 trainings of about 90 CPU-seconds each (one thread), under half an hour of CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fidelity

SEEDS = tuple(range(200, 216))  # fresh: see the module docstring
RESULT = Path(__file__).resolve().parent / "results" / "seed_spread.json"
COMMAND = "OMP_NUM_THREADS=1 PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/seed_spread.py"


def final_accuracy(seed: int, threads: int) -> float:
    """The fp32 baseline's final-epoch validation accuracy with `seed`, in points."""
    torch.set_num_threads(threads)
    rows, _ = fidelity.project_run(seed)
    print(f"seed {seed}: {rows}", file=sys.stderr, flush=True)
    return 100 * rows[-1][1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per training")
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        finals = list(pool.map(final_accuracy, args.seeds, [args.threads] * len(args.seeds)))
    sd = statistics.stdev(finals)
    result = {
        "command": " ".join([COMMAND, *(argv or sys.argv[1:])]),
        "torch": torch.__version__,
        "threads": args.threads,
        "recipe": fidelity.RECIPE.__dict__,
        "endpoint": "final-epoch validation accuracy, fp32 baseline, in points",
        "seeds": [{"seed": s, "val_accuracy_points": a} for s, a in zip(args.seeds, finals)],
        "mean": statistics.fmean(finals),
        "sd": sd,
        "margin_points": fidelity.MARGIN,
        "margin_in_sd": fidelity.MARGIN / sd,
        "difference_sd": math.sqrt(2) * sd,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "seeds"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
