"""A synthetic store of N trials written by the real store writer, to time the analysis commands.

    PYTHONPATH=. python benchmarks/synthetic_store.py /tmp/store10k --trials 10000
    /usr/bin/time -v tune-lowmem status big --store /tmp/store10k
    /usr/bin/time -v tune-lowmem pareto --store /tmp/store10k
    /usr/bin/time -v tune-lowmem report --store /tmp/store10k --out /tmp/report10k

Each trial is one `store.write_trial` call (one file per trial, as a sweep writes them): a
WRN config from the quickstart's space (precision, microbatch, checkpointing, density, learning
rate) with made-up accuracies and memory (no training, no profiler: the point is the store's
size), 90% completed, 6% failed, 4% infeasible. The sweep's space is saved where a launched
sweep keeps it (``ray/<sweep>/space.yaml``), as `tune-lowmem status` expects. The machine's state
(`machine.Watch`) is printed with the write time.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import yaml
from machine import Watch, describe

from tune_lowmem.config import TrialConfig
from tune_lowmem.store import TrialRecord, write_trial

SWEEP = "big"
SPACE = {
    "name": SWEEP,
    "base": {"task": "wrn-cifar10", "device": "cpu", "model": {"depth": 16, "width": 1}},
    "params": {
        "precision": {"type": "choice", "values": ["fp32", "bf16", "amp-bf16"]},
        "microbatch.size": {"type": "choice", "values": [None, 25, 10]},
        "checkpoint": {"type": "choice", "values": ["none", "residual-1", "residual-2*"]},
        "sparsity.density": {"type": "choice", "values": [0.1, 0.3, 0.5, 1.0]},
        "schedule.lr_multiplier": {"type": "loguniform", "low": 0.25, "high": 4.0},
    },
    "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    "sampler": "random",
    "num_samples": 10000,
}


def record(i: int, rng: np.random.Generator) -> TrialRecord:
    choice = {k: v["values"] for k, v in SPACE["params"].items() if v["type"] == "choice"}
    params = {k: values[rng.integers(len(values))] for k, values in choice.items()}
    params["schedule.lr_multiplier"] = float(np.exp(rng.uniform(np.log(0.25), np.log(4.0))))
    config = TrialConfig.from_dict(
        {"task": "wrn-cifar10", "device": "cpu", "model.depth": 16, "model.width": 1, **params}
    )
    status = rng.choice(["completed", "failed", "infeasible"], p=[0.9, 0.06, 0.04])
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=30 * i)
    memory = 40.0 * params["sparsity.density"] * rng.uniform(0.5, 1.5)
    val = float(np.clip(0.3 + 0.2 * params["sparsity.density"] + rng.normal(0, 0.03), 0, 1))
    completed = status == "completed"
    return TrialRecord(
        sweep=SWEEP,
        trial_id=f"t{i:06d}",
        status=str(status),
        config=config.to_flat(),
        metrics={"val_accuracy": val, "test_accuracy": val - 0.01} if completed else {},
        memory={
            "predicted_model_mb": memory * 0.05,
            "predicted_optimizer_mb": memory * 0.1,
            "predicted_activation_mb": memory * 0.85,
            "predicted_total_mb": memory,
        },
        failure_reason=None if completed else "synthetic",
        started_at=start,
        finished_at=start + timedelta(seconds=25),
        epochs_completed=3 if completed else 0,
        sampler="random",
        point=i,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="the store's folder (created)")
    parser.add_argument("--trials", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=8, help="writers at once (I/O bound)")
    args = parser.parse_args()
    root = Path(args.root)
    folder = root / "ray" / SWEEP
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "space.yaml").write_text(yaml.safe_dump(SPACE, sort_keys=False))
    rng = np.random.default_rng(0)
    watch = Watch.start(1, allow_load=True)  # the writers wait on I/O; the GIL holds them to a core
    records = [record(i, rng) for i in range(args.trials)]
    start = time.perf_counter()
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(lambda r: write_trial(root, r), records))
    seconds = time.perf_counter() - start
    print(f"{args.trials} trials written to {root} in {seconds:.1f} s")
    print(describe(watch.stop()))


if __name__ == "__main__":
    main()
