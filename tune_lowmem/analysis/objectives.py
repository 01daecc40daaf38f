"""What a store's sweeps optimise, and the one rule of every choice made from it: validation data.

The Pareto set, the best configuration under a budget and Table 3's rows are all chosen on the
sweep's own objectives, whose metric must be a validation one (``metric.val_*``); test metrics
are shown beside the chosen points, never used to choose them. A sweep's objectives come from
its rows (the ``objectives`` column, written with every trial), else from the space it saved
(``ray/<sweep>/space.yaml``, for stores written before that column), else, for a bare old store,
its first validation metric whose name says higher is better, with memory minimised.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from .. import outcome
from ..config import ConfigError
from ..outcome import MAXIMIZE, MEMORY_OBJECTIVE, METRIC, MINIMIZE, column
from ..yaml_loading import load_file

VALIDATION, TEST = f"{METRIC}val_", f"{METRIC}test_"
MEMORY = MEMORY_OBJECTIVE
# Old stores only: words in a metric's name that say more is better (accuracy, BLEU).
HIGHER_IS_BETTER = ("accuracy", "bleu")
RULE = (
    "Every choice (the Pareto set, the best configuration under a budget, Table 3's rows, the "
    "figures' best-per-setting lines) is made on the validation metric {score}, averaged over "
    "seeds; test metrics are shown beside the chosen configurations and never used to choose."
)


class NoResult(Exception):
    """The store holds trials, but none that answer the question asked of it."""


def stored(root: str | Path, trials: pd.DataFrame) -> dict[str, str]:
    """The objectives the trials' sweeps optimised ({} when the store does not say)."""
    found: dict[str, dict[str, str]] = {}
    for sweep, rows in trials.groupby("sweep", sort=True):
        recorded = rows["objectives"].dropna() if "objectives" in rows else pd.Series(dtype=object)
        if not recorded.empty:
            found[sweep] = {column(k): v for k, v in json.loads(recorded.iloc[-1]).items()}
        elif (saved := saved_space(root, str(sweep))) is not None:
            found[sweep] = {column(k): v for k, v in (saved.get("objectives") or {}).items()}
    distinct = {json.dumps(o, sort_keys=True) for o in found.values()}
    if len(distinct) > 1:
        listed = "; ".join(f"{s}: {_listed(o)}" for s, o in found.items())
        raise ConfigError(
            "--sweep", f"the sweeps optimise different objectives ({listed}); choose one sweep"
        )
    return next(iter(found.values()), {})


def read_saved_space(root: str | Path, sweep: str) -> tuple[dict | None, str | None]:
    """The space a sweep was launched with, as plain YAML values (None: not in this store, or
    not readable), and why it could not be read (None: it could, or there is none)."""
    path = Path(root) / "ray" / sweep / "space.yaml"
    if not path.is_file():
        return None, None
    try:
        values = load_file(path, "sweep space file")
    except ConfigError as error:
        return None, str(error)
    if not isinstance(values, dict):
        what = "an empty file" if values is None else f"a {type(values).__name__}, not a mapping"
        return None, f"{path}: {what}; the sweep's saved search space is lost"
    return values, None


def saved_space(root: str | Path, sweep: str) -> dict | None:
    """`read_saved_space`'s values; an unreadable file is named once on stderr, and the
    answer then comes from the rows alone."""
    values, problem = read_saved_space(root, sweep)
    if problem is not None:
        say_unreadable(problem)
    return values


def say_unreadable(problem: str) -> None:
    """A sweep's unreadable space file, named once per command."""
    from ..store import note_once

    note_once(f"{problem}; answering from the stored rows")


def choose(
    root: str | Path, trials: pd.DataFrame, given: Mapping[str, str] | None, flag: str
) -> dict[str, str]:
    """The objectives to choose on: ``given`` (a flag), else the sweeps', else the fallback;
    refused when a metric among them is not a validation metric."""
    objectives = dict(given or stored(root, trials) or fallback(trials))
    flag = flag if given else "the sweep's objectives"
    for name in objectives:
        if name.startswith(METRIC) and not name.startswith(VALIDATION):
            val = VALIDATION + name.removeprefix(TEST).removeprefix(METRIC)
            raise ConfigError(
                flag,
                f"{name} is not a validation metric; choices are made on validation data only "
                f"(e.g. {val})",
            )
    return objectives


def fallback(trials: pd.DataFrame) -> dict[str, str]:
    """An old store that does not say what it optimised: its first higher-is-better validation
    metric, maximised, and predicted memory, minimised."""
    scores = [
        c
        for c in sorted(trials.columns)
        if c.startswith(VALIDATION) and any(word in c for word in HIGHER_IS_BETTER)
    ]
    if not scores:
        metrics = ", ".join(c for c in trials.columns if c.startswith(METRIC)) or "none"
        raise NoResult(
            "the store has no validation metric to choose on (its metrics: "
            f"{metrics}); choices are made on validation data only, never on test data"
        )
    return {scores[0]: MAXIMIZE, MEMORY: MINIMIZE}


def score(objectives: Mapping[str, str]) -> str:
    """The validation metric among the objectives (what figures plot and tables rank by)."""
    metrics = [c for c in objectives if c.startswith(VALIDATION)]
    if not metrics:
        raise NoResult(
            f"the objectives ({_listed(objectives)}) name no validation metric; choices are made "
            "on validation data only: pass one, e.g. --objectives metric.val_accuracy:max,..."
        )
    return metrics[0]


def memory(objectives: Mapping[str, str]) -> str:
    """The minimised memory objective (predicted total memory when none is)."""
    return next(
        (c for c, way in objectives.items() if c.startswith(outcome.MEMORY) and way == MINIMIZE),
        MEMORY,
    )


def test_of(score_column: str, trials: pd.DataFrame) -> str | None:
    """The test metric that matches a validation one, when the trials report it."""
    test = TEST + score_column.removeprefix(VALIDATION)
    return test if test in trials.columns and trials[test].notna().any() else None


def require_values(done: pd.DataFrame, score_column: str) -> None:
    """A clear message, not a silent fall-back to test, when no trial reports the score."""
    if score_column not in done.columns or done[score_column].isna().all():
        raise NoResult(
            f"no completed trial reports {score_column}, the validation metric choices are made "
            "on; test metrics are never used to choose"
        )


def _listed(objectives: Mapping[str, str]) -> str:
    return ", ".join(f"{c} {way}" for c, way in objectives.items())
