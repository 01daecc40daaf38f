"""One module per `tune-lowmem` verb; shared argument helpers live here."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..config import ConfigError, TrialConfig
from ..yaml_loading import load_text


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """A trial config as an optional YAML file plus `--set key=value` overrides (dotted keys)."""
    parser.add_argument(
        "config", nargs="?", help="a TrialConfig YAML file (default: the paper's WRN-28-2)"
    )
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
    if args.config:
        values = TrialConfig.from_yaml(args.config).to_flat()
    for item in args.overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("--set", f"{item!r} is not allowed; KEY=VALUE is required")
        values[key] = load_text(raw, f"--set {key}")
    return TrialConfig.from_dict(values)


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """Where a sweep's results go and which Ray cluster runs it."""
    parser.add_argument("--store", default="runs", help="the store's folder (default: ./runs)")
    parser.add_argument(
        "--address",
        help="a Ray cluster: auto, HOST:PORT or ray://HOST:10001 (default: start one here)",
    )


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
