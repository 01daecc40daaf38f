"""The outcome vocabulary: directions spelled and column names built in one module, one rule
from a name to its column, and a column declared once reaching every reader and writer."""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tune_lowmem import outcome, store
from tune_lowmem.analysis import counted
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.outcome import (
    COLUMNS,
    MAXIMIZE,
    MINIMIZE,
    Direction,
    column,
    result_from_row,
)

PACKAGE = Path(outcome.__file__).parent
DIRECTION_WORD = re.compile(r"\b(maximize|minimize)\b")
GROUPS = (outcome.MEMORY, outcome.TIME)


def package_sources() -> list[tuple[Path, ast.Module]]:
    """Every module of the package but the vocabulary's own, parsed."""
    return [
        (path, ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != Path(outcome.__file__)
    ]


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of a module's docstring nodes (module, class and function): prose, not values."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def group_names(tree: ast.Module) -> set[str]:
    """The names a module gives the vocabulary's column groups (``from ..outcome import TIME``)."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("outcome")
        for alias in node.names
        if alias.name in ("MEMORY", "TIME")
    }


def builds_a_column(node: ast.AST, groups: set[str]) -> bool:
    """An f-string or a ``+`` that starts with ``memory.``/``time.`` (or a group's name)."""
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        inner = first.value if isinstance(first, ast.FormattedValue) else first
        return starts_a_column(inner, groups)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return starts_a_column(node.left, groups)
    return False


def starts_a_column(node: ast.AST, groups: set[str]) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith(GROUPS)
    if isinstance(node, ast.Attribute):  # outcome.MEMORY
        return (
            isinstance(node.value, ast.Name)
            and node.value.id == "outcome"
            and (node.attr in ("MEMORY", "TIME"))
        )
    return isinstance(node, ast.Name) and node.id in groups


def places(picker) -> list[str]:
    """``path:line`` of every node of the package (the vocabulary left out) that the predicate
    ``picker(tree)`` makes for its module picks."""
    found = []
    for path, tree in package_sources():
        picks = picker(tree)
        found += [f"{path.relative_to(PACKAGE)}:{n.lineno}" for n in ast.walk(tree) if picks(n)]
    return found


def spells_a_direction(tree: ast.Module):
    prose = docstrings(tree)
    return lambda node: (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in prose
        and DIRECTION_WORD.search(node.value) is not None
    )


def test_directions_are_spelled_in_the_vocabulary_alone():
    assert places(spells_a_direction) == []


def test_memory_and_time_column_names_are_built_in_the_vocabulary_alone():
    assert places(lambda tree: functools.partial(builds_a_column, groups=group_names(tree))) == []


def test_the_scans_would_see_a_spelled_direction_and_a_built_column():
    source = '''"""A docstring may say maximize."""
from ..outcome import TIME as GROUP
way = "minimize"
built = [f"memory.{x}", GROUP + name, f"{outcome.MEMORY}{x}", "time." + x]
kept = [f"{MEMORY} (MB", f"{column}.mean"]
'''
    tree = ast.parse(source)
    spelled = [n.value for n in ast.walk(tree) if spells_a_direction(tree)(n)]
    assert spelled == ["minimize"]  # not the docstring's
    groups = group_names(tree)
    assert groups == {"GROUP"}
    assert sum(builds_a_column(n, groups) for n in ast.walk(tree)) == 4


def test_a_direction_equals_its_value_in_every_file_format():
    assert MAXIMIZE == "maximize" and Direction("minimize") is MINIMIZE
    assert json.dumps({"a": MAXIMIZE}) == '{"a": "maximize"}'
    assert Direction.of("max", "--objectives", short=True) is MAXIMIZE
    assert (MAXIMIZE.sign, MINIMIZE.sign, MINIMIZE.short) == (1.0, -1.0, "min")
    with pytest.raises(ConfigError, match="^objectives.x: 'max' is not allowed; allowed: "):
        Direction.of("max", "objectives.x")


def test_a_space_keeps_plain_values_when_saved():
    from tune_lowmem.space import SearchSpace

    raw = {
        "name": "saved",
        "base": {"task": "tests.tiny_task:TinyBlobs", "device": "cpu"},
        "params": {"precision": {"type": "choice", "values": ["fp32", "bf16"]}},
        "objectives": {"val_accuracy": "maximize", "memory_total_mb": "minimize"},
        "num_samples": 2,
    }
    space = SearchSpace.from_dict(raw)
    assert space.objectives == {"val_accuracy": MAXIMIZE, "memory.predicted_total_mb": MINIMIZE}
    text = yaml.safe_dump(space.to_dict())  # a Direction member would not dump
    assert SearchSpace.from_dict(yaml.safe_load(text)) == space


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("val_accuracy", "metric.val_accuracy"),
        ("metric.val_bleu", "metric.val_bleu"),
        ("memory.predicted_total_mb", "memory.predicted_total_mb"),
        ("time.measured_update_s", "time.measured_update_s"),
        ("memory_total_mb", "memory.predicted_total_mb"),  # the first version's names
        ("measured_activation_mb", "memory.measured_activation_mb"),
        ("flops_per_step", "memory.flops_per_step"),
        # where the store's and the analysis' rules disagreed: now one answer
        ("predicted_run_peak_mb", "memory.predicted_run_peak_mb"),
        # renamed for what it measured: a side run's step and evaluation batch
        ("memory.measured_run_peak_mb", "memory.measured_step_eval_peak_mb"),
        ("measured_run_peak_mb", "memory.measured_step_eval_peak_mb"),
    ],
)
def test_one_rule_from_a_name_to_its_column(name, expected):
    assert column(name) == expected


@pytest.mark.parametrize("name", list(COLUMNS))
def test_a_declared_column_is_written_read_reported_and_named(tmp_path, name):
    """What one line in `outcome` gives a column: the store writes it with its type, reads it
    back, a stored row reports it again, the readers name it in words, and a row written
    before it reads it as empty."""
    value = 7 if COLUMNS[name].integer else 0.25
    group = name.split(".")[0]
    config = TrialConfig.from_dict({"task": "tests.tiny_task:TinyBlobs", "device": "cpu"})
    rows = store.SweepRows("s", objectives={"val_accuracy": MAXIMIZE})
    record = rows.row("new", "completed", config.to_flat(), {"val_accuracy": 0.5}, {name: value})
    assert getattr(record, group) == {name.split(".", 1)[1]: value}
    store.write_trial(tmp_path, record)
    store.write_trial(tmp_path, rows.row("old", "completed", config.to_flat(), {}))
    read = store.read_trials(tmp_path).set_index("trial_id")
    assert read.loc["new", name] == value and pd.isna(read.loc["old", name])
    assert result_from_row(read.loc["new"].to_dict(), ["val_accuracy"])[name] == value
    assert result_from_row(read.loc["old"].to_dict(), ["val_accuracy"])[name] is None
    assert counted.words(name) and "as reported" not in counted.how(name)


def test_the_conversion_names_a_report_under_its_columns():
    from tune_lowmem.memory import MemoryReport

    predicted = MemoryReport(4 * 10**6, 8 * 10**6, 2 * 10**6, 99, "predicted", None, 30 * 10**6)
    measured = MemoryReport(1, 1, 3 * 10**6, 98, "measured", 40 * 10**6, 50 * 10**6)
    columns = outcome.memory_columns(predicted, measured)
    assert columns[outcome.PREDICTED_PARTS["total"]] == 14.0
    assert columns[outcome.PREDICTED_RUN_PEAK] == 30.0
    assert columns[outcome.MEASURED_STEP_EVAL_PEAK] == 50.0
    assert columns[outcome.FLOPS] == 98  # the measured step's
    assert columns[outcome.MEASURED_STORED_TOTAL] == 15.0  # held: predicted weights and state
    assert columns[outcome.PAPER_CSR_TOTAL] is None  # not given: not invented
    assert set(columns) == {n for n in COLUMNS if n.startswith("memory.")} - set(outcome.CUDA_PEAKS)


def test_a_time_prediction_is_named_under_the_predicted_time_columns():
    from tune_lowmem.timing import predict_time

    predicted = predict_time(TrialConfig.from_dict({"task": "tests.tiny_task:TinyBlobs"}))
    columns = outcome.time_columns(predicted)
    assert columns == {
        outcome.PREDICTED_UPDATE_S: predicted.update_seconds,
        outcome.PREDICTED_EVALUATION_S: predicted.evaluation_seconds,
        outcome.PREDICTED_EPOCH_S: predicted.epoch_seconds,
    }
    assert set(outcome.time_columns(None).values()) == {None}
    assert outcome.PREDICTED_UPDATE_S in outcome.SPACE_OBJECTIVES
    assert outcome.known_before_training(outcome.PREDICTED_UPDATE_S)
