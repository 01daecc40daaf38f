"""The configurations a store tried, as the analysis sees them.

The paper reports each point as the mean over seeds with a 95% interval of 1.96 standard
errors; here a point is a seed group of completed trials (`store` gives the same id to the
same config with another seed), averaged with `pareto.aggregate_seeds`. Labels say which
techniques a point uses, in the paper's words, so figures and tables can name it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import pareto, store
from ..config import ConfigError, TrialConfig

MEMORY = "memory.predicted_total_mb"
MEMORY_PARTS = ("model", "optimizer", "activation")
# The score a figure shows, by preference: the paper's figures are test accuracy (or BLEU).
SCORES = {
    "test": ("metric.test_accuracy", "metric.test_bleu"),
    "val": ("metric.val_accuracy", "metric.val_bleu"),
}
# A model narrower or shallower than the store's largest is a baseline of its own (Figure 10).
SIZE_FIELDS = {
    "wrn-cifar10": {"narrower": "config.model.width", "shallower": "config.model.depth"},
    "dct-iwslt14": {
        "narrower": "config.model.embed_dim",
        "shallower": "config.model.encoder_layers",
    },
}
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
_DIRECTIONS = {"max": "maximize", "maximize": "maximize", "min": "minimize", "minimize": "minimize"}


class NoResult(Exception):
    """The store holds trials, but none that answer the question asked of it."""


@dataclass(frozen=True)
class Points:
    """The trials of the chosen sweeps and their completed configurations averaged across seeds."""

    trials: pd.DataFrame  # every stored trial of the chosen sweeps, any status
    groups: pd.DataFrame  # one row per seed group of completed trials; see `configurations`
    score: str  # the metric column that figures and tables show, e.g. metric.test_accuracy
    memory: str = MEMORY

    @property
    def score_name(self) -> str:
        split, _, kind = self.score.removeprefix("metric.").partition("_")
        return f"{split} {'BLEU (tokenised)' if kind == 'bleu' else kind}"

    @property
    def score_label(self) -> str:
        """Axis and column label in display units: accuracies as percent, BLEU as it is."""
        return f"{self.score_name} (%)" if self.scale == 100 else self.score_name

    @property
    def scale(self) -> float:
        return 100.0 if self.score.endswith("_accuracy") else 1.0

    def scored(self) -> pd.DataFrame:
        """The configurations with both a score and a predicted memory."""
        keep = (
            self.groups[f"{self.score}.mean"].notna() & self.groups[f"{self.memory}.mean"].notna()
        )
        return self.groups[keep]

    def front(self) -> pd.DataFrame:
        """The memory-score Pareto front of the configurations, by memory ascending."""
        return pareto.pareto_front(
            self.scored(), {f"{self.score}.mean": "maximize", f"{self.memory}.mean": "minimize"}
        )


def load_points(
    root: str, sweep: str | None = None, task: str | None = None, metric: str | None = None
) -> Points:
    """The store's points for the figures and tables: ``metric`` or the test score by default."""
    trials = load_trials(root, sweep, task)
    done = completed(trials)
    if metric is None:
        metric = score_column(done, prefer="test")
    elif metric not in numeric_columns(done):
        raise ConfigError(
            "--metric",
            f"{metric!r} is not a numeric column of the store; allowed: "
            + ", ".join(c for c in numeric_columns(done) if c.startswith("metric.")),
        )
    return Points(trials=trials, groups=configurations(done), score=metric)


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
    trials = store.read_trials(root, sweep)
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
    """The metric and memory columns that hold numbers: what objectives may name."""
    numeric = [
        col
        for col in trials.columns
        if col.startswith(("metric.", "memory.")) and pd.api.types.is_numeric_dtype(trials[col])
    ]
    return sorted(numeric, key=lambda col: (col.startswith("memory."), col))


def score_column(trials: pd.DataFrame, prefer: str = "test") -> str:
    """The first accuracy or BLEU column the trials report, ``prefer``'s split first."""
    other = "val" if prefer == "test" else "test"
    candidates = SCORES[prefer] + SCORES[other]
    for col in candidates:
        if col in trials.columns and trials[col].notna().any():
            return col
    raise NoResult(f"no completed trial reports a score; looked for {', '.join(candidates)}")


def parse_objectives(specs: Sequence[str], trials: pd.DataFrame) -> dict[str, str]:
    """``COLUMN:max,COLUMN:min`` (repeatable) -> {column: direction}; bare names work too."""
    allowed = numeric_columns(trials)
    objectives: dict[str, str] = {}
    for spec in (part.strip() for text in specs for part in text.split(",")):
        name, sep, direction = spec.rpartition(":")
        if not sep or direction not in _DIRECTIONS or not name:
            raise ConfigError(
                "--objectives", f"{spec!r} is not allowed; COLUMN:max or COLUMN:min is required"
            )
        matches = [name] if name in allowed else [c for c in allowed if c.split(".", 1)[1] == name]
        if len(matches) != 1:
            raise ConfigError(
                "--objectives",
                f"{name!r} is not a numeric column of the store; allowed: {', '.join(allowed)}",
            )
        objectives[matches[0]] = _DIRECTIONS[direction]
    if len(objectives) < 2:
        raise ConfigError(
            "--objectives", f"{len(objectives)} given; two or more objectives are required"
        )
    return objectives


def configurations(done: pd.DataFrame) -> pd.DataFrame:
    """One row per seed group of ``done``: every metric and memory column as ``<col>.mean``,
    ``.std``, ``.count``, ``.ci95``; the group's config columns (its first trial's, seed
    dropped); ``n`` trials; ``techniques`` (e.g. ``fp16 + sparsity``), ``configuration`` (e.g.
    ``fp16, 30% nonzeros, microbatch 10``) and ``other_settings`` (fields that vary besides)."""
    stats = pareto.aggregate_seeds(done, "seed_group", numeric_columns(done))
    config_cols = [c for c in done.columns if c.startswith("config.") and c != "config.seed"]
    first = done.drop_duplicates("seed_group").set_index("seed_group")[["trial_id", *config_cols]]
    groups = stats.join(first, on="seed_group")
    groups["n"] = groups["seed_group"].map(done.groupby("seed_group").size()).astype(int)
    largest = largest_model(groups)
    varying = [c for c in config_cols if groups[c].astype(str).nunique() > 1]
    model_varies = any(c.startswith("config.model.") for c in varying)
    rows = [row for _, row in groups.iterrows()]
    groups["techniques"] = [" + ".join(techniques(row, largest)) or "no technique" for row in rows]
    groups["configuration"] = [describe(row, model_varies) for row in rows]
    others = [
        c
        for c in varying
        if c not in _DESCRIBED and not (model_varies and c.startswith("config.model."))
    ]
    groups["other_settings"] = [
        ", ".join(
            f"{c.removeprefix('config.')}={_plain(row[c])}"
            for c in others
            if row["config.sparsity.density"] < 1 or not c.startswith("config.sparsity.")
        )
        for row in rows
    ]  # the rewiring knobs of a dense model change nothing: left out
    return groups


def techniques(row: Mapping, largest: Mapping[str, float] | None = None) -> list[str]:
    """The paper's technique names a configuration uses; ``largest`` model sizes mark baselines."""
    names = []
    if row["config.precision"] != "fp32":
        names.append(row["config.precision"])
    if row["config.sparsity.density"] < 1:
        names.append("sparsity")
    if microbatched(row):
        names.append("microbatch")
    if row["config.checkpoint"] != "none":
        names.append("checkpoint")
    for name, col in SIZE_FIELDS[row["config.task"]].items():
        if largest and col in largest and row[col] < largest[col]:
            names.append(name)
    return names


def describe(row: Mapping, with_model: bool = False) -> str:
    """A short name for one configuration: model (when it varies), precision, technique settings."""
    parts = [model_name(row)] if with_model else []
    parts.append(row["config.precision"])
    if row["config.sparsity.density"] < 1:
        parts.append(f"{100 * row['config.sparsity.density']:.3g}% nonzeros")
    if microbatched(row):
        simulated = " simulated" if row["config.microbatch.mode"] == "simulated" else ""
        parts.append(f"microbatch {int(row['config.microbatch.size'])}{simulated}")
    if row["config.checkpoint"] != "none":
        parts.append(f"checkpoint {row['config.checkpoint']}")
    return ", ".join(parts)


def model_name(row: Mapping) -> str:
    if row["config.task"] == "wrn-cifar10":
        return f"WRN-{int(row['config.model.depth'])}-{int(row['config.model.width'])}"
    return (
        f"DCT {int(row['config.model.encoder_layers'])}+{int(row['config.model.decoder_layers'])}"
        f" layers, d={int(row['config.model.embed_dim'])}"
    )


def batch_size(row: Mapping) -> int:
    """The minibatch the microbatch splits: images for WRN, tokens for the transformer."""
    key = (
        "config.schedule.batch_size"
        if row["config.task"] == "wrn-cifar10"
        else "config.schedule.max_tokens"
    )
    return int(row[key])


def microbatch_size(row: Mapping) -> int:
    """The microbatch a step computes at once; the whole minibatch without microbatching."""
    size = row["config.microbatch.size"]
    return batch_size(row) if pd.isna(size) else int(size)


def microbatched(row: Mapping) -> bool:
    return microbatch_size(row) < batch_size(row)


def is_baseline(row: Mapping, largest: Mapping[str, float]) -> bool:
    """fp32, dense, whole batches, no checkpointing, the largest model: the paper's baseline."""
    return not techniques(row, largest)


def largest_model(groups: pd.DataFrame) -> dict[str, float]:
    return {col: groups[col].max() for col in _size_fields(groups)}


def trial_config(done: pd.DataFrame, seed_group: str) -> TrialConfig:
    """The group's config rebuilt from the store, seed 0: ready for `profile` and `train`."""
    row = done[done["seed_group"] == seed_group].iloc[0]
    return store.trial_config(row).replace(seed=0)


def _size_fields(groups: pd.DataFrame) -> list[str]:
    tasks = groups["config.task"].unique()
    return [col for task in tasks for col in SIZE_FIELDS[task].values() if col in groups.columns]


def _plain(value: object) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    if isinstance(value, str) and value.startswith("["):
        return ",".join(str(v) for v in json.loads(value))
    return str(value)
