"""The configurations a store tried, as the analysis sees them.

The paper reports each point as the mean over seeds with a 95% interval of 1.96 standard
errors; here a point is a seed group of completed trials (`store` gives the same id to the
same config with another seed), averaged with `pareto.aggregate_seeds`. Labels say which
techniques a point uses, in the paper's words, so figures and tables can name it. Nothing here
knows a task: model sizes, batch units and metric names are read from the columns present.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import outcome, pareto, store
from ..config import ConfigError
from ..outcome import MAXIMIZE, METRIC, MINIMIZE, TIME, Direction
from . import objectives as chosen
from .objectives import MEMORY, NoResult

MEMORY_PARTS = ("model", "optimizer", "activation")
# What the analysis reads of each trial: not the package versions nor the timings.
COLUMNS = (
    "status",
    "failure_reason",
    "seed_group",
    "point",
    "sampler",
    "started_at",
    "objectives",
    "epochs_completed",
    "config.",
    METRIC,
    outcome.MEMORY,
    TIME,
)
# The minibatch a microbatch splits, and its unit: whichever field the trial's config has.
BATCH_FIELDS = {"config.schedule.batch_size": "examples", "config.schedule.max_tokens": "tokens"}
NO_TECHNIQUE = "no technique"  # the techniques of the paper's baseline (fp32, dense, whole batches)
_WORDS = {"val": "validation", "bleu": "BLEU", "ppl": "perplexity", "nll": "NLL"}
# Config fields a label already covers, or that say where a trial ran rather than what it was.
_DESCRIBED = (
    "config.task",
    "config.seed",
    "config.device",
    "config.precision",
    "config.checkpoint",
    "config.sparsity.density",
    "config.microbatch.size",
    "config.microbatch.mode",
    "config.data.root",
    "config.data.num_workers",
)

__all__ = ["MEMORY", "NoResult", "Points", "load_points"]


def metric_name(column: str) -> str:
    """``metric.val_accuracy`` -> ``validation accuracy``: a label from a column's name."""
    words = column.removeprefix(METRIC).removeprefix(outcome.MEMORY).split("_")
    return " ".join(_WORDS.get(word, word) for word in words)


def metric_scale(column: str) -> float:
    """Accuracies are shown as percent, everything else as it is stored."""
    return 100.0 if column.endswith("accuracy") else 1.0


@dataclass(frozen=True)
class Points:
    """The trials of the chosen sweeps and their completed configurations averaged across seeds."""

    trials: pd.DataFrame  # every stored trial of the chosen sweeps, any status
    groups: pd.DataFrame  # one row per seed group of completed trials; see `configurations`
    score: str  # the validation metric every choice is made on, e.g. metric.val_accuracy
    direction: Direction = MAXIMIZE  # of the score
    memory: str = MEMORY
    test: str | None = None  # the matching test metric, shown beside the chosen points
    objectives: dict[str, str] = field(default_factory=dict)  # the sweeps' own
    root: str = ""  # the store they were read from

    @property
    def score_name(self) -> str:
        return metric_name(self.score)

    @property
    def score_label(self) -> str:
        """Axis and column label in display units: accuracies as percent, BLEU as it is."""
        return f"{self.score_name} (%)" if self.scale == 100 else self.score_name

    @property
    def scale(self) -> float:
        return metric_scale(self.score)

    @property
    def rule(self) -> str:
        return chosen.RULE.format(score=f"{self.score} ({self.direction}d)")

    def scored(self) -> pd.DataFrame:
        """The configurations with both a score and a predicted memory."""
        keep = (
            self.groups[f"{self.score}.mean"].notna() & self.groups[f"{self.memory}.mean"].notna()
        )
        return self.groups[keep]

    def front(self) -> pd.DataFrame:
        """The memory-score Pareto front of the configurations, by memory ascending."""
        return pareto.pareto_front(
            self.scored(), {f"{self.score}.mean": self.direction, f"{self.memory}.mean": MINIMIZE}
        )

    def best(self, frame: pd.DataFrame, by: str) -> pd.Series:
        """The best mean score at each value of ``by``: the figures' best-per-setting lines."""
        means = frame.groupby(by)[f"{self.score}.mean"]
        return (means.max() if self.direction == MAXIMIZE else means.min()).sort_index()

    def top(self, frame: pd.DataFrame) -> pd.Series:
        """The configuration of ``frame`` (non-empty) with the best mean score."""
        means = frame[f"{self.score}.mean"]
        return frame.loc[means.idxmax() if self.direction == MAXIMIZE else means.idxmin()]


def load_points(
    root: str, sweep: str | None = None, task: str | None = None, metric: str | None = None
) -> Points:
    """The store's points for the figures and tables, chosen on the sweeps' validation metric
    (or ``metric``, which must be a validation metric too)."""
    trials = load_trials(root, sweep, task)
    done = completed(trials)
    objectives = chosen.choose(root, trials, None, "objectives")
    if metric is None:
        metric = chosen.score(objectives)
    elif metric not in numeric_columns(done):
        raise ConfigError(
            "--metric",
            f"{metric!r} is not a numeric column of the store; allowed: "
            + ", ".join(c for c in numeric_columns(done) if c.startswith(chosen.VALIDATION)),
        )
    chosen.choose(root, trials, {metric: MAXIMIZE}, "--metric")  # a validation metric only
    chosen.require_values(done, metric)
    higher = any(w in metric for w in chosen.HIGHER_IS_BETTER)
    direction = Direction(objectives.get(metric) or (MAXIMIZE if higher else MINIMIZE))
    return Points(
        trials=trials,
        groups=configurations(done),
        score=metric,
        direction=direction,
        memory=chosen.memory(objectives),
        test=chosen.test_of(metric, done),
        objectives=objectives,
        root=str(root),
    )


def load_trials(root: str, sweep: str | None = None, task: str | None = None) -> pd.DataFrame:
    """The stored trials of one sweep (or all), of one task; a clear error when there are none."""
    sweeps = store.list_sweeps(root)
    if not sweeps:
        raise ConfigError(
            "--store",
            f"{root} holds no trials; run `tune-lowmem launch SPACE.yaml --store {root}` first",
        )
    if sweep is not None and sweep not in sweeps:
        raise ConfigError("--sweep", f"{sweep!r} is not in {root}; allowed: {', '.join(sweeps)}")
    trials = store.read_trials(root, sweep, columns=COLUMNS)
    tasks = sorted(trials["config.task"].dropna().unique())
    if task is None and len(tasks) > 1:
        raise ConfigError(
            "--task", f"{root} holds trials of several tasks; allowed: {', '.join(tasks)}"
        )
    if task is not None:
        if task not in tasks:
            raise ConfigError(
                "--task", f"{task!r} has no trials in {root}; allowed: {', '.join(tasks)}"
            )
        trials = trials[trials["config.task"] == task]
    return trials.reset_index(drop=True)


def completed(trials: pd.DataFrame) -> pd.DataFrame:
    done = trials[trials["status"] == "completed"]
    if done.empty:
        counts = ", ".join(f"{n} {status}" for status, n in trials["status"].value_counts().items())
        raise NoResult(f"no completed trial in the store ({counts})")
    return done


def numeric_columns(trials: pd.DataFrame) -> list[str]:
    """The metric, memory and time columns that hold numbers: what objectives may name."""
    groups = (METRIC, outcome.MEMORY, TIME)
    numeric = [
        col
        for col in trials.columns
        if col.startswith(groups) and pd.api.types.is_numeric_dtype(trials[col])
    ]
    group = {col: next(i for i, g in enumerate(groups) if col.startswith(g)) for col in numeric}
    return sorted(numeric, key=lambda col: (group[col], col))


def parse_objectives(specs: Sequence[str], trials: pd.DataFrame) -> dict[str, str]:
    """``COLUMN:max,COLUMN:min`` (repeatable) -> {column: direction}; bare names work too."""
    allowed = numeric_columns(trials)
    objectives: dict[str, str] = {}
    for spec in (part.strip() for text in specs for part in text.split(",")):
        name, sep, direction = spec.rpartition(":")
        try:
            way = Direction.of(direction, "--objectives", short=True)
        except ConfigError:
            way = None
        if not sep or way is None or not name:
            ways = " or ".join(f"COLUMN:{d.short}" for d in Direction)
            raise ConfigError("--objectives", f"{spec!r} is not allowed; {ways} is required")
        matches = [name] if name in allowed else [c for c in allowed if c.split(".", 1)[1] == name]
        if len(matches) != 1:
            raise ConfigError(
                "--objectives",
                f"{name!r} is not a numeric column of the store; allowed: {', '.join(allowed)}",
            )
        objectives[matches[0]] = way
    if len(objectives) < 2:
        raise ConfigError(
            "--objectives", f"{len(objectives)} given; two or more objectives are required"
        )
    return objectives


def configurations(done: pd.DataFrame) -> pd.DataFrame:
    """One row per seed group of ``done``: every metric and memory column as ``<col>.mean``,
    ``.std``, ``.count``, ``.ci95``, over its seeds (a seed trained twice, by two sweeps of one
    store, is one sample: the mean of its runs); the group's config columns (its first trial's,
    seed dropped); ``n`` distinct seeds, the ``trial_ids`` and the sweep ``points`` that
    proposed them;
    ``techniques`` (e.g. ``fp16 + sparsity``), ``configuration`` (e.g. ``fp16, 30% nonzeros,
    microbatch 10``) and ``other_settings`` (fields that vary besides)."""
    stats = pareto.aggregate_seeds(done, "seed_group", numeric_columns(done), "config.seed")
    config_cols = [c for c in done.columns if c.startswith("config.") and c != "config.seed"]
    first = done.drop_duplicates("seed_group").set_index("seed_group")[config_cols]
    groups = stats.join(first, on="seed_group")
    members: dict[str, list[str]] = {}
    proposed: dict[str, set[int]] = {}
    points = done["point"].tolist() if "point" in done else [None] * len(done)
    # Python lists: iterating pandas' Arrow-backed columns costs a call per value.
    for group, trial, point in zip(
        done["seed_group"].tolist(), done["trial_id"].tolist(), points, strict=True
    ):
        members.setdefault(group, []).append(trial)
        if not pd.isna(point):
            proposed.setdefault(group, set()).add(int(point))
    ids = groups["seed_group"].tolist()
    groups["trial_ids"] = [sorted(members[g]) for g in ids]
    groups["points"] = [sorted(proposed.get(g, ())) for g in ids]
    seeds = done.groupby("seed_group")["config.seed"].nunique()  # a seed run twice: one
    groups["n"] = [int(seeds[g]) for g in ids]
    largest = largest_model(groups)
    codes = {c: value_codes(groups[c]) for c in config_cols}
    varying = [c for c in config_cols if codes[c].max(initial=0) > 0]
    model_fields = [c for c in varying if c.startswith("config.model.")]
    # Labels depend on a few fields only: worked out once per distinct combination of them.
    wanted = dict.fromkeys((*_DESCRIBED, *BATCH_FIELDS, *largest, *model_fields))
    labelled = [c for c in wanted if c in groups]
    keys = list(zip(*(codes[c] for c in labelled), strict=True))
    first_of = {key: i for i, key in reversed(list(enumerate(keys)))}
    rows = groups.iloc[list(first_of.values())][labelled].to_dict("records")
    names = {
        key: (" + ".join(techniques(row, largest)) or NO_TECHNIQUE, describe(row, model_fields))
        for key, row in zip(first_of, rows, strict=True)
    }
    groups["techniques"] = [names[k][0] for k in keys]
    groups["configuration"] = [names[k][1] for k in keys]
    others = [c for c in varying if c not in _DESCRIBED and c not in model_fields]
    dense = (groups["config.sparsity.density"] >= 1).to_numpy()
    settings = [
        [
            "" if is_dense and c.startswith("config.sparsity.") else f"{c[7:]}={plain(v)}"
            for v, is_dense in zip(groups[c], dense, strict=True)
        ]
        for c in others
    ]  # the rewiring knobs of a dense model change nothing: left out
    joined = (", ".join(filter(None, row)) for row in zip(*settings, strict=True))
    groups["other_settings"] = list(joined) if others else ""
    return groups


def hashable(column: pd.Series) -> pd.Series:
    """The column with its lists (NumPy arrays, as Parquet list columns read) as tuples; only a
    column of Python objects can hold them, so any other is returned as it is, unvisited."""
    if column.dtype != object:
        return column
    return column.map(lambda v: tuple(v) if isinstance(v, (list, np.ndarray)) else v)


def value_codes(column: pd.Series) -> np.ndarray:
    """The column's values as integers, equal where the values are (lists compared by content,
    missing values all one code): telling configurations apart without formatting each value."""
    return pd.factorize(hashable(column), use_na_sentinel=False)[0]


def techniques(row: Mapping, largest: Mapping[str, float] | None = None) -> list[str]:
    """The paper's technique names a configuration uses; a model field below the ``largest``
    value of the store (e.g. a smaller width) marks a smaller-model baseline."""
    names = []
    if row["config.precision"] != "fp32":
        names.append(row["config.precision"])
    if row["config.sparsity.density"] < 1:
        names.append("sparsity")
    if microbatched(row):
        names.append("microbatch")
    if row["config.checkpoint"] != "none":
        names.append("checkpoint")
    for col, size in (largest or {}).items():
        if col in row and pd.notna(row[col]) and row[col] < size:
            names.append(f"smaller {col.rsplit('.', 1)[1].replace('_', ' ')}")
    return names


def describe(row: Mapping, model_fields: Sequence[str] = ()) -> str:
    """A short name for one configuration: the model fields that vary, precision, techniques."""
    parts = [model_name(row, model_fields)] if model_fields else []
    parts.append(row["config.precision"])
    if row["config.sparsity.density"] < 1:
        parts.append(f"{100 * row['config.sparsity.density']:.3g}% nonzeros")
    if microbatched(row):
        simulated = " simulated" if row["config.microbatch.mode"] == "simulated" else ""
        parts.append(f"microbatch {int(row['config.microbatch.size'])}{simulated}")
    if row["config.checkpoint"] != "none":
        parts.append(f"checkpoint {row['config.checkpoint']}")
    return ", ".join(parts)


def model_name(row: Mapping, model_fields: Sequence[str]) -> str:
    """``model depth=16 width=2``: the model fields that tell a store's models apart."""
    return "model " + " ".join(
        f"{c.removeprefix('config.model.')}={plain(row[c])}" for c in model_fields
    )


def batch_field(row: Mapping) -> str:
    """The config field of the minibatch a microbatch splits (images or tokens)."""
    return next(c for c in BATCH_FIELDS if c in row and pd.notna(row[c]))


def microbatch_size(row: Mapping) -> int:
    """The microbatch a step computes at once; the whole minibatch without microbatching."""
    size = row["config.microbatch.size"]
    return int(row[batch_field(row)]) if pd.isna(size) else int(size)


def microbatched(row: Mapping) -> bool:
    return microbatch_size(row) < int(row[batch_field(row)])


def batch_sizes(frame: pd.DataFrame) -> pd.Series:
    """Each row's minibatch (`batch_field` of every row at once)."""
    present = [frame[c] for c in BATCH_FIELDS if c in frame]
    sizes = present[0]
    for other in present[1:]:
        sizes = sizes.fillna(other)
    return sizes.astype(int)


def largest_model(groups: pd.DataFrame) -> dict[str, float]:
    """The largest value of each integer model field that varies in the store (its sizes)."""
    sizes = [
        c
        for c in groups.columns
        if c.startswith("config.model.")
        and pd.api.types.is_integer_dtype(groups[c])
        and groups[c].nunique() > 1
    ]
    return {col: groups[col].max() for col in sizes}


def trial_config(done: pd.DataFrame, seed_group: str) -> dict[str, Any]:
    """The group's config from the store as flat dotted keys, seed 0: what `profile` and
    `train` read (as YAML or `--set`), known without importing the task or torch."""
    row = done.iloc[np.flatnonzero(done["seed_group"].to_numpy() == seed_group)[0]]
    return {**store.config_values(row), "seed": 0}


def plain(value: object) -> str:
    """A config value as a label shows it: 4 digits, lists without brackets."""
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    if isinstance(value, str) and value.startswith(
        "["
    ):  # a list in a store older than list columns
        value = json.loads(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return str(value)
