"""How long memory.predict takes: cold (its dry-run cache cleared) and warm (cached), on WRN-28-2
batch 100 and on the full DC-Transformer; medians of several repeats.

    .venv/bin/python benchmarks/profiler_speed.py [--repeats 5]

The first cold call of a process also pays for the imports FakeTensorMode triggers; it is shown
on its own. The predict-vs-measure error is benchmarks/profiler_accuracy.py's job. It writes no
result file; the machine's state (`machine.Watch`) is printed with the figures.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from machine import Watch, describe

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory.predict import dry_run, predict

CONFIGS = {
    "WRN-28-2 batch 100": {
        "task": "wrn-cifar10",
        "model.depth": 28,
        "model.width": 2,
        "schedule.batch_size": 100,
        "device": "cpu",
    },
    "DC-Transformer (dct-iwslt14)": {"task": "dct-iwslt14", "device": "cpu"},
}


def seconds(config: TrialConfig) -> float:
    started = time.perf_counter()
    predict(config)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    watch = Watch.start(torch.get_num_threads(), allow_load=True)
    print(
        f"{'config':30s} {'first':>8s} {'cold':>8s} {'warm':>9s}  (seconds; cold/warm: median of {args.repeats})"
    )
    for name, flat in CONFIGS.items():
        config = TrialConfig.from_dict(flat)
        first = seconds(config)
        cold = []
        for _ in range(args.repeats):
            dry_run.cache_clear()
            cold.append(seconds(config))
        warm = [seconds(config) for _ in range(args.repeats)]
        print(
            f"{name:30s} {first:8.2f} {statistics.median(cold):8.2f} {statistics.median(warm):9.5f}"
        )
    print(describe(watch.stop()))


if __name__ == "__main__":
    main()
