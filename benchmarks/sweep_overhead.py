"""Per-trial scheduling overhead of a real Ray Tune + Optuna sweep (search.launch) against
training the same configs in a plain Python loop (screen, then Trainer.run, as the searcher and the trainable do).

A grid of tiny trials (WRN-10-1 on 200 images, 1 epoch: a few seconds each), one trial at a time
so the two run the same work; rounds alternate loop and sweep, figures are medians. Ray's start
is timed on its own (launch reuses a running Ray), so the per-trial figure is Tune's, not Ray's.
It writes no result file; the machine's state (`machine.Watch`) is printed with the figures.

    .venv/bin/python benchmarks/sweep_overhead.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import ray
import yaml
from machine import Watch, describe

from tune_lowmem.search import launch
from tune_lowmem.search.screening import screen
from tune_lowmem.space import SearchSpace
from tune_lowmem.train import Trainer

SPACE = {
    "name": "overhead",
    "base": {
        "task": "wrn-cifar10",
        "device": "cpu",
        "model": {"depth": 10, "width": 1},
        "schedule": {"epochs": 1, "batch_size": 50},
        "data": {"train_subset": 200, "val_size": 100, "test_subset": 100},
    },
    "params": {
        "precision": {"type": "choice", "values": ["fp32", "bf16"]},
        "checkpoint": {"type": "choice", "values": ["none", "residual-2*"]},
        "sparsity.density": {"type": "choice", "values": [0.5, 1.0]},
    },
    "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    "sampler": "grid",
    "resources": {"cpu": 1, "gpu": 0},
    "max_concurrent": 1,
}


def loop(space: SearchSpace, points: list[dict]) -> float:
    started = time.perf_counter()
    for params in points:
        Trainer(screen(space, params).config).run()
    return time.perf_counter() - started


def sweep(path: Path, root: Path, name: str) -> float:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        launch(SearchSpace.load(path), name=name, store_root=root)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    watch = Watch.start(SPACE["max_concurrent"], allow_load=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "overhead.yaml"
        path.write_text(yaml.safe_dump(SPACE))
        space = SearchSpace.load(path)
        points = [
            {p.name: v for p, v in zip(space.params, values)}
            for values in itertools.product(*(p.values for p in space.params))
        ]
        started = time.perf_counter()
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
        ray_start = time.perf_counter() - started
        loops, sweeps = [], []
        try:
            for round_ in range(args.rounds):
                loops.append(loop(space, points))
                sweeps.append(sweep(path, Path(tmp) / "runs", f"overhead-{round_}"))
        finally:
            ray.shutdown()
    n = len(points)
    loop_s, sweep_s = statistics.median(loops), statistics.median(sweeps)
    print(
        f"{n} trials of WRN-10-1 on 200 images, 1 epoch, one at a time; median of {args.rounds} rounds"
    )
    print(
        f"plain loop   {loop_s:7.1f} s  ({loop_s / n:.2f} s/trial)   rounds: {[round(x, 1) for x in loops]}"
    )
    print(
        f"Tune sweep   {sweep_s:7.1f} s  ({sweep_s / n:.2f} s/trial)   rounds: {[round(x, 1) for x in sweeps]}"
    )
    print(
        f"overhead per trial: {(sweep_s - loop_s) / n:.2f} s; sweep / loop: {sweep_s / loop_s:.2f}x; "
        f"Ray start (once per sweep, not included): {ray_start:.1f} s"
    )
    print(describe(watch.stop()))


if __name__ == "__main__":
    main()
