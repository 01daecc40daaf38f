"""Cost per trial over a long sweep: does a trial cost the same at trial 2,000 as at trial 1?

A sweep (`tune_lowmem.search.launch`, real Ray Tune on a local Ray, real Optuna TPE or the
project's known-memory sampler (`--sampler`), the real Parquet store) of a tiny user task
(`tests/tiny_task.py`: an MLP on Gaussian blobs, about 0.2 s of training per trial), two trials at
a time. While it runs, a thread samples every few seconds the driver's resident memory and how
many files the sweep's store folders hold. At its end:

- cost per trial: the time between trial completions (store rows' ``finished_at``), as the median
  over blocks of 20 consecutive trials, for the first and the last `--window` trials;
- the driver's peak resident memory (VmHWM) and the store's file count over time;
- a plain loop (screen, then `Trainer.run`, as the searcher and the trainable do) over
  `--loop-trials` of the sweep's own configs, one at a time, before and after the sweep: the
  sweep's overhead per trial against it.

    nice -n 10 .venv/bin/python benchmarks/sweep_scale.py --trials 2000
    nice -n 10 .venv/bin/python benchmarks/sweep_scale.py --trials 2000 --sampler known-memory \
        --key known_memory_2000
    .venv/bin/python benchmarks/sweep_scale.py --trials 300 --profile /tmp/driver.pstats

Prints the figures and writes them to benchmarks/results/sweep_scale.json (``--out``), the
benchmark's one result file, as its entry ``--key`` (default ``trials_<trials>``). A sweep
stopped before its end (the machine's time ran out) is measured from its store with
``--analyse STORE --samples FILE``, the samples taken beside it by an outside loop. A new sweep
records the machine's state with its figures (`machine.Watch`: a loaded machine's are refused
unless `--allow-load`); an analysed one says that its state was not recorded.
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
from machine import Watch, add_arguments, describe, unrecorded

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tiny task is `tests.tiny_task`, as a user's own module

from tune_lowmem import store
from tune_lowmem.search import launch
from tune_lowmem.search.screening import screen
from tune_lowmem.space import SearchSpace
from tune_lowmem.train import Trainer

BLOCK = 20  # trials per block; a window's cost is the median of its blocks' costs
SWEEP = "scale"


def space_dict(trials: int, concurrent: int, sampler: str) -> dict:
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
        "sampler": sampler,
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
                    "unix_time": round(time.time(), 1),
                    "driver_rss_mb": round(rss_mb(), 1),
                    "driver_cpu_s": round(time.process_time(), 1),
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
    parser.add_argument(
        "--sampler",
        default="tpe",
        help="the space's sampler: tpe, or known-memory (the quickstart's and joint spaces')",
    )
    parser.add_argument("--loop-trials", type=int, default=100)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--profile", type=Path, help="write the driver's cProfile here")
    parser.add_argument(
        "--analyse",
        type=Path,
        help="a store whose sweep 'scale' this script ran and was stopped before its end: "
        "figures from its rows (and from --samples), no new sweep",
    )
    parser.add_argument(
        "--samples",
        type=Path,
        help="with --analyse: lines 'unix-time trials-files epochs-files driver-rss-kB' taken "
        "beside the stopped sweep",
    )
    parser.add_argument(
        "--store", type=Path, help="keep the sweep's store here (default: a folder removed after)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/sweep_scale.json")
    parser.add_argument("--key", help="the entry of --out written (default: trials_<trials>)")
    add_arguments(parser)
    args = parser.parse_args()
    watch = None if args.analyse else Watch.start(args.concurrent, args.allow_load)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.yaml"
        path.write_text(yaml.safe_dump(space_dict(args.trials, args.concurrent, args.sampler)))
        space = SearchSpace.load(path)
        probe = [space.sample(_random_trial(i)) for i in range(args.loop_trials)]
        loop_before = plain_loop(space, probe[: args.loop_trials // 2])
        if args.analyse:
            root, measured = args.analyse, outside_samples(args.samples)
        else:
            root = args.store or Path(tmp) / "runs"
            measured = run_sweep(path, root, args)
        loop_after = plain_loop(space, probe[args.loop_trials // 2 :])
        rows = store.read_trials(root, SWEEP)
        measured["store_files_end"] = {
            t: len(list((root / t / f"sweep={SWEEP}").glob("*.parquet")))
            for t in ("trials", "epochs")
        }
    result = figures(rows, loop_before + loop_after, measured, args)
    result["machine"] = (
        unrecorded("a stopped sweep analysed from its store") if watch is None else watch.stop()
    )
    print(describe(result["machine"]))
    for key, value in result.items():
        if key not in ("samples",):
            print(f"{key}: {value}")
    entries = json.loads(args.out.read_text()) if args.out.exists() else {}
    entries[args.key or f"trials_{args.trials}"] = result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(entries, indent=1) + "\n")
    print(f"wrote {args.out}")
    if args.profile and not args.analyse:
        stats = pstats.Stats(str(args.profile)).sort_stats("cumulative")
        stats.print_stats(40)


def run_sweep(path: Path, root: Path, args: argparse.Namespace) -> dict:
    """The sweep, sampled as it runs: its wall time, the driver's peak memory, the samples."""
    sampler = Sampler(root, args.sample_s)
    sampler.start()
    profile = cProfile.Profile() if args.profile else None
    started = time.time()
    with contextlib.redirect_stdout(io.StringIO()):
        if profile:
            profile.enable()
        launch(SearchSpace.load(path), store_root=root)
        if profile:
            profile.disable()
    sweep_s = time.time() - started
    sampler.done.set()
    sampler.join()
    if profile:
        profile.dump_stats(args.profile)
    peak = rss_mb("VmHWM")
    return {"sweep_wall_s": sweep_s, "driver_peak_rss_mb": peak, "samples": sampler.samples}


def driver_cpu(samples: list[dict], finished: list[float]) -> dict:
    """The driver's CPU seconds per finished trial, over the first and the last third of the
    samples that timed it: load on the shared machine stretches wall time, not CPU time."""
    timed = [s for s in samples if "driver_cpu_s" in s and "unix_time" in s]
    if len(timed) < 6:
        return {}
    third = len(timed) // 3

    def per_trial(a: dict, b: dict) -> float:
        done = sum(1 for t in finished if a["unix_time"] < t <= b["unix_time"])
        return round((b["driver_cpu_s"] - a["driver_cpu_s"]) / max(done, 1), 4)

    return {
        "driver_cpu_s_per_trial_first_third": per_trial(timed[0], timed[third]),
        "driver_cpu_s_per_trial_last_third": per_trial(timed[-third - 1], timed[-1]),
    }


def outside_samples(path: Path | None) -> dict:
    """`--samples` lines of a sweep stopped before its end, as `Sampler` would have kept them."""
    lines = [line.split() for line in path.read_text().splitlines()] if path else []
    samples = [
        {
            "elapsed_s": float(fields[0]) - float(lines[0][0]),
            "unix_time": float(fields[0]),
            "driver_rss_mb": round(int(fields[3]) / 1024, 1),
            "trials_files": int(fields[1]),
            "epochs_files": int(fields[2]),
            **({"driver_cpu_s": int(fields[4]) / 100} if len(fields) > 4 else {}),  # clock ticks
        }
        for fields in lines
    ]
    peak = max((s["driver_rss_mb"] for s in samples), default=float("nan"))
    return {"sweep_wall_s": None, "driver_peak_rss_mb": peak, "samples": samples}


def figures(rows, loop_times: list[float], measured: dict, args: argparse.Namespace) -> dict:
    """Cost per trial by window of the trials in the order they finished, against a plain loop."""
    trained = rows[~rows["trial_id"].str.startswith(("infeasible-", "invalid-"))]
    trained = trained.sort_values("finished_at")
    finished = [t.timestamp() for t in trained["finished_at"]]
    walls = trained["wall_seconds"].tolist()
    # a trial's time on its worker besides its epochs: screening again, the measured step,
    # reports, the store write (what grew when a reused worker's collections grew)
    around = (trained["wall_seconds"] - trained["metric.train_seconds"]).tolist()
    window = min(args.window, len(finished) // 2)
    starts = range(0, len(finished) - window + 1, window)
    costs = [window_cost(finished, s, window) for s in starts]
    # a window's cost over half its trials' median wall time (two at a time): what the sweep
    # adds around its trials, whatever else the shared machine ran then
    relative = [
        c / (statistics.median(walls[s : s + window]) / args.concurrent)
        for s, c in zip(starts, costs, strict=True)
    ]
    first = costs[0]
    last = window_cost(finished, len(finished) - window, window)
    loop = statistics.median(loop_times)
    samples = measured.pop("samples")
    return {
        **driver_cpu(samples, finished),
        "command": "benchmarks/sweep_scale.py " + " ".join(sys.argv[1:]),
        "trials_planned": args.trials,
        "trained_trials": len(finished),
        "statuses": rows["status"].value_counts().to_dict(),
        "concurrent": args.concurrent,
        "sampler": args.sampler,
        "window": window,
        "first_window_s_per_trial": round(first, 4),
        "last_window_s_per_trial": round(last, 4),
        "last_over_first": round(last / first, 3),
        "windows_s_per_trial": [round(c, 4) for c in costs],
        "windows_over_half_trial_wall": [round(r, 3) for r in relative],
        "windows_trial_wall_s_median": [
            round(statistics.median(walls[s : s + window]), 3) for s in starts
        ],
        "windows_trial_wall_besides_epochs_s_median": [
            round(statistics.median(around[s : s + window]), 3) for s in starts
        ],
        "plain_loop_s_per_trial": round(loop, 4),
        "sweep_overhead_s_per_trial_last": round(last - loop / args.concurrent, 4),
        "sweep_over_loop_last": round(last / (loop / args.concurrent), 3),
        "store_files_max": max((s["trials_files"] + s["epochs_files"] for s in samples), default=0),
        **{k: (round(v, 1) if isinstance(v, float) else v) for k, v in measured.items()},
        "samples": samples,
    }


def _random_trial(number: int):
    """A random point of the space, drawn the way the sweep's startup trials are."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=number))
    return study.ask()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
