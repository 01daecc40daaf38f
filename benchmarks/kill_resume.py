"""How often a sweep survives a SIGKILL of its driver at a random moment, then `resume`.

Each run launches a real sweep (`tune-lowmem launch`, 6 points of WRN-10-1 on 200 images, 2
epochs, two trials at a time) against a local Ray, kills the driver after a random number of
stored trials (0-4) plus a random delay, resumes it, and checks what a user relies on: 6 rows,
each trial once, every trial completed with its 2 epochs, and 6 points told to Optuna. The moment
of the kill is random, so this finds the races a fixed test cannot (a kill between Tune's two
snapshot files, a point asked in the last second); the test suite keeps the deterministic cases.

    .venv/bin/python benchmarks/kill_resume.py [--runs 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ray
import yaml
from optuna.trial import TrialState

from tune_lowmem import store
from tune_lowmem.search import resume, sweep_folder, sweep_study

POINTS = 6
SPACE = {
    "name": "killed",
    "base": {
        "task": "wrn-cifar10",
        "device": "cpu",
        "model": {"depth": 10, "width": 1},
        "schedule": {"epochs": 2, "batch_size": 20},
        "data": {"train_subset": 200, "val_size": 100, "test_subset": 100},
    },
    "params": {
        "precision": {"type": "choice", "values": ["fp32", "bf16"]},
        "schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0},
    },
    "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    "sampler": "random",
    "num_samples": POINTS,
    "max_concurrent": 2,
}
CLI = str(Path(sys.executable).with_name("tune-lowmem"))


def kill_mid_sweep(space: Path, root: Path, address: str, rows: int, delay: float) -> int:
    """Launch the sweep, SIGKILL its driver once it exists, `rows` trials are stored and `delay` s
    passed."""
    with open(root.parent / "launch.log", "w") as log:
        driver = subprocess.Popen(
            [CLI, "launch", str(space), "--store", str(root), "--address", address],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 300

    def waiting(done) -> bool:
        return not done() and driver.poll() is None and time.monotonic() < deadline

    while waiting(
        lambda: (sweep_folder(root, "killed") / "space.yaml").exists()
    ):  # the sweep exists
        time.sleep(0.1)
    while waiting(lambda: len(store.trial_ids(root, "killed")) >= rows):
        time.sleep(0.1)
    time.sleep(delay)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    return len(store.trial_ids(root, "killed"))


def problems(root: Path) -> list[str]:
    """What is wrong with the resumed sweep's store and study (nothing: an empty list)."""
    rows = store.read_trials(root, "killed")
    trials = sweep_study(root, "killed").trials
    found = []
    if len(rows) != POINTS or not rows["trial_id"].is_unique:
        found.append(
            f"{len(rows)} rows ({rows['trial_id'].nunique()} distinct) for {POINTS} points"
        )
    if not (rows["status"] == "completed").all():
        found.append(f"statuses {sorted(rows['status'])}")
    epochs = [len(store.read_epochs(root, "killed", i)) for i in rows["trial_id"]]
    if any(n != 2 for n in epochs):
        found.append(f"epochs per trial {epochs}")
    told = sum(t.state == TrialState.COMPLETE for t in trials)
    if len(trials) != POINTS or told != POINTS:
        found.append(f"{len(trials)} points asked, {told} told")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    chance = random.Random(args.seed)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    failed = 0
    for run in range(args.runs):
        folder = Path(tempfile.mkdtemp(prefix="kill-resume-"))
        space = folder / "space.yaml"
        space.write_text(yaml.safe_dump(SPACE, sort_keys=False))
        root = folder / "store"
        rows, delay = chance.randint(0, 4), chance.uniform(0.0, 0.8)
        stored = kill_mid_sweep(space, root, address, rows, delay)
        with contextlib.redirect_stdout(io.StringIO()):
            resume("killed", store_root=root)
        found = problems(root)
        failed += bool(found)
        verdict = "ok" if not found else "WRONG: " + "; ".join(found)
        print(
            f"run {run}: killed after {rows} rows + {delay:.2f} s ({stored} stored) -> {verdict}  [{folder}]",
            flush=True,
        )
    print(f"{args.runs - failed} of {args.runs} resumed sweeps complete and exact")


if __name__ == "__main__":
    main()
