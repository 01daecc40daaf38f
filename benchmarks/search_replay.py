"""Costs to a front: every sampler, with and without early stopping or exactness, replayed on
real curves.

Each sweep runs through the project's own `ScreenedSearcher` and early-stopping rules
(`benchmarks.replay`: suggest, the scheduler's decision on every epoch's recorded
result, on_trial_complete) on `--workers` workers, against the table `learning_curves.py`
recorded, on the harness's clock (`--clock seconds`: each training takes its recorded seconds
and frees its worker when it ends, as Tune runs a sweep; `--clock epochs`: every epoch one unit
of time, every trial in step). For every method and sampler seed it records, when the
hypervolume of the points trained to the end first reaches 50% to 99% of the whole table's:
the compute spent (worker-seconds), the elapsed seconds and the epochs trained (a view of the
same sweeps); it prints medians and quartiles over the seeds (-: not reached within the sweep's
points), all methods side by side, under the table's floors (`replay_floors`: the least any
sweep can spend, and the least a sweep of `--workers` trials at once that trains its trials to
the end can spend from a blind start, drawn at random and, per method, its own first asks).
With `--exactness on` (or `off,on`) a sweep's searcher trains each asked point as its training's
least-memory variant and answers a training asked before from its result
(`tune_lowmem.search.exactness`), whatever the sampler; without, each point trains as asked.
A method that weighs cost (`known-memory-cost-start`, `known-memory-cost`, `known-memory-start`:
known-memory with both of its cost-weighing parts, the improvement per second alone, the
least-memory start-up alone) is given each table point's predicted seconds of training, the
project's own prediction made once on this machine and kept in `PREDICTED_COST`, never the
recorded seconds the clock counts.
Every sampler is asked each choice as the sweep's representation says
(`tune_lowmem.search.representation`: ordered choices as ranks, exact ones not asked under
exactness); the recordings declare which of their choices are ordered beyond numbers.

Seeds come in blocks: `--first-seed` starts the block settings are chosen on, and `--held-out`
a second block, run once they are fixed. A summary (`--summary`) keeps each block's rows apart,
and the docs' tables show both; `render_docs.py` says where the blocks agree on a method
against the baseline.

Each sweep's figures are appended to `--results` (JSON lines) as it ends, and a sweep already
there with the same settings is not run again: a slow sampler (GP) can run in a second process,
and a last run prints every method from the one file.

    PYTHONPATH=$PWD nice python benchmarks/search_replay.py [--seeds 20 --points 48 --workers 4]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import replay_floors
from learning_curves import DEFAULT, RECORDINGS

from benchmarks import replay
from tune_lowmem.search.samplers import profiler_cost
from tune_lowmem.search.stopping.asha import MEMORY_BAND
from tune_lowmem.space import SearchSpace

SAMPLERS = ("random", "tpe", "nsga2", "gp", "gp-matched", "grid", "known-memory", "qlognehvi")
# baselines that are a sampler with stated options (`--samplers` names them): GP given what
# known-memory has, its 4 start-up points, and told the table's values are noise-free; and
# known-memory with each of its cost-weighing parts (both stated, whatever the defaults):
# improvement per predicted second, and the start-up from the least-memory training
VARIANTS = {
    "gp-matched": ("gp", {"n_startup_trials": 4, "deterministic_objective": True}),
    **{
        name: ("known-memory", {"cost_aware": cost, "least_memory_start": start})
        for name, cost, start in (
            ("known-memory-cost-start", True, True),
            ("known-memory-cost", True, False),
            ("known-memory-start", False, True),
        )
    },
}
COST_PARTS = ("cost_aware", "least_memory_start")  # sampler options that read predicted seconds
TARGETS = (0.90, 0.95, 0.99)  # printed by default
RECORDED = (0.50, 0.75, 0.90, 0.95, 0.99)  # the costs to each are kept per sweep
COSTS = {"compute_to": "compute", "elapsed_to": "elapsed", "epochs_to": "epochs"}  # `Ended`'s
RESULTS = Path(__file__).parent / "results"  # search_replay_<grid>.jsonl: every sweep, reused
# each table point's predicted training seconds (the cost-weighing parts' `cost`): a line a table
PREDICTED_COST = RESULTS / "search_replay_predicted_cost.jsonl"


def quartiles(values: list[float]) -> str:
    q1, median, q3 = (
        ("-" if np.isinf(v) else f"{v:.0f}").rjust(w)
        for v, w in zip(np.percentile(values, [25, 50, 75], method="nearest"), (5, 6, 5))
    )
    return f"{median} [{q1}-{q3}]"


def against(rows: list[dict], baseline: dict[int, dict], cost: str, target: str) -> str:
    """Seeds where the method spent less / more `cost` than the baseline (the same seed), at
    one target."""
    pairs = [(r[cost][target], baseline[r["seed"]][cost][target]) for r in rows]
    return f"{sum(a < b for a, b in pairs):2d}/{sum(a > b for a, b in pairs):2d}"


# a table where one point alone holds more of the best hypervolume has no real trade-off: a
# method that finds that point is done, whatever the rest of the front
TRADE_OFF = 0.75


def clocked(table: replay.Table, clock: str) -> replay.Table:
    """The table on the clock named: its recorded seconds, or every epoch one unit."""
    if clock == "seconds":
        return table
    return replay.Table(table.curves, table.params, predicted=table.predicted)


def describe(
    table: replay.Table, targets: tuple[float, ...], frame: pd.DataFrame, workers: int
) -> dict:
    """The table, what recording it cost (each training once: exact variants share a curve and
    its seconds), how many of its points reach each target on their own (a target that many
    single points reach measures how fast a method finds one of them, not a front), and its
    floors (`replay_floors`) on the clock of `table`: the least compute and elapsed time, and
    epochs, of any sweep, and of one whose first `workers` trainings are blind."""
    trainings = frame.assign(trained=frame["curve"].map(tuple))
    trainings = trainings.drop_duplicates(["trained", "train_seconds"])
    hours = float(trainings["train_seconds"].sum() / 3600)
    best = table.best_hypervolume()
    epochs = table.epochs()
    finals = np.array(table.finals())
    alone = [replay.hypervolume([point], table.reference()) / best for point in finals]
    print(
        f"table: {len(table.curves)} points x {epochs} epochs; final accuracy "
        f"{finals[:, 0].min():.3f}..{finals[:, 0].max():.3f}, memory "
        f"{finals[:, 1].min():.1f}..{finals[:, 1].max():.1f} MB; best hypervolume {best:.3f}; "
        f"every point trained to the end: {len(table.curves) * epochs} epochs; recorded: "
        f"{len(trainings)} trainings, {hours:.2f} h"
    )
    reach = ", ".join(f"{t:.0%}: {sum(a >= t for a in alone)}" for t in targets)
    verdict = "a real trade-off" if max(alone) <= TRADE_OFF else "NO real trade-off"
    print(
        f"one point alone holds up to {max(alone):.1%} of it ({verdict}: at most "
        f"{TRADE_OFF:.0%}); points reaching alone {reach}"
    )
    seconds = replay_floors.fewest_seconds(table, targets, workers)
    blind = replay_floors.blind_start_seconds(table, targets, workers)
    print(
        f"floors, {workers} trials at once: the least compute / elapsed any sweep needs: "
        + ", ".join(
            f"{float(t):.0%}: {f['compute']:.0f} / {f['elapsed']:.0f}" for t, f in seconds.items()
        )
    )
    print(
        f"  from {replay_floors.BLIND_DRAWS} blind start-ups drawn at random (median [quartiles]): "
        + ", ".join(
            f"{float(t):.0%}: {quartiles(f['compute'])} / {quartiles(f['elapsed'])}"
            for t, f in blind.items()
        )
    )
    fewest = replay_floors.fewest_epochs(table, targets)
    blind_epochs = replay_floors.blind_start_epochs(table, targets, workers)
    print(
        "  epochs, every epoch one unit and every trial in step: any sweep "
        + ", ".join(f"{float(t):.0%}: {n}" for t, n in fewest.items())
        + "; from a blind start "
        + ", ".join(f"{float(t):.0%}: {m} [{q1}-{q3}]" for t, (q1, m, q3) in blind_epochs.items())
    )
    return {
        "points": len(table.curves),
        "epochs": epochs,
        "best_hypervolume": best,
        "one_point_share": max(alone),
        "trainings": len(trainings),
        "training_hours": hours,
        "fewest_seconds": seconds,
        "blind_start_seconds": {
            "workers": workers,
            "draws": replay_floors.BLIND_DRAWS,
            "floors": blind,
        },
        "fewest_epochs": fewest,
        "blind_start": {
            "workers": workers,
            "draws": replay_floors.BLIND_DRAWS,
            "epochs": blind_epochs,
        },
    }


def settings(
    args: argparse.Namespace,
    name: str,
    scheduler: dict | None,
    band: float | None,
    exactness: bool,
) -> dict:
    """What a sweep's figures depend on, besides its seed (the cache's key; sweeps cached
    without an ``exactness`` ran without it; with ``clock`` "wall" and no ``representation``,
    an earlier harness: every epoch one unit, every choice asked as a category). `name`: a
    sampler, or one of `VARIANTS`."""
    sampler, options = sampler_of(args, name)
    return {
        "table": hashlib.sha256(Path(args.table).read_bytes()).hexdigest()[:16],
        "points": args.points,
        "workers": args.workers,
        "sampler": sampler,
        "sampler_options": options,
        **({"variant": name} if name in VARIANTS else {}),
        "scheduler": scheduler,
        "memory_band": band if scheduler else None,
        "clock": args.clock,
        # each sampler asked as `search.representation` says, with the recording's declared orders
        "representation": {"declared": args.orders},
        # a stopped trial is told its projection; cached sweeps without it told what it reached
        **({"told": "projection"} if scheduler else {}),
        **({"exactness": True} if exactness else {}),
        # the table's predicted seconds a cost-weighing sampler was given (`predicted_costs`)
        **({"predicted_cost": args.predicted_cost} if weighs_cost(options) else {}),
        # cost_aware prices a training at the variant it trains as; cached sweeps without this
        # priced it at the variant it was weighed at
        **({"priced": "trained variant"} if options.get("cost_aware") else {}),
    }


def sampler_of(args: argparse.Namespace, name: str) -> tuple[str, dict]:
    """The sampler and options a `--samplers` name runs: one of `VARIANTS`, else the sampler
    with its `--options`."""
    return VARIANTS.get(name, (name, args.options.get(name, {})))


def weighs_cost(options: dict) -> bool:
    """Whether a sampler's options turn on a part that reads the predicted seconds."""
    return any(options.get(part) for part in COST_PARTS)


def method_name(setting: dict) -> str:
    options = ", ".join(f"{k}={v}" for k, v in setting["sampler_options"].items())
    sampler = setting.get("variant") or setting["sampler"] + (f" ({options})" if options else "")
    sampler += " + exactness" if setting.get("exactness") else ""
    scheduler = setting["scheduler"]
    if not scheduler:
        return sampler
    if scheduler["type"] in ("hypervolume", "curve"):
        first = scheduler["grace_epochs"]
        return f"{sampler} + {scheduler['type']} stopping (rungs from epoch {first})"
    if scheduler["type"] == "margin":
        rungs = f"grace {scheduler['grace_epochs']}, factor {scheduler['reduction_factor']:g}"
        return f"{sampler} + margin stopping ({rungs})"
    rule = "band" if setting["memory_band"] else "whole rung"
    return f"{sampler} + mo-asha ({rule})"


def sweep_space(table: replay.Table, base: dict, setting: dict, seed: int) -> SearchSpace:
    """The search space of one replayed sweep of a method (`settings`) and sampler seed."""
    extra = {"sampler_options": setting["sampler_options"]} if setting["sampler_options"] else {}
    raw = replay.replay_space(
        table,
        base,
        setting["sampler"],
        seed,
        orders=setting["representation"]["declared"],
        num_samples=setting["points"],
        scheduler=setting["scheduler"],
        exactness=setting.get("exactness", False),
        **extra,
    )
    return SearchSpace.from_dict(raw)


def sweep(
    table: replay.Table, base: dict, setting: dict, seed: int, targets
) -> dict[str, dict[str, float]]:
    """One replayed sweep: its compute, elapsed seconds and epochs to each target (inf: not
    reached)."""
    best, recorded = table.best_hypervolume(), sorted({*RECORDED, *targets})
    table = clocked(table, setting["clock"])
    history = replay.replay(
        sweep_space(table, base, setting, seed),
        table,
        setting["workers"],
        setting["memory_band"],
        until=max(recorded) * best,  # the rest of the sweep changes no figure kept
    )
    reached = {f"{t:.2f}": replay.reached(history, t * best) for t in recorded}
    return {
        cost: {t: math.inf if at is None else float(getattr(at, kind)) for t, at in reached.items()}
        for cost, kind in COSTS.items()
    }


def own_floors(
    table: replay.Table, base: dict, setting: dict, seeds: list[int], targets
) -> dict[str, dict]:
    """The floors from a method's own blind start-ups: its first `workers` asks, per sampler
    seed (`replay.first_asks`), in epochs and in seconds (`replay_floors`)."""
    least = replay_floors.least_memory(table)
    finals, trainings = [], []
    for seed in seeds:
        space = sweep_space(table, base, setting, seed)
        asked = replay.first_asks(space, table, setting["workers"])
        curves = [tuple(table.curves[replay.key(point)][0]) for point in asked]
        finals.append([[curve[-1], least[curve]] for curve in curves])
        trainings.append(replay_floors.first_trainings(table, asked))
    workers = setting["workers"]
    return {
        "blind_start": replay_floors.blind_start_epochs(table, targets, workers, finals),
        "blind_start_seconds": replay_floors.blind_start_seconds(
            table, targets, workers, trainings
        ),
    }


def predicted_costs(grid: str, table_file: str, table: replay.Table) -> dict[str, float]:
    """Each table point's predicted training seconds, as a sweep's sampler is given them
    (`samplers.profiler_cost`: the project's time prediction through the searcher's screening,
    on this machine), by its `replay.key`: computed once per table and kept in
    `PREDICTED_COST`, so every sweep and every later run reads the same figures."""
    digest = hashlib.sha256(Path(table_file).read_bytes()).hexdigest()[:16]
    lines = PREDICTED_COST.read_text().splitlines() if PREDICTED_COST.exists() else []
    kept = [e for e in map(json.loads, lines) if (e["grid"], e["table"]) == (grid, digest)]
    if kept:
        return kept[-1]["seconds"]
    recording = RECORDINGS[grid]
    raw = replay.replay_space(table, recording.base, "random", 0, num_samples=1)
    cost = profiler_cost(SearchSpace.from_dict(raw))
    seconds = {}
    for point in table.curves:
        predicted = cost(json.loads(point))
        if predicted is None:
            raise ValueError(f"{point}: no predicted time (not a feasible config)")
        seconds[point] = predicted
    with PREDICTED_COST.open("a") as out:
        out.write(json.dumps({"grid": grid, "table": digest, "seconds": seconds}) + "\n")
    return seconds


def exactness_flags(text: str) -> list[bool]:
    """``off``, ``on`` or ``off,on``: the exactness of each variant run."""
    flags = {"off": False, "on": True}
    if not set(text.split(",")) <= set(flags):
        raise argparse.ArgumentTypeError(f"{text!r}: off, on or off,on is required")
    return [flags[flag] for flag in text.split(",")]


def run_block(
    args: argparse.Namespace,
    table: replay.Table,
    every_method: dict[str, list[dict]],
    done: dict,
    first: int,
) -> list[dict]:
    """Every method on the sampler seeds first .. first + seeds - 1 (cached sweeps reused),
    printed; its rows, the baseline's first."""
    recording = RECORDINGS[args.grid]
    shares = [f"{t:.0%}" for t in args.targets]
    print(
        f"\nseeds {first}-{first + args.seeds - 1}: compute (worker-seconds) and elapsed seconds "
        "to each share of the best hypervolume, median [quartiles]; then epochs trained"
    )
    print(
        f"{'method':46s}"
        + "".join(f"{'compute ' + s:>20s}" for s in shares)
        + "".join(f"{'elapsed ' + s:>20s}" for s in shares)
        + f"  seeds  s/sweep  vs {args.baseline}, compute at the last two: seeds less/more"
    )

    def not_baseline(setting: dict) -> bool:
        return method_name(setting) != args.baseline

    # the baseline's method first, which the others are paired with (and the summary's first row)
    order = sorted(every_method, key=lambda s: all(map(not_baseline, every_method[s])))
    baseline: dict[int, dict] = {}
    rows = []
    for sampler in order:
        methods = sorted(every_method[sampler], key=not_baseline)
        sweeps: list[list[dict]] = [[] for _ in methods]
        spent: list[list[float]] = [[] for _ in methods]
        # every method per seed: a cut-short run stays paired
        for seed in range(first, first + args.seeds):
            for i, setting in enumerate(methods):
                cached = done.get((json.dumps(setting, sort_keys=True), seed))
                if cached is None or any(
                    f"{t:.2f}" not in cached["compute_to"] for t in args.targets
                ):
                    if args.cached_only:
                        continue
                    started = time.perf_counter()
                    costs = sweep(table, recording.base, setting, seed, args.targets)
                    spent[i].append(time.perf_counter() - started)
                    cached = {"settings": setting, "seed": seed, **costs}
                    with args.results.open("a") as out:
                        out.write(json.dumps(cached) + "\n")
                sweeps[i].append(cached)
        for i, setting in enumerate(methods):
            if not sweeps[i]:  # --cached-only: a method none of whose seeds ran yet
                continue
            name = method_name(setting)
            cells = "".join(
                f"{quartiles([r[cost][f'{t:.2f}'] for r in sweeps[i]]):>20s}"
                for cost in ("compute_to", "elapsed_to")
                for t in args.targets
            )
            seconds = f"{np.mean(spent[i]):7.1f}" if spent[i] else "      -"
            if name == args.baseline:
                baseline = {r["seed"]: r for r in sweeps[i]}
            paired = ""
            if baseline and all(r["seed"] in baseline for r in sweeps[i]):
                paired = "".join(
                    f"  {against(sweeps[i], baseline, 'compute_to', f'{t:.2f}')}"
                    for t in args.targets[-2:]
                )
            print(f"{name:46s}{cells}  {len(sweeps[i]):5d}  {seconds}{paired}", flush=True)
            epochs = "".join(
                f"{quartiles([r['epochs_to'][f'{t:.2f}'] for r in sweeps[i]]):>20s}"
                for t in args.targets
            )
            print(f"{'  epochs':46s}{epochs}", flush=True)
            row = {"method": name, "settings": setting, "sweeps": sweeps[i]}
            if setting["scheduler"] is None:  # trained to the end: its own start-ups' floors
                seeds = [r["seed"] for r in sweeps[i]]
                timed = clocked(table, setting["clock"])
                row |= own_floors(timed, recording.base, setting, seeds, args.targets)
                floors = row["blind_start_seconds"]
                print(
                    f"{'  at best, from its first asks':46s}"
                    + "".join(
                        f"{quartiles(floors[f'{t:.2f}'][kind]):>20s}"
                        for kind in ("compute", "elapsed")
                        for t in args.targets
                    ),
                    flush=True,
                )
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=RECORDINGS, default=DEFAULT, help="which table")
    parser.add_argument("--table", help="the table's file (default: the grid's own)")
    parser.add_argument("--seeds", type=int, default=20, help="sampler seeds per method and block")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the block of seeds settings are chosen on: first-seed .. first-seed + seeds - 1",
    )
    parser.add_argument(
        "--held-out",
        type=int,
        metavar="FIRST_SEED",
        help="also run the held-out block FIRST_SEED .. FIRST_SEED + seeds - 1 (disjoint from the "
        "first), once every setting is fixed",
    )
    parser.add_argument("--points", type=int, default=48, help="points per sweep (num_samples)")
    parser.add_argument("--workers", type=int, default=4, help="trials at once")
    parser.add_argument(
        "--clock",
        choices=("seconds", "epochs"),
        default="seconds",
        help="seconds: each training its recorded seconds; epochs: every epoch one unit of time",
    )
    parser.add_argument("--grace", type=int, default=1, help="scheduler.grace_epochs")
    parser.add_argument("--factor", type=float, default=3, help="scheduler.reduction_factor")
    parser.add_argument(
        "--options",
        type=json.loads,
        default={"nsga2": {"population_size": 12}},
        help="JSON: sampler -> its sampler_options (as in a search space)",
    )
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument(
        "--targets",
        type=lambda text: tuple(float(t) for t in text.split(",")),
        default=TARGETS,
        help="fractions of the best hypervolume, e.g. 0.5,0.75,0.9 for short sweeps",
    )
    parser.add_argument("--band", type=float, default=MEMORY_BAND, help="memory band")
    parser.add_argument(
        "--stopping",
        default="none,whole,band",
        help="early stopping variants run (`scheduler.type`): none, mo-asha on the whole rung, "
        "mo-asha in bands, hypervolume (stop only what cannot add hypervolume), margin (stop "
        "what a trial of no more memory leads by more than curves ever closed), curve (stop "
        "what cannot add hypervolume, its final values extrapolated from its own curve)",
    )
    parser.add_argument(
        "--exactness",
        type=exactness_flags,
        default=[False],
        help="exactness variants run (off, on, or off,on): on, every asked point trains as its "
        "training's least-memory variant and a training asked before answers it",
    )
    parser.add_argument(
        "--baseline",
        default="gp",
        help="the method others are paired with, as printed (e.g. 'gp-matched + exactness')",
    )
    parser.add_argument("--results", type=Path, help="JSON lines, reused (default: per grid)")
    parser.add_argument(
        "--summary",
        metavar="KEY",
        help="write every row printed as entry KEY of results/search_replay.json (docs read it), "
        "each block of seeds apart",
    )
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="run no sweep: print (and summarise) the seeds already in --results",
    )
    parser.add_argument(
        "--decides-default",
        action="store_true",
        help="mark the summary as one whose held-out block decides the default sampler of the "
        "quickstart and the joint spaces (tests/test_docs.py holds them to its winner)",
    )
    parser.add_argument(
        "--floors-only",
        action="store_true",
        help="run no sweep and print no method: the table and its floors (and summarise them)",
    )
    args = parser.parse_args()
    recording = RECORDINGS[args.grid]
    args.table = args.table or str(recording.table)
    args.orders = {name: recording.grid[name] for name in recording.ordered}
    args.results = args.results or RESULTS / f"search_replay_{args.grid}.jsonl"
    blocks = [(args.first_seed, False)]
    if args.held_out is not None:
        if abs(args.held_out - args.first_seed) < args.seeds:
            parser.error("--held-out: its block must not share a seed with --first-seed's")
        blocks.append((args.held_out, True))
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    frame = pd.read_parquet(args.table)
    table = replay.Table.from_frame(frame)
    args.predicted_cost = None
    if any(weighs_cost(sampler_of(args, name)[1]) for name in args.samplers.split(",")):
        table.predicted = predicted_costs(args.grid, args.table, table)
        text = json.dumps(table.predicted, sort_keys=True).encode()
        args.predicted_cost = hashlib.sha256(text).hexdigest()[:16]
    described = describe(clocked(table, args.clock), args.targets, frame, args.workers)
    done = {}
    if args.results.exists():
        for line in args.results.read_text().splitlines():
            row = json.loads(line)
            done[json.dumps(row["settings"], sort_keys=True), row["seed"]] = row
    args.results.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"sweeps of {args.points} points, {args.workers} trials at once, clock: {args.clock}, "
        f"{args.seeds} sampler seeds a block, sampler_options {json.dumps(args.options)}"
    )
    rungs = {"grace_epochs": args.grace, "reduction_factor": args.factor}
    every = {
        "none": (None, None),
        "whole": ({"type": "mo-asha", **rungs}, None),
        "band": ({"type": "mo-asha", **rungs}, args.band),
        "hypervolume": ({"type": "hypervolume", **rungs}, None),
        "margin": ({"type": "margin", **rungs}, None),
        "curve": ({"type": "curve", **rungs}, None),
    }
    variants = [(*every[name], on) for on in args.exactness for name in args.stopping.split(",")]
    every_method = {s: [settings(args, s, *v) for v in variants] for s in args.samplers.split(",")}
    ran = {
        f"{first}-{first + args.seeds - 1}": {
            "held_out": held_out,
            "rows": run_block(args, table, every_method, done, first),
        }
        for first, held_out in blocks
        if not args.floors_only
    }
    if args.summary:
        path = RESULTS / "search_replay.json"  # the benchmark's one result file
        entries = json.loads(path.read_text()) if path.exists() else {}
        entry = entries.get(args.summary, {})
        kept = entry.get("blocks", {}) if entry.get("table") == described else {}
        entries[args.summary] = {
            "grid": args.grid,
            "clock": args.clock,
            "table": described,
            "targets": args.targets,
            "baseline": args.baseline,
            "blocks": {**kept, **ran},
            **(
                {"decides_default": True}
                if args.decides_default or entry.get("decides_default")
                else {}
            ),
        }
        path.write_text(json.dumps(entries, indent=1) + "\n")


if __name__ == "__main__":
    main()
