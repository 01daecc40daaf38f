"""One module per `tune-lowmem` verb; shared argument helpers live here."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..config import ConfigError, TrialConfig
from ..yaml_loading import load_text


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """A trial config as an optional YAML file or a stored trial's (`--trial`), plus
    `--set key=value` overrides (dotted keys)."""
    parser.add_argument(
        "config", nargs="?", help="a TrialConfig YAML file (default: the paper's WRN-28-2)"
    )
    parser.add_argument(
        "--trial",
        metavar="ID",
        help="the configuration (seed included) of a trial of the store, e.g. one that "
        "`tune-lowmem pareto` lists",
    )
    parser.add_argument(
        "--store", default="runs", help="the store --trial is read from (default: ./runs)"
    )
    parser.add_argument("--sweep", help="the trial's sweep, when trial ids repeat across sweeps")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one field, e.g. --set precision=fp16 --set sparsity.density=0.3 (repeatable)",
    )


def config_from_arguments(args: argparse.Namespace) -> TrialConfig:
    values: dict[str, Any] = {}
    if args.config and args.trial:
        raise ConfigError("--trial", "not allowed with a config file; give one of them")
    if args.config:
        values = TrialConfig.from_yaml(args.config).to_flat()
    if args.trial:
        from .. import store

        row = stored_trial(args.store, args.trial, args.sweep, "--trial")
        values = store.trial_config(row).to_flat()
    for item in args.overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("--set", f"{item!r} is not allowed; KEY=VALUE is required")
        values[key] = load_text(raw, f"--set {key}")
    return TrialConfig.from_dict(values)


def stored_trial(root: str, trial_id: str, sweep: str | None, flag: str) -> dict[str, Any]:
    """The store's row of one trial (`flag` names it in an error): the one of that id, in
    `sweep` when given."""
    from .. import store
    from ..preflight import store_folder

    folder = store_folder(root, "--store")
    trials = store.read_trials(folder, sweep) if sweep else store.read_trials(folder)
    rows = trials[trials["trial_id"] == trial_id] if "trial_id" in trials else trials.iloc[:0]
    if rows.empty:
        where = f"sweep {sweep} of " if sweep else ""
        raise ConfigError(flag, f"{trial_id!r} is not a trial in {where}the store {folder}")
    if len(rows) > 1:
        raise ConfigError(
            flag,
            f"{trial_id!r} is in several sweeps ({', '.join(rows['sweep'])}); "
            "name one with --sweep",
        )
    return rows.iloc[0].to_dict()


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """Where a sweep's results go and which Ray cluster runs it."""
    parser.add_argument("--store", default="runs", help="the store's folder (default: ./runs)")
    parser.add_argument(
        "--address",
        help="a Ray cluster: auto, HOST:PORT or ray://HOST:10001 (default: start one here)",
    )
    parser.add_argument(
        "--mlflow",
        metavar="URI",
        help="log each trial as an MLflow run to this tracking URI, e.g. http://127.0.0.1:5000 "
        "(overrides the space's tracking.mlflow; needs the mlflow extra)",
    )


def add_wide_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wide",
        action="store_true",
        help="the full table (every memory column, other settings, a train line of --set flags) "
        "rather than one that fits the terminal (at most 120 characters a line)",
    )


def table_width(args: argparse.Namespace) -> int | None:
    """The width a table is printed at: None (the full table) with --wide, else the terminal's."""
    from ..analysis.terminal import width

    return None if args.wide else width()


def print_outcome(outcome) -> None:
    """The end of launch and resume: the Pareto front and where everything is."""
    from ..analysis.counted import labelled
    from ..search import status_counts
    from ..search.progress import front_table

    counts = status_counts(outcome.trials)
    print(
        f"\nsweep {outcome.sweep} done: "
        + ", ".join(f"{n} {status}" for status, n in counts.items())
    )
    objectives = ", ".join(labelled(m, d) for m, d in outcome.space.objectives.items())
    print(f"Pareto front ({objectives}):")
    print(front_table(outcome.front))
    print(
        f"store: {outcome.root} (trials/, epochs/; Tune and Optuna state in ray/{outcome.sweep}/)"
    )


def number(text: str | None, flag: str, positive: bool = False) -> float | None:
    """A numeric flag's value: a finite number, above zero (``positive``) or at least zero;
    anything else is one line naming the flag (argparse's own `type=float` would print two)."""
    if text is None:
        return None
    rule = "a number > 0" if positive else "a number >= 0"
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ConfigError(flag, f"{text!r} is not allowed; {rule} is required")
    return value


def count(text: str | None, flag: str) -> int | None:
    """A flag that counts something: a whole number above zero, else one line naming it."""
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) == 0:
        raise ConfigError(flag, f"{text!r} is not allowed; a whole number > 0 is required")
    return int(text)
