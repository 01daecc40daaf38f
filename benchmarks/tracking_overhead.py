"""The quickstart's wall time with TensorBoard event files on and off (target: within 3%;
docs/tracking.md).

Each round launches the quickstart twice on one local Ray cluster (started once, not timed), once
writing every trial's event files (`tracking: {tensorboard: true}`, the default) and once not,
each sweep in a fresh store under a temporary folder; the order alternates by round (on, off;
off, on; ...) so that a drift of the machine falls on both alike, and one sweep before the
rounds, not timed, pays what only a process's first sweep pays (the workers' start, the data
decoded once). The figures are the medians of
the rounds' wall times and of each round's on / off ratio. A loaded machine is refused before
and after unless --allow-load (`machine.Watch`), and the result file records the machine's state.

    .venv/bin/python benchmarks/tracking_overhead.py [--rounds 5]
    .venv/bin/python benchmarks/tracking_overhead.py --rounds 1 --num-samples 2 --allow-load --out /tmp/t.json   # a dry run

Results go to benchmarks/results/tracking_overhead.json (or --out).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import ray
from machine import Watch, add_arguments, describe

from tune_lowmem.search import launch
from tune_lowmem.space import SearchSpace
from tune_lowmem.space.tracking_settings import TrackingSettings

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "search_spaces" / "quickstart.yaml"
RESULTS = Path(__file__).parent / "results" / "tracking_overhead.json"
ARMS = ("on", "off")  # event files written, or not


def sweep(space: SearchSpace, folder: Path, events: bool) -> float:
    """One whole sweep's wall time, its progress lines swallowed."""
    tracked = dataclasses.replace(space, tracking=TrackingSettings(tensorboard=events))
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        outcome = launch(tracked, store_root=folder)
    seconds = time.perf_counter() - started
    written = list((folder / "ray" / space.name / "tensorboard").glob("*/events.out.tfevents.*"))
    assert bool(written) == events, "the event files were to be written only when on"
    assert len(outcome.trials) > 0
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of one sweep per arm")
    parser.add_argument("--num-samples", type=int, help="points per sweep (default: the space's)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the result file")
    add_arguments(parser)
    args = parser.parse_args()
    space = SearchSpace.load(QUICKSTART, args.num_samples)
    threads = space.resources.cpu * (space.max_concurrent or 1)
    watch = Watch.start(threads, allow_load=args.allow_load)
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sweep(space, Path(tmp) / "warm-up", events=False)
            for round_ in range(args.rounds):
                for arm in ARMS if round_ % 2 == 0 else reversed(ARMS):
                    folder = Path(tmp) / f"{arm}-{round_}"
                    times[arm].append(sweep(space, folder, events=arm == "on"))
                    print(f"round {round_}: events {arm}: {times[arm][-1]:.1f} s", flush=True)
    finally:
        ray.shutdown()
    machine = watch.stop()
    medians = {arm: statistics.median(t) for arm, t in times.items()}
    ratio = statistics.median(on / off for on, off in zip(times["on"], times["off"], strict=True))
    setup = (
        f"the quickstart ({space.num_samples} points, {space.max_concurrent} at a time): one sweep "
        f"not timed, then {args.rounds} round(s) of one sweep with event files and one without, "
        "order alternating"
    )
    print(setup)
    print(f"median wall time: on {medians['on']:.1f} s, off {medians['off']:.1f} s")
    print(f"median on / off: {ratio:.4f}")
    print(describe(machine))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "command": " ".join(["benchmarks/tracking_overhead.py", *sys.argv[1:]]),
        "setup": setup,
        "seconds": times,
        "median_seconds": medians,
        "median_ratio_on_off": ratio,
        "machine": machine,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
