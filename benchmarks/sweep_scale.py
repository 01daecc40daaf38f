"""Cost per trial over a long sweep: does a trial cost the same at trial 2,000 as at trial 1?

A sweep (`tune_lowmem.search.launch`, real Ray Tune on a local Ray, real Optuna TPE, the real
Parquet store) of a tiny user task (`tests/tiny_task.py`: an MLP on Gaussian blobs, about 0.2 s of
training per trial), two trials at a time. While it runs, a thread samples every few seconds
the driver's resident memory and how many files the sweep's store folders hold. At its end:

- cost per trial: the time between trial completions (store rows' ``finished_at``), as the median
  over blocks of 20 consecutive trials, for the first and the last `--window` trials;
- the driver's peak resident memory (VmHWM) and the store's file count over time;
- a plain loop (screen, then `Trainer.run`, as the searcher and the trainable do) over
  `--loop-trials` of the sweep's own configs, one at a time, before and after the sweep: the
  sweep's overhead per trial against it.

    nice -n 10 .venv/bin/python benchmarks/sweep_scale.py --trials 2000
    .venv/bin/python benchmarks/sweep_scale.py --trials 300 --profile /tmp/driver.pstats

Prints the figures and writes them to benchmarks/results/sweep_scale.json (``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tiny task is `tests.tiny_task`, as a user's own module

from tune_lowmem import store
from tune_lowmem.search import launch
from tune_lowmem.search.screening import screen
from tune_lowmem.space import SearchSpace
from tune_lowmem.train import Trainer

BLOCK = 20  # trials per block; a window's cost is the median of its blocks' costs
SWEEP = "scale"


def space_dict(trials: int, concurrent: int) -> dict:
    return {
        "name": SWEEP,
        "base": {"task": "tests.tiny_task:TinyBlobs", "device": "cpu", "schedule": {"epochs": 2}},
        "params": {
            "precision": {"type": "choice", "values": ["fp32", "bf16"]},
            "sparsity.density": {"type": "uniform", "low": 0.2, "high": 1.0},
            "schedule.lr_multiplier": {"type": "loguniform", "low": 0.1, "high": 4.0},
            "model.hidden": {"type": "int", "low": 8, "high": 48},
        },
        "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
        "sampler": "tpe",
        "sampler_seed": 0,
        "num_samples": trials,
        "max_concurrent": concurrent,
        "resources": {"cpu": 1, "gpu": 0},
    }


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Sampler(threading.Thread):
    """Every `period` seconds: elapsed time, driver RSS, the sweep's store file counts."""

    def __init__(self, root: Path, period: float):
        super().__init__(daemon=True)
        self.root, self.period, self.samples = root, period, []
        self.started = time.monotonic()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.period):
            counts = {}
            for table in ("trials", "epochs"):
                folder = self.root / table / f"sweep={SWEEP}"
                counts[table] = len(list(folder.glob("*.parquet"))) if folder.is_dir() else 0
            self.samples.append(
                {
                    "elapsed_s": round(time.monotonic() - self.started, 1),
                    "driver_rss_mb": round(rss_mb(), 1),
                    "trials_files": counts["trials"],
                    "epochs_files": counts["epochs"],
                }
            )


def window_cost(finished: list[float], first: int, count: int) -> float:
    """Median, over blocks of BLOCK trials in [first, first + count), of seconds per trial."""
    costs = []
    for start in range(first, first + count, BLOCK):
        before = finished[start - 1] if start > 0 else finished[0] - (finished[1] - finished[0])
        end = finished[min(start + BLOCK, len(finished)) - 1]
        costs.append((end - before) / (min(start + BLOCK, len(finished)) - start))
    return statistics.median(costs)


def plain_loop(space: SearchSpace, configs: list[dict]) -> list[float]:
    """Seconds per trial of `configs` screened and trained one after another, no Ray."""
    times = []
    for params in configs:
        started = time.perf_counter()
        Trainer(screen(space, params).config).run()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--loop-trials", type=int, default=100)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--profile", type=Path, help="write the driver's cProfile here")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/sweep_scale.json")
    args = parser.parse_args()
    window = min(args.window, args.trials // 2)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.yaml"
        path.write_text(yaml.safe_dump(space_dict(args.trials, args.concurrent)))
        space = SearchSpace.load(path)
        root = Path(tmp) / "runs"
        probe = [space.sample(_random_trial(i)) for i in range(args.loop_trials)]
        loop_before = plain_loop(space, probe[: args.loop_trials // 2])
        sampler = Sampler(root, args.sample_s)
        sampler.start()
        profile = cProfile.Profile() if args.profile else None
        started = time.time()
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            if profile:
                profile.enable()
            launch(path, store_root=root)
            if profile:
                profile.disable()
        sweep_s = time.time() - started
        sampler.done.set()
        sampler.join()
        peak_mb = rss_mb("VmHWM")
        loop_after = plain_loop(space, probe[args.loop_trials // 2 :])
        rows = store.read_trials(root, SWEEP)
        files_end = {
            t: len(list((root / t / f"sweep={SWEEP}").glob("*.parquet")))
            for t in ("trials", "epochs")
        }
    trained = rows[~rows["trial_id"].str.startswith(("infeasible-", "invalid-"))]
    finished = sorted(t.timestamp() for t in trained["finished_at"])
    first = window_cost(finished, 0, window)
    last = window_cost(finished, len(finished) - window, window)
    loop = statistics.median(loop_before + loop_after)
    result = {
        "command": "benchmarks/sweep_scale.py " + " ".join(sys.argv[1:]),
        "trials": args.trials,
        "trained_trials": len(finished),
        "statuses": rows["status"].value_counts().to_dict(),
        "concurrent": args.concurrent,
        "window": window,
        "sweep_wall_s": round(sweep_s, 1),
        "first_window_s_per_trial": round(first, 4),
        "last_window_s_per_trial": round(last, 4),
        "last_over_first": round(last / first, 3),
        "windows_s_per_trial": [
            round(window_cost(finished, s, min(window, len(finished) - s)), 4)
            for s in range(0, len(finished) - BLOCK + 1, window)
        ],
        "plain_loop_s_per_trial": round(loop, 4),
        "plain_loop_before_after_s": [
            round(statistics.median(loop_before), 4),
            round(statistics.median(loop_after), 4),
        ],
        "sweep_overhead_s_per_trial": round(last - loop / args.concurrent, 4),
        "trial_wall_s_median": round(float(trained["wall_seconds"].median()), 4),
        "driver_peak_rss_mb": round(peak_mb, 1),
        "store_files_max": max(
            (s["trials_files"] + s["epochs_files"] for s in sampler.samples), default=0
        ),
        "store_files_end": files_end,
        "samples": sampler.samples,
    }
    for key, value in result.items():
        if key not in ("samples",):
            print(f"{key}: {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    if profile:
        profile.dump_stats(args.profile)
        stats = pstats.Stats(str(args.profile)).sort_stats("cumulative")
        stats.print_stats(40)


def _random_trial(number: int):
    """A random point of the space, drawn the way the sweep's startup trials are."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=number))
    return study.ask()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
