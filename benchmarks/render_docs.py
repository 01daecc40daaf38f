"""The docs' result tables, generated from the result files the benchmarks write.

A region of a Markdown file between ``<!-- results:NAME -->`` and ``<!-- /results -->`` is
replaced by the table `RENDERERS[NAME]` makes from ``benchmarks/results/NAME.json``, or with
``<!-- results:NAME:KEY -->`` from that file's entry KEY (a benchmark keeps one result file, its
runs as entries); nothing else in the file changes. Run it after a benchmark writes its results:

    .venv/bin/python benchmarks/render_docs.py           # rewrite the regions
    .venv/bin/python benchmarks/render_docs.py --check   # exit 1 if a region is out of date

It imports nothing of tune_lowmem: the figures are the result files', as the scripts wrote them.
A timing's table says on what machine, at what load, it was measured (`machine.describe`).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe, unrecorded

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [
    ROOT / "README.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
REGION = re.compile(
    r"(<!-- results:([\w-]+)(?::([\w-]+))? -->\n)(.*?)(<!-- /results -->)", re.DOTALL
)


def percent(value: float) -> str:
    return f"{100 * value:.2f}%"


def row(cells) -> str:
    return "| " + " | ".join(map(str, cells)) + " |"


def table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table's lines."""
    return [row(header), row(["---"] * len(header)), *map(row, rows)]


def profiler_accuracy(result: dict) -> str:
    """The error distribution, the misses, then every evaluation point."""
    summary, calibration = result["summary"], result["calibration"]
    lines = [
        (
            f"Command: `{result['command']}` (torch {result['torch']}, "
            f"{result['threads']} thread); {len(result['protocol']['calibration'])} calibration "
            f"points, {len(result['points'])} of {len(result['protocol']['evaluation'])} "
            "evaluation points measured; `HEAP_BYTES_PER_STORAGE` = "
            f"{calibration['heap_bytes_per_storage']}."
        ),
        *(f"Measured again: `{rerun['command']}`." for rerun in result.get("reruns", [])),
        "",
    ]
    views = {
        "run_peak": "run's peak with operators' workspace (allocator, everything live)",
        "run_tensor_peak": "run's peak, tensors alone (allocator, kernels' temporaries left out)",
        "total": "a step's total, tensor storage (allocator)",
        "activation": "a step's activation part (allocator)",
        "heap_total": "a step's stored total with heap objects (tracker, CPU heap)",
    }
    errors = [
        [label, d["points"], *(percent(d[k]) for k in ("median", "p90", "worst"))]
        for key, label in views.items()
        if (d := summary.get(key))
    ]
    header = ["error, predicted against measured", "points", "median", "90th percentile", "worst"]
    lines += table(header, errors)
    misses = ", ".join(summary["misses"]) or "none"
    lines += [
        "",
        (
            f"Points of at least {summary['floor_mb']:g} MB measured; goal: worst "
            f"{percent(summary['goal'])} on the run's peak with workspace. Missing it: {misses}. "
            f"Below {summary['floor_mb']:g} MB (not counted): "
            f"{', '.join(summary['below_floor']) or 'none'}."
        ),
        "",
    ]
    points = [
        [
            p["name"],
            f"{p['predicted_run_peak_mb']:.3f}",
            f"{p['allocator_run_peak_mb']:.3f}",
            percent(p["error_run_peak"]),
            percent(p["error_run_tensor_peak"]),
            f"{p['predicted_storage_mb']:.3f}",
            f"{p['allocator_total_mb']:.3f}",
            percent(p["error_total"]),
            f"{p['allocator_workspace_activation_mb'] - p['allocator_activation_mb']:.3f}",
            "after warm-up" if p["measured_update"] is None else f"update {p['measured_update']}",
        ]
        for p in result["points"]
    ]
    header = ["point", "run peak MB", "measured run peak MB", "error", "tensors alone error"]
    header += ["step total MB", "measured step MB", "error", "step workspace MB", "measured step"]
    return "\n".join(lines + table(header, points)) + "\n"


LADDER_MEASURED = ["measured run peak MB", "x measured", "error"]
LADDER_TIMED = ["s/update", "x time"]


def ladder_row(rung: dict, measured: bool, timed: bool = False) -> list:
    """A rung's cells; with `measured`, its measured run peak, its ratio to the measured
    baseline's and the prediction's error ("-" for a rung not measured); with `timed`, beside
    its memory ratio its measured seconds per update and their ratio to the baseline's."""
    cells = [
        rung["index"],
        rung["rung"],
        f"{rung['run_peak_mb']:.2f}",
        f"{rung['x_run_peak']:.1f}x",
    ]
    if timed:
        if "measured_update_s" in rung:
            slowdown = rung["measured_slowdown"]
            cells += [f"{rung['measured_update_s']:.3f}", f"{slowdown:.2f}x" if slowdown else "-"]
        else:  # not timed, or a timing that ran past its time limit (which says so)
            cells += [rung.get("timed", "-"), "-"]
    cells += [
        f"{rung['activation_mb']:.2f}",
        f"{rung['stored_mb']:.2f}",
        f"{rung['x_stored']:.1f}x",
    ]
    cells += [f"{rung['accounted_csr_mb']:.2f}", f"{rung['x_accounted_csr']:.1f}x"]
    if measured:
        if "measured_run_peak_mb" in rung:
            ratio = rung["x_measured_run_peak"]
            cells += [f"{rung['measured_run_peak_mb']:.2f}", f"{ratio:.1f}x" if ratio else "-"]
            cells += [percent(rung["error_run_peak"])]
        else:  # not measured, or a measurement that ran past its time limit (which says so)
            cells += [rung.get("measured", "-"), "-", "-"]
    return [*cells, rung["paper"] or ""]


def memory_ladder(result: dict) -> str:
    """Each task's rungs in a run: the run's peak predicted (and where measured, measured), a
    step's activation and stored totals, the paper's accounting."""
    lines = []
    for task in result.values():
        rows, base = task["rows"], task["rows"][0]
        measured, timing = any("measure_seconds" in r for r in rows), task.get("time")
        header = ["#", "rung", "run peak MB", "x run", *(LADDER_TIMED if timing else [])]
        header += ["act MB", "stored MB", "x stored", "acc csr MB", "x csr"]
        header += LADDER_MEASURED if measured else []
        lines += [
            f"{task['title']}; ratios to rung {base['index']} ({base['rung']}: run peak "
            f"{base['run_peak_mb']:.2f} MB predicted"
            + (
                f", {base['measured_run_peak_mb']:.2f} MB measured)"
                if "measured_run_peak_mb" in base
                else "); no rung measured in this run"
            ),
            "",
            *table([*header, "paper"], [ladder_row(r, measured, bool(timing)) for r in rows]),
            "",
        ]
        if timing:
            lines += [
                f"Time per update: `Trainer.train_step` at the ladder's batch, median of "
                f"{timing['updates']} updates after {timing['warm_up']} warm-up steps, each rung "
                f'in a process of its own; "x time" is the ratio to rung {base["index"]}\'s. '
                + describe(timing["machine"]),
                "",
            ]
    return "\n".join(lines[:-1]) + "\n"


def step_time(result: dict) -> str:
    """Seconds per step by variant, packed against masked dense, and one layer's kernels."""
    seconds, ratios = result["seconds_per_step"], result["ratio_to_no_technique"]
    kernels = result["layer_kernel_seconds"]
    lines = [
        result["setup"],
        "",
        describe(result["machine"]),
        "",
        *table(
            ["variant", "s/step", "ratio to no technique"],
            [[v, f"{s:.3f}", f"{ratios[v]:.3f}"] for v, s in seconds.items()],
        ),
        "",
        *table(
            ["nonzeros", "packed / masked dense step (median of rounds)"],
            [[d, f"{r:.3f}"] for d, r in result["packed_over_masked_dense"].items()],
        ),
        "",
        "One linear layer (`sparse_kernel`'s shape in `benchmarks/step_time.py`):",
        "",
        *table(
            ["nonzeros", "dense, weight built (ms)", "torch.sparse.mm CSR (ms)", "csr / dense"],
            [
                [
                    d,
                    f"{1e3 * k['dense']:.2f}",
                    f"{1e3 * k['csr']:.2f}",
                    f"{k['csr'] / k['dense']:.2f}",
                ]
                for d, k in kernels.items()
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def sweep_scale(result: dict) -> str:
    """Cost per trial in windows of the sweep, then the driver's and the store's figures."""
    size = result["window"]
    windows = [
        f"{i * size + 1:,}-{(i + 1) * size:,}" for i in range(len(result["windows_s_per_trial"]))
    ]
    rows = {
        "seconds per trial (sweep wall time / trials)": result["windows_s_per_trial"],
        "median wall time of one trial (on its worker)": result["windows_trial_wall_s_median"],
        "seconds per trial / (trial wall time / concurrency)": result[
            "windows_over_half_trial_wall"
        ],
    }
    if "windows_trial_wall_besides_epochs_s_median" in result:  # recorded since it was added
        rows["median time of one trial besides its epochs"] = result[
            "windows_trial_wall_besides_epochs_s_median"
        ]
    statuses = ", ".join(f"{n} {s}" for s, n in result["statuses"].items())
    files = ", ".join(f"{n} in `{table_}/`" for table_, n in result["store_files_end"].items())
    wall = result["sweep_wall_s"]
    lines = [
        f"Command: `{result['command']}`; {result['trained_trials']:,} of "
        f"{result['trials_planned']:,} trials trained ({statuses}), "
        f"{result['concurrent']} at a time" + (f", in {wall:g} s." if wall is not None else "."),
        "",
        *table(
            [f"{size}-trial window (in finishing order)", *windows],
            [[label, *(f"{v:.2f}" for v in values)] for label, values in rows.items()],
        ),
        "",
        (
            f"- per trial, the last {size} trials against the first {size}: "
            f"{result['last_window_s_per_trial']:.2f} s against "
            f"{result['first_window_s_per_trial']:.2f} s, {result['last_over_first']:.2f}x;"
        ),
        (
            f"- the driver's CPU time per finished trial: "
            f"{result['driver_cpu_s_per_trial_first_third']:.3f} s over the first third of the "
            f"samples, {result['driver_cpu_s_per_trial_last_third']:.3f} s over the last third;"
            if "driver_cpu_s_per_trial_first_third" in result
            else "- the driver's CPU time per finished trial: too few samples in a sweep this short;"
        ),
        (
            f"- a plain loop of the same kind of trials (screen, then train, no Ray, one at a time): "
            f"{result['plain_loop_s_per_trial']:.2f} s per trial; the sweep's last window is "
            f"{result['sweep_over_loop_last']:.1f}x that per trial;"
        ),
        f"- the driver's resident memory: {result['driver_peak_rss_mb']:,.0f} MB at most;",
        (
            f"- the store: at most {result['store_files_max']} files in `trials/` and `epochs/` "
            f"together at any sample; at the end {files}."
        ),
        "",
        describe(result["machine"]),
    ]
    return "\n".join(lines) + "\n"


def cluster_sweep(result: dict) -> str:
    """What the lost node and the killed driver left in the store."""
    by_node = ", ".join(f"{node} {n}" for node, n in result["rows_by_node"].items())
    told = ", ".join(f"{n} {state}" for state, n in result["optuna_told"].items())
    statuses = ", ".join(f"{n} {s}" for s, n in result["statuses"].items())
    files = ", ".join(f"{n} in `{folder}/`" for folder, n in result["store_files"].items())
    lines = [
        f"Command: `{result['command']}`",
        "",
        (
            f"- `node_c` lost with {result['stored_when_node_c_lost']} points stored, the driver "
            f"SIGKILLed with {result['stored_when_driver_killed']} stored "
            f"({result['first_driver_s']:g} s after the launch); `tune-lowmem resume` exited "
            f"{result['resume_exit_status']} and finished the sweep in {result['resume_s']:g} s;"
        ),
        (
            f"- {result['rows']} rows for {result['points']} points ({statuses}); (point, seed) "
            f"stored twice: {result['duplicated_point_seed']}; epoch rows stored twice: "
            f"{result['duplicated_epoch_rows']}; every (point, seed) once: "
            f"{'yes' if result['every_point_seed_once'] else 'no'};"
        ),
        f"- Optuna was told: {told};",
        f"- rows by node: {by_node};",
        f"- the store's files at the end: {files}.",
        "",
        describe(result.get("machine", unrecorded("its wall times' load was not recorded"))),
    ]
    return "\n".join(lines) + "\n"


def nearest_percentile(values: list[float], q: float) -> float:
    """numpy's percentile with method "nearest" (half to even), as search_replay.py prints."""
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def epochs(value: float) -> str:
    return "-" if math.isinf(value) else f"{value:.0f}"


def search_replay(result: dict) -> str:
    """A replay summary: kept per block of seeds on the harness's clock (`replay_blocks`), or
    one block of epochs on an earlier harness (`replay_epochs`)."""
    return replay_blocks(result) if "blocks" in result else replay_epochs(result)


def replay_epochs(result: dict) -> str:
    """Epochs to each share of the best hypervolume, median [quartiles] over sampler seeds; each
    median over the baseline's (the first row); and the seeds where a method needed fewer / more
    epochs than the baseline on the same seed, with its epochs over all seeds less the
    baseline's (where every sweep reached the target)."""
    targets = [f"{t:.2f}" for t in result["targets"]]
    baseline = result["rows"][0]
    paired = {s["seed"]: s["epochs_to"] for s in baseline["sweeps"]}

    def median(sweeps: list[dict], target: str) -> float:
        return nearest_percentile([s["epochs_to"][target] for s in sweeps], 0.5)

    # the fewest epochs from each method's own blind start-ups (summaries that kept them)
    blind_column = any("blind_start" in method for method in result["rows"])
    lines = []
    for method in result["rows"]:
        sweeps = method["sweeps"]
        cells = [method["method"], len(sweeps)]
        for t in targets:
            values = [s["epochs_to"][t] for s in sweeps]
            q1, middle, q3 = (epochs(nearest_percentile(values, q)) for q in (0.25, 0.5, 0.75))
            cells.append(f"{middle} [{q1}-{q3}]")
        if blind_column:
            floors = method.get("blind_start")
            cells.append(" / ".join(str(floors[t][1]) for t in targets) if floors else "-")
        for t in targets:
            ours, theirs = median(sweeps, t), median(baseline["sweeps"], t)
            finite = math.isfinite(ours) and math.isfinite(theirs)
            cells.append(f"{ours / theirs:.2f}x" if finite and method is not baseline else "-")
        for t in targets:
            pairs = [(s["epochs_to"][t], paired[s["seed"]][t]) for s in sweeps]
            ahead, behind = sum(a < b for a, b in pairs), sum(a > b for a, b in pairs)
            reached = all(math.isfinite(a) and math.isfinite(b) for a, b in pairs)
            net = f"{sum(a - b for a, b in pairs):+.0f}" if reached else "-"
            cells.append("-" if method is baseline else f"{ahead} / {behind} ({net})")
        lines.append(cells)
    share = [f"{float(t):.0%}" for t in targets]
    header = ["method", "seeds", *(f"epochs to {s}" for s in share)]
    if blind_column:
        workers = result["rows"][0]["settings"]["workers"]
        header.append(
            f"at best from its {first_asks(workers, 'ask')}: median epochs to {' / '.join(share)}"
        )
    header += [f"median over {baseline['method']}'s at {s}" for s in share]
    header += [f"fewer / more (net epochs) than {baseline['method']} at {s}" for s in share]
    about = result.get("table")
    if about is None:
        return "\n".join(table(header, lines)) + "\n"
    intro = (
        f"{table_line(about)}{fewest(about)}{blind_start(about)} Replayed with every epoch one "
        "unit of time, every trial in step, and every choice asked of the samplers as a category."
    )
    return "\n".join([intro, "", *table(header, lines)]) + "\n"


def table_line(about: dict) -> str:
    return (
        f"The table: {about['points']} points of {about['epochs']} epochs{recorded(about)}; one "
        f"point alone holds at most {about['one_point_share']:.0%} of the best hypervolume."
    )


def seconds(value: float) -> str:
    return "-" if math.isinf(value) else f"{value:,.0f}"


def spread(values: list[float], show=seconds) -> str:
    """Median [quartiles], as search_replay.py prints them."""
    q1, middle, q3 = (show(nearest_percentile(values, q)) for q in (0.25, 0.5, 0.75))
    return f"{middle} [{q1}-{q3}]"


def replay_blocks(result: dict) -> str:
    """Per block of sampler seeds: compute (worker-seconds) and elapsed seconds to each share of
    the best hypervolume, median [quartiles], with the floor from each method's own first asks;
    each method against the baseline in both blocks, and whether the blocks agree; the method
    of least median compute to 95% on the held-out block; then the epochs, a view of the same
    sweeps."""
    about, targets = result["table"], [f"{t:.2f}" for t in result["targets"]]
    shares = [f"{float(t):.0%}" for t in targets]
    blocks = sorted(result["blocks"].items(), key=lambda item: item[1]["held_out"])
    unit = "s" if result["clock"] == "seconds" else "epochs"
    lines = [f"{table_line(about)} {seconds_floors(about, unit)}", ""]
    if not blocks:  # the floors alone, before any sweep ran
        return lines[0] + "\n"
    for label, block in blocks:
        lines += [f"{block_name(label, block).capitalize()}:", ""]
        header = ["method", "seeds", *(f"compute to {s}, {unit}" for s in shares)]
        header += [
            *(f"elapsed to {s}, {unit}" for s in shares),
            f"at best from its first asks: compute / elapsed to 95%, {unit}",
        ]
        rows = []
        for row in block["rows"]:
            sweeps = row["sweeps"]
            cells = [row["method"], len(sweeps)]
            cells += [spread([s[cost][t] for s in sweeps]) for cost in COSTS for t in targets]
            own = row.get("blind_start_seconds", {}).get("0.95")
            floor = f"{seconds(own['compute'][1])} / {seconds(own['elapsed'][1])}" if own else "-"
            rows.append([*cells, floor])
        lines += [*table(header, rows), ""]
    lines += agreement(result, targets, shares, blocks)
    for label, block in blocks:
        lines += [f"Epochs trained, a view of the same sweeps; {block_name(label, block)}:", ""]
        rows = [
            [
                r["method"],
                *(spread([s["epochs_to"][t] for s in r["sweeps"]], epochs) for t in targets),
            ]
            for r in block["rows"]
        ]
        lines += [*table(["method", *(f"epochs to {s}" for s in shares)], rows), ""]
    return "\n".join(lines[:-1]) + "\n"


COSTS = ("compute_to", "elapsed_to")  # the costs a block's table shows, in its order


def block_name(label: str, block: dict) -> str:
    kind = (
        "held out, run once every setting was fixed"
        if block["held_out"]
        else "settings chosen on these"
    )
    return f"seeds {label} ({kind})"


CLOCKS = {  # what a summary's clock (`search_replay.py --clock`) counts time in
    "s": "Seconds are the recorded trainings' own; compute is worker-seconds spent until the "
    "target is reached.",
    "epochs": "Time is in epochs: every epoch one unit, every trial in step; compute is "
    "worker-epochs spent until the target is reached.",
}


def seconds_floors(about: dict, unit: str) -> str:
    """The table's clock and its floors on it (`replay_floors`), in words."""
    oracle, blind = about["fewest_seconds"], about["blind_start_seconds"]
    shares = " / ".join(f"{float(t):.0%}" for t in oracle)
    workers = blind["workers"]
    at_once = "one trial at a time" if workers == 1 else f"{workers} trials at once"
    return (
        f"{CLOCKS[unit]} Floors, for these samplers under this harness (sweeps that train every "
        f"trial to the end, {at_once}): the least compute any sweep needs to {shares} is "
        + " / ".join(seconds(f["compute"]) for f in oracle.values())
        + f" {unit}, the least elapsed "
        + " / ".join(seconds(f["elapsed"]) for f in oracle.values())
        + f" {unit}; when its {first_asks(workers, 'training')} {'is' if workers == 1 else 'are'} "
        f"asked blind (median [quartiles] over {blind['draws']} such start-ups drawn at random), "
        "compute "
        + " / ".join(spread(f["compute"], seconds) for f in blind["floors"].values())
        + f" {unit}, elapsed "
        + " / ".join(spread(f["elapsed"], seconds) for f in blind["floors"].values())
        + f" {unit}."
    )


def verdict(ratios: list[float]) -> str:
    """Each block's median over the baseline's, and whether the blocks agree on which is less."""
    shown = " / ".join("-" if math.isnan(r) else f"{r:.2f}x" for r in ratios)
    if len(ratios) < 2:
        return f"{shown} (one block)"
    sides = {"less" if r < 1 else "more" if r > 1 else "even" for r in ratios}
    if len(sides) == 1 and not any(math.isnan(r) for r in ratios):
        return f"{shown}: both blocks agree, {sides.pop()}"
    return f"{shown}: blocks disagree"


def median_ratio(sweeps: list[dict], base: list[dict], cost: str, target: str) -> float:
    ours = nearest_percentile([s[cost][target] for s in sweeps], 0.5)
    theirs = nearest_percentile([s[cost][target] for s in base], 0.5)
    return ours / theirs if math.isfinite(ours) and math.isfinite(theirs) else math.nan


def agreement(result: dict, targets: list[str], shares: list[str], blocks: list) -> list[str]:
    """Each method's median over the baseline's in each block (the first row of each), at every
    target, and whether both blocks agree; then the held-out block's least compute to 95%."""
    baseline = blocks[0][1]["rows"][0]["method"]
    by_block = [{r["method"]: r["sweeps"] for r in block["rows"]} for _, block in blocks]
    header = ["method", *(f"compute to {s}" for s in shares), *(f"elapsed to {s}" for s in shares)]
    rows = [
        [
            method,
            *(
                verdict([median_ratio(b[method], b[baseline], cost, t) for b in by_block])
                for cost in COSTS
                for t in targets
            ),
        ]
        for method in by_block[0]
        if method != baseline and all(method in b for b in by_block)
    ]
    lines = [
        f"Each method's median over {baseline}'s, seeds {' / '.join(label for label, _ in blocks)}:",
        "",
        *table(header, rows),
        "",
    ]
    winners = held_out_winners(result)
    if winners:
        names = " and ".join(row["method"] for row in winners)
        lines += [f"On the held-out block the least median compute to 95%: {names}.", ""]
    return lines


def held_out_winners(result: dict, target: str = "0.95") -> list[dict]:
    """The rows of the held-out block of least median compute to `target` (ties all), or none
    where no block is held out."""
    held = [block for block in result["blocks"].values() if block["held_out"]]
    if not held:
        return []
    medians = [
        (nearest_percentile([s["compute_to"][target] for s in row["sweeps"]], 0.5), row)
        for row in held[0]["rows"]
    ]
    least = min(median for median, _ in medians)
    return [row for median, row in medians if median == least]


def fewest(about: dict) -> str:
    """The fewest epochs any sweep needs to each target, where the summary kept them (summaries
    written before they were kept have none)."""
    if "fewest_epochs" not in about:
        return ""
    reach = ", ".join(f"{n} to {float(t):.0%}" for t, n in about["fewest_epochs"].items())
    return f" The fewest epochs any sweep needs (training only the front points it must): {reach}."


def blind_start(about: dict) -> str:
    """The fewest epochs of a sweep whose first trainings are asked before any result, where
    the summary kept them (`search_replay.blind_start_epochs`)."""
    if "blind_start" not in about:
        return ""
    blind = about["blind_start"]
    reach = ", ".join(
        f"{median} [{q1}-{q3}] to {float(t):.0%}" for t, (q1, median, q3) in blind["epochs"].items()
    )
    workers = blind["workers"]
    at_once = "one trial at a time" if workers == 1 else f"{workers} trials at once"
    return (
        f" A sweep of {at_once} that trains every trial to the end asks its "
        f"{first_asks(workers, 'training')} before any result: even knowing every accuracy from "
        f"then on, it needs {reach} (median [quartiles] over {blind['draws']} such start-ups "
        "drawn at random)."
    )


def first_asks(workers: int, what: str) -> str:
    """What a sweep of `workers` trials at once asks before any result, in words: its "first
    training", or its "first 4 trainings"."""
    return f"first {what}" if workers == 1 else f"first {workers} {what}s"


def recorded(about: dict) -> str:
    """What recording the table cost, where the summary kept it (summaries written before the
    cost was kept have none)."""
    if "trainings" not in about:
        return ""
    return f" ({about['trainings']} trainings, recorded in {about['training_hours']:.2f} h)"


def ask_time(result: dict) -> str:
    """Median seconds of the first ask and of the later ones, wall clock and CPU; then, where
    recorded, the median ask after each number of points told."""
    header = ["space", "asks", "first ask (wall / CPU s)", "later asks, median (wall / CPU s)"]
    cells = [
        f"{result[f'{which}_ask_wall_s']:.1f} / {result[f'{which}_ask_cpu_s']:.1f}"
        for which in ("first", "later")
    ]
    rows = table(header, [[result["space"], result["points"], *cells]])
    scale = result.get("at_scale")
    if scale:
        header = [
            "points told",
            "asks",
            "median ask (wall / CPU s)",
            "its memory predictions (CPU s)",
        ]
        rows += [""] + table(
            header,
            [
                [
                    f"{at['told']:,}",
                    result["scale_asks"],
                    f"{at['median_ask_wall_s']:.2f} / {at['median_ask_cpu_s']:.2f}",
                    f"{at['median_predicting_cpu_s']:.2f}",
                ]
                for at in scale
            ],
        )
    return "\n".join([*rows, "", describe(result["machine"])]) + "\n"


def fidelity(result: dict) -> str:
    """The protocol, each seed's final validation accuracies, then the equivalence test."""
    protocol, recipe = result["protocol"], result["protocol"]["recipe"]
    margin, (low, high) = protocol["margin_points"], result["interval"]
    lines = [
        (
            f"Command: `{result['command']}` (torch {result['torch']}). "
            f"Protocol, fixed before the run: seeds {', '.join(map(str, protocol['seeds']))}; "
            f"{recipe['epochs']} epochs on {recipe['train']} images, "
            f"batch {recipe['batch']}, {recipe['val']} validation images; endpoint: "
            f"{protocol['endpoint']}, in accuracy points; {protocol['test']}, margin "
            f"{margin:g} points, alpha {protocol['alpha']:g} each."
        ),
        "",
        *table(
            ["seed", "project: final val accuracy (points)", "independent", "difference"],
            [
                [
                    s["seed"],
                    f"{100 * s['project'][-1][1]:.1f}",
                    f"{100 * s['independent'][-1][1]:.1f}",
                    f"{s['diff_points']:+.1f}",
                ]
                for s in result["seeds"]
            ],
        ),
        "",
        *table(
            ["seeds", "mean difference", "SD", "90% t-interval", "p (H0: <= -margin)"]
            + ["p (H0: >= +margin)", "equivalent"],
            [
                [
                    result["n"],
                    f"{result['mean']:+.2f}",
                    f"{result['sd']:.2f}",
                    f"[{low:+.2f}, {high:+.2f}]",
                    f"{result['p_lower']:.4f}",
                    f"{result['p_upper']:.4f}",
                    "yes" if result["equivalent"] else "no",
                ]
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def seed_spread(result: dict) -> str:
    """The baseline's final accuracy by seed, then its spread against the fidelity margin."""
    recipe, seeds = result["recipe"], result["seeds"]
    lines = [
        (
            f"Command: `{result['command']}` (torch {result['torch']}, {result['threads']} thread "
            f"a training). The fp32 baseline, {recipe['epochs']} epochs on {recipe['train']} "
            f"images, batch {recipe['batch']}, {recipe['val']} validation images; endpoint: "
            f"{result['endpoint']}."
        ),
        "",
        *table(
            ["seed", *(str(s["seed"]) for s in seeds)],
            [["final val accuracy (points)", *(f"{s['val_accuracy_points']:.1f}" for s in seeds)]],
        ),
        "",
        *table(
            ["seeds", "mean", "SD", "margin", "margin / SD", "SD of a difference (sqrt 2 SD)"],
            [
                [
                    len(seeds),
                    f"{result['mean']:.2f}",
                    f"{result['sd']:.2f}",
                    f"{result['margin_points']:g}",
                    f"{result['margin_in_sd']:.2f}",
                    f"{result['difference_sd']:.2f}",
                ]
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def tracking_overhead(result: dict) -> str:
    """The quickstart's wall time with event files and without, by round and in median."""
    seconds, medians = result["seconds"], result["median_seconds"]
    rounds = [
        [i + 1, f"{on:.1f}", f"{off:.1f}", f"{on / off:.4f}"]
        for i, (on, off) in enumerate(zip(seconds["on"], seconds["off"], strict=True))
    ]
    median = ["median", f"{medians['on']:.1f}", f"{medians['off']:.1f}"]
    lines = [
        f"Command: `{result['command']}`: {result['setup']}.",
        "",
        describe(result["machine"]),
        "",
        *table(
            ["round", "event files on (s)", "off (s)", "on / off"],
            [*rounds, [*median, f"{result['median_ratio_on_off']:.4f}"]],
        ),
    ]
    return "\n".join(lines) + "\n"


def quickstart_front(result: dict) -> str:
    """Each front point's promised run peak against its whole run measured."""
    lines = [
        (
            f"Command: `{result['command']}` (torch {result['torch']}, {result['threads']} "
            f"thread, as the sweep's trials), on the front of `{result['sweep']}`."
        ),
        "",
    ]
    header = ["trial", "val accuracy", "searched run peak MB", "of it tensors and workspace MB"]
    header += ["measured whole run MB", "measured against predicted", "peak during", "run"]
    rows = [
        [
            p["trial_id"],
            f"{p['val_accuracy']:.3f}",
            f"{p['searched_run_peak_mb']:.3f}",
            f"{p['predicted_run_storage_mb']:.3f}",
            f"{p['measured_run_peak_mb']:.3f}",
            f"{100 * p['error']:+.2f}%",
            p["peak_during"],
            (
                f"{p['epochs']} epochs, {p['updates']} updates, {p['checkpoints']} checkpoints, "
                f"{p['allocator_reports']} allocator reports"
            ),
        ]
        for p in result["points"]
    ]
    lines += table(header, rows)
    if "baseline" in result:
        lines += ["", *priced_front(result)]
    return "\n".join(lines) + "\n"


def priced_front(result: dict) -> list[str]:
    """The same points' memory, time and accuracy beside the sweep's baseline's."""
    base = result["baseline"]
    lines = [
        (
            f"Priced against the sweep's baseline (every technique off; the median of its "
            f"{base['seeds']} seed(s)): {base['searched_run_peak_mb']:.3f} MB searched run peak, "
            f"{base['predicted_update_s']:.4f} s per update predicted, "
            f"{base['measured_update_s']:.4f} s measured, validation accuracy "
            f"{base['val_accuracy']:.3f}. Seconds are the sweep's trials' own."
        ),
        "",
    ]
    header = ["trial", "memory reduction", "predicted s per update", "measured s per update"]
    header += ["time ratio (measured)", "val accuracy", "accuracy change"]
    rows = [
        [
            p["trial_id"],
            f"{p['memory_reduction']:.2f}x",
            f"{p['predicted_update_s']:.4f}",
            f"{p['measured_update_s']:.4f}",
            f"{p['time_ratio']:.2f}x",
            f"{p['val_accuracy']:.3f}",
            f"{100 * p['accuracy_change']:+.1f} points",
        ]
        for p in result["points"]
    ]
    return lines + table(header, rows)


def gpu_check(result: dict) -> str:
    """A run of the device check as it printed, a fenced block (its figures are in the lines)."""
    return "\n".join(["```", *result["output"], "```"]) + "\n"


def time_accuracy(result: dict) -> str:
    """The error distribution, over all points and per model family, then every point."""
    summary, targets = result["summary"], result["summary"]["targets"]
    protocol = result["protocol"]
    lines = [
        (
            f"Command: `{result['command']}` (torch {result['torch']}, {result['threads']} "
            f"thread(s)); {len(result['points'])} of {len(protocol['evaluation'])} evaluation "
            f"points measured, {len(protocol['calibration'])} calibration points apart; each "
            f"measured as the median of {protocol['updates']} updates after "
            f"{protocol['warm_up']}; targets: median within {percent(targets['median'])}, 90th "
            f"percentile within {percent(targets['p90'])}."
        ),
        "",
        describe(result.get("machine") or unrecorded("the run was cut short")),
        "",
    ]
    groups = [("all points", summary["all"]), *summary["families"].items()]
    lines += table(
        [
            "seconds per update, predicted against measured",
            "points",
            "median",
            "90th percentile",
            "worst",
        ],
        [
            [label, d["points"], *(percent(d[k]) for k in ("median", "p90", "worst"))]
            for label, d in groups
        ],
    )
    lines += [""]
    lines += table(
        ["point", "predicted s", "measured s", "error", "calls per update", "prediction s"],
        [
            [
                p["name"],
                f"{p['predicted_update_s']:.4f}",
                f"{p['measured_update_s']:.4f}",
                f"{100 * p['error']:+.1f}%",
                p["calls_per_update"],
                f"{p['prediction_seconds']:.1f}",
            ]
            for p in result["points"]
        ],
    )
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[dict], str]] = {
    "ask_time": ask_time,
    "profiler_accuracy": profiler_accuracy,
    "memory_ladder": memory_ladder,
    "gpu_check": gpu_check,
    "step_time": step_time,
    "sweep_scale": sweep_scale,
    "cluster_sweep": cluster_sweep,
    "search_replay": search_replay,
    "fidelity": fidelity,
    "quickstart_front": quickstart_front,
    "seed_spread": seed_spread,
    "tracking_overhead": tracking_overhead,
    "time_accuracy": time_accuracy,
}


NOT_YET = (
    "Not measured yet: `benchmarks/results/{name}.json` is written by `benchmarks/{name}.py` on a "
    "quiet machine; then run `benchmarks/render_docs.py`.\n"
)


def render(text: str) -> str:
    """`text` with every results region regenerated from its result file."""

    def region(match: re.Match) -> str:
        name, key = match.group(2), match.group(3)
        path = RESULTS / f"{name}.json"
        if not path.exists():  # a benchmark not yet run on a quiet machine
            return match.group(1) + NOT_YET.format(name=name) + match.group(5)
        result = json.loads(path.read_text())
        return (
            match.group(1)
            + RENDERERS[name](result if key is None else result[key])
            + match.group(5)
        )

    return REGION.sub(region, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a region is stale")
    args = parser.parse_args()
    stale = []
    for path in DOCS:
        text = path.read_text()
        rendered = render(text)
        if rendered != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(rendered)
    if args.check and stale:
        print(f"out of date with benchmarks/results: {', '.join(map(str, stale))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
