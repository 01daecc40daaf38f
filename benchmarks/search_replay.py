"""Epochs to a front: every sampler, with and without early stopping or exactness, replayed on
real curves.

Each sweep runs through the project's own `ScreenedSearcher` and early-stopping rules
(`tune_lowmem.search.replay`: suggest, the scheduler's decision on every epoch's recorded
result, on_trial_complete), against the table `learning_curves.py` recorded. For every method
and sampler seed it counts the epochs trained until the hypervolume of the points trained to the
end reaches 90%, 95% and 99% (`--targets`) of the whole table's; it prints the median and
quartiles over the seeds (-: not reached within the sweep's points), all methods side by side,
under the table's floors: the fewest epochs in which any sweep can reach each target, and those
of a sweep of `--workers` trials at once that trains its trials to the end, whose first
trainings are asked blind (drawn at random, and, per method, as its sweeps asked them).
With `--exactness on` (or `off,on`) a sweep's searcher trains each asked point as its training's
least-memory variant and answers a training asked before from its result
(`tune_lowmem.search.exactness`), whatever the sampler; without, each point trains as asked.

Each sweep's figures are appended to `--results` (JSON lines) as it ends, and a sweep already
there with the same settings is not run again: a slow sampler (GP) can run in a second process,
and a last run prints every method from the one file.

    PYTHONPATH=$PWD nice python benchmarks/search_replay.py [--seeds 20 --points 48 --workers 4]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import time
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
from learning_curves import DEFAULT, RECORDINGS

from tune_lowmem import pareto
from tune_lowmem.search import replay
from tune_lowmem.search.scheduler import MEMORY_BAND
from tune_lowmem.space import SearchSpace

SAMPLERS = ("random", "tpe", "nsga2", "gp", "gp-matched", "grid", "known-memory", "qlognehvi")
# baselines that are a sampler with stated options (`--samplers` names them): GP given what
# known-memory has, its 4 start-up points, and told the table's values are noise-free
VARIANTS = {"gp-matched": ("gp", {"n_startup_trials": 4, "deterministic_objective": True})}
TARGETS = (0.90, 0.95, 0.99)  # printed by default
RECORDED = (0.50, 0.75, 0.90, 0.95, 0.99)  # epochs to each are kept per sweep
RESULTS = Path(__file__).parent / "results"  # search_replay_<grid>.jsonl: every sweep, reused


def quartiles(values: list[float]) -> str:
    q1, median, q3 = (
        ("-" if np.isinf(v) else f"{v:.0f}").rjust(w)
        for v, w in zip(np.percentile(values, [25, 50, 75], method="nearest"), (3, 5, 3))
    )
    return f"{median} [{q1}-{q3}]"


def against(rows: list[dict], baseline: dict[int, dict], target: str) -> str:
    """Seeds where the method needed fewer / more epochs than the baseline without early
    stopping (the same seed), at one target."""
    pairs = [(r["epochs_to"][target], baseline[r["seed"]][target]) for r in rows]
    return f"{sum(a < b for a, b in pairs):2d}/{sum(a > b for a, b in pairs):2d}"


# a table where one point alone holds more of the best hypervolume has no real trade-off: a
# method that finds that point is done, whatever the rest of the front
TRADE_OFF = 0.75


def least_memory(table: replay.Table) -> dict[tuple, float]:
    """Each training's curve -> its least memory: points of one curve (a training's exact
    variants, or trainings that end alike) count once, at their least memory."""
    trainings: dict[tuple, float] = {}
    for curve, memory in table.curves.values():
        trainings[tuple(curve)] = min(memory, trainings.get(tuple(curve), memory))
    return trainings


def trained_finals(table: replay.Table) -> list[list[float]]:
    """Each training's final (metric, memory) once (`least_memory`)."""
    return [[curve[-1], memory] for curve, memory in least_memory(table).items()]


def fewest_added(
    chosen: list[list[float]], front: list[list[float]], needed: float, reference: list[float]
) -> int:
    """The fewest `front` points that, beside `chosen`, hold the hypervolume `needed` (only
    front points need be tried: a dominated point adds no more than the point that dominates
    it)."""
    return next(
        k
        for k in range(len(front) + 1)
        if any(
            replay.hypervolume([*chosen, *added], reference) >= needed
            for added in itertools.combinations(front, k)
        )
    )


def needed_hypervolume(table: replay.Table, target: float) -> float:
    """The hypervolume that holds `target` of the table's best (a rounding's slack below)."""
    return (target - 1e-12) * table.best_hypervolume()


def table_front(finals: list[list[float]]) -> list[list[float]]:
    on_front = pareto.non_dominated_mask(finals, ["maximize", "minimize"])
    return [point for point, kept in zip(finals, on_front, strict=True) if kept]


def fewest_epochs(table: replay.Table, targets: tuple[float, ...]) -> dict[str, int]:
    """The fewest epochs in which any sweep can reach each target: the fewest trainings whose
    final points hold that share of the best hypervolume, each trained to the end."""
    front, reference = table_front(trained_finals(table)), table.reference()
    return {
        f"{t:.2f}": table.epochs()
        * fewest_added([], front, needed_hypervolume(table, t), reference)
        for t in targets
    }


BLIND_DRAWS = 500  # start-ups drawn per table (seeded): the quartiles move by an epoch at most


def blind_start_epochs(
    table: replay.Table,
    targets: tuple[float, ...],
    workers: int,
    starts: list[list[list[float]]] | None = None,
) -> dict[str, list[int]]:
    """Quartiles (25%, median, 75%) over start-ups of the fewest epochs to each target of a
    sweep of `workers` trials at once that trains every trial to the end: its first `workers`
    trainings (`starts`: their final points, per start-up; None: `BLIND_DRAWS` drawn at random
    among the table's trainings) are asked before any result, so blind to accuracy, and from
    then on it knows every accuracy and asks only the trainings it needs. The first informed
    training starts when a blind one ends, and all blind ones end together, so a sweep that
    needs k more trains (workers + k) trainings; with none needed, the last blind one ends when
    the others have trained all but an epoch each. No sweep from these start-ups that trains
    its trials to the end needs fewer: early stopping alone can go below it."""
    finals = trained_finals(table)
    front, epochs, reference = table_front(finals), table.epochs(), table.reference()
    if starts is None:
        rng = np.random.default_rng(0)
        drawn = [rng.choice(len(finals), size=workers, replace=False) for _ in range(BLIND_DRAWS)]
        starts = [[finals[i] for i in start] for start in drawn]
    quartiles = {}
    for t in targets:
        needed, spent = needed_hypervolume(table, t), []
        for start in starts:
            added = fewest_added(start, front, needed, reference)
            spent.append(epochs * (workers + added) - (workers - 1 if added == 0 else 0))
        quartiles[f"{t:.2f}"] = [
            int(v) for v in np.percentile(spent, [25, 50, 75], method="nearest")
        ]
    return quartiles


def sampler_starts(
    table: replay.Table, base: dict, setting: dict, seeds: list[int]
) -> list[list[list[float]]]:
    """The final points of the trainings a method's sweep asks first, blind (its first
    `workers` asks), per sampler seed."""
    least = least_memory(table)
    starts = []
    for seed in seeds:
        space = sweep_space(table, base, setting, seed)
        asked = replay.first_asks(space, table, setting["workers"])
        curves = [tuple(table.curves[replay.key(point)][0]) for point in asked]
        starts.append([[curve[-1], least[curve]] for curve in curves])
    return starts


def describe(
    table: replay.Table, targets: tuple[float, ...], frame: pd.DataFrame, workers: int
) -> dict:
    """The table, what recording it cost (each training once: exact variants share a curve and
    its seconds), how many of its points reach each target on their own (a target that many
    single points reach measures how fast a method finds one of them, not a front), and the
    fewest epochs to each: of any sweep, and of one whose first `workers` trainings are blind."""
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
    fewest = fewest_epochs(table, targets)
    print(
        f"one point alone holds up to {max(alone):.1%} of it ({verdict}: at most "
        f"{TRADE_OFF:.0%}); points reaching alone {reach}; the fewest epochs any sweep needs: "
        + ", ".join(f"{float(t):.0%}: {n}" for t, n in fewest.items())
    )
    blind = blind_start_epochs(table, targets, workers)
    print(
        f"the fewest epochs of a sweep of {workers} trials at once that trains them to the end, "
        f"its first {workers} trainings blind ({BLIND_DRAWS} random start-ups: median "
        "[quartiles]): "
        + ", ".join(f"{float(t):.0%}: {m} [{q1}-{q3}]" for t, (q1, m, q3) in blind.items())
    )
    return {
        "points": len(table.curves),
        "epochs": epochs,
        "best_hypervolume": best,
        "one_point_share": max(alone),
        "trainings": len(trainings),
        "training_hours": hours,
        "fewest_epochs": fewest,
        "blind_start": {"workers": workers, "draws": BLIND_DRAWS, "epochs": blind},
    }


def settings(
    args: argparse.Namespace,
    name: str,
    scheduler: dict | None,
    band: float | None,
    exactness: bool,
) -> dict:
    """What a sweep's figures depend on, besides its seed (the cache's key; sweeps cached
    without an ``exactness`` ran without it). `name`: a sampler, or one of `VARIANTS`."""
    sampler, options = VARIANTS.get(name, (name, args.options.get(name, {})))
    return {
        "table": hashlib.sha256(Path(args.table).read_bytes()).hexdigest()[:16],
        "points": args.points,
        "workers": args.workers,
        "sampler": sampler,
        "sampler_options": options,
        **({"variant": name} if name in VARIANTS else {}),
        "scheduler": scheduler,
        "memory_band": band if scheduler else None,
        "clock": "wall",  # workers in step (`replay`); sweeps without it let new trials catch up
        # a stopped trial is told its projection; cached sweeps without it told what it reached
        **({"told": "projection"} if scheduler else {}),
        **({"exactness": True} if exactness else {}),
    }


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
        num_samples=setting["points"],
        scheduler=setting["scheduler"],
        exactness=setting.get("exactness", False),
        **extra,
    )
    return SearchSpace.from_dict(raw)


def sweep(table: replay.Table, base: dict, setting: dict, seed: int, targets) -> dict[str, float]:
    """One replayed sweep: epochs to each target (inf: not reached)."""
    best, recorded = table.best_hypervolume(), sorted({*RECORDED, *targets})
    history = replay.replay(
        sweep_space(table, base, setting, seed),
        table,
        setting["workers"],
        setting["memory_band"],
        until=max(recorded) * best,  # the rest of the sweep changes no figure kept
    )
    return {f"{t:.2f}": replay.epochs_to(history, t * best) for t in recorded}


def exactness_flags(text: str) -> list[bool]:
    """``off``, ``on`` or ``off,on``: the exactness of each variant run."""
    flags = {"off": False, "on": True}
    if not set(text.split(",")) <= set(flags):
        raise argparse.ArgumentTypeError(f"{text!r}: off, on or off,on is required")
    return [flags[flag] for flag in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=RECORDINGS, default=DEFAULT, help="which table")
    parser.add_argument("--table", help="the table's file (default: the grid's own)")
    parser.add_argument("--seeds", type=int, default=20, help="sampler seeds per method")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds run: first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument("--points", type=int, default=48, help="points per sweep (num_samples)")
    parser.add_argument("--workers", type=int, default=4, help="trials at once")
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
        help="write every row printed as entry KEY of results/search_replay.json (docs read it)",
    )
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="run no sweep: print (and summarise) the seeds already in --results",
    )
    args = parser.parse_args()
    recording = RECORDINGS[args.grid]
    args.table = args.table or str(recording.table)
    args.results = args.results or RESULTS / f"search_replay_{args.grid}.jsonl"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    frame = pd.read_parquet(args.table)
    table = replay.Table.from_frame(frame)
    described = describe(table, args.targets, frame, args.workers)
    done = {}
    if args.results.exists():
        for line in args.results.read_text().splitlines():
            row = json.loads(line)
            done[json.dumps(row["settings"], sort_keys=True), row["seed"]] = row
    args.results.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"sweeps of {args.points} points, {args.workers} trials at once, {args.seeds} sampler "
        f"seeds, sampler_options {json.dumps(args.options)}; epochs trained to reach x% of the best "
        f"hypervolume: median [quartiles]; s/sweep: of the sweeps run now"
    )
    print(
        f"{'method':58s}"
        + "".join(f"{f'{t:.0%}':>17s}" for t in args.targets)
        + f"  seeds  s/sweep  vs {args.baseline} at the last two: seeds fewer/more epochs"
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

    def not_baseline(setting: dict) -> bool:
        return method_name(setting) != args.baseline

    # the baseline's method first, which the others are paired with (and the summary's first row)
    order = sorted(every_method, key=lambda s: all(map(not_baseline, every_method[s])))
    baseline: dict[int, dict] = {}
    summary = []
    for sampler in order:
        methods = sorted(every_method[sampler], key=not_baseline)
        rows: list[list[dict]] = [[] for _ in methods]
        spent: list[list[float]] = [[] for _ in methods]
        # every method per seed: a cut-short run stays paired
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for i, setting in enumerate(methods):
                cached = done.get((json.dumps(setting, sort_keys=True), seed))
                if cached is None or any(
                    f"{t:.2f}" not in cached["epochs_to"] for t in args.targets
                ):
                    if args.cached_only:
                        continue
                    started = time.perf_counter()
                    needed = sweep(table, recording.base, setting, seed, args.targets)
                    spent[i].append(time.perf_counter() - started)
                    cached = {"settings": setting, "seed": seed, "epochs_to": needed}
                    with args.results.open("a") as out:
                        out.write(json.dumps(cached) + "\n")
                rows[i].append(cached)
        for i, setting in enumerate(methods):
            if not rows[i]:  # --cached-only: a method none of whose seeds ran yet
                continue
            name = method_name(setting)
            cells = "".join(
                f"{quartiles([r['epochs_to'][f'{t:.2f}'] for r in rows[i]]):>17s}"
                for t in args.targets
            )
            seconds = f"{np.mean(spent[i]):7.1f}" if spent[i] else "      -"
            if name == args.baseline:
                baseline = {r["seed"]: r["epochs_to"] for r in rows[i]}
            paired = ""
            if baseline and all(r["seed"] in baseline for r in rows[i]):
                paired = "".join(
                    f"  {against(rows[i], baseline, f'{t:.2f}')}" for t in args.targets[-2:]
                )
            print(f"{name:58s}{cells}  {len(rows[i]):5d}  {seconds}{paired}", flush=True)
            row = {"method": name, "settings": setting, "sweeps": rows[i]}
            if setting["scheduler"] is None:  # trained to the end: its own start-ups' floor
                starts = sampler_starts(
                    table, recording.base, setting, [r["seed"] for r in rows[i]]
                )
                row["blind_start"] = blind_start_epochs(
                    table, args.targets, setting["workers"], starts
                )
                floors = "".join(
                    f"{f'{m} [{q1}-{q3}]':>17s}" for q1, m, q3 in row["blind_start"].values()
                )
                print(f"{'  at best, from its first asks':58s}{floors}", flush=True)
            summary.append(row)
    if args.summary:
        path = RESULTS / "search_replay.json"  # the benchmark's one result file
        entries = json.loads(path.read_text()) if path.exists() else {}
        entries[args.summary] = {
            "grid": args.grid,
            "table": described,
            "targets": args.targets,
            "rows": summary,
        }
        path.write_text(json.dumps(entries, indent=1) + "\n")


if __name__ == "__main__":
    main()
