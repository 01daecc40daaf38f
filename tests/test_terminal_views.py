"""`status` and `pareto` fit a terminal: at most 120 characters a line by default, fewer in a
narrower one (`$COLUMNS`), the full table with --wide; each row names the trial that trains it
again with `tune-lowmem train --store DIR --trial ID`. The store is test_pareto_cli's (real tiny
WRN configs, one sparse, microbatched and checkpointed: the full table's lines run long)."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.test_pareto_cli import FRONT, store  # noqa: F401 - the store fixture
from tune_lowmem.analysis import terminal
from tune_lowmem.cli import build_parser, main
from tune_lowmem.commands import config_from_arguments
from tune_lowmem.store import read_trials, trial_config

FRONT_TRIALS = ["t006", "t005", "t003", "t001"]  # the front's first trial of each, by memory


def printed(capsys, *argv) -> str:
    assert main([*map(str, argv)]) == 0
    return capsys.readouterr().out


def train_lines(text: str) -> list[list[str]]:
    return [shlex.split(line) for line in text.splitlines() if "tune-lowmem train" in line]


@pytest.mark.parametrize("command", ["status", "pareto"])
def test_the_front_fits_a_terminal_of_100_columns(store, capsys, monkeypatch, command):  # noqa: F811
    root = store[0]
    monkeypatch.setenv("COLUMNS", "100")
    argv = ["status", "wrn-tpe"] if command == "status" else ["pareto", "--sweep", "wrn-tpe"]
    text = printed(capsys, *argv, "--store", root)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    (header,) = [line for line in lines if line.startswith("trial ")]
    assert header.split() == [
        "trial",
        "val_accuracy",
        "predicted_total_mb",
        "predicted_stored_total_mb",  # D's differs: shown beside, as the full table does
        "test_accuracy",
        "seeds",
    ]
    rows = [line.split()[0] for line in lines[lines.index(header) + 1 :][: 2 * len(FRONT)]]
    assert [r for r in rows if r.startswith("t")] == FRONT_TRIALS
    assert "fp16, 30% nonzeros, microbatch 5, checkpoint residual-2*" in text  # whole, own line
    for name in ("metric.val_accuracy; maximized", "memory.predicted_total_mb; minimized"):
        assert name in " ".join(text.split())
    assert [words[words.index("--trial") + 1] for words in train_lines(text)] == FRONT_TRIALS
    assert "--set" not in text


def test_by_default_at_most_120_columns_and_the_full_table_with_wide(store, capsys, monkeypatch):  # noqa: F811
    root = store[0]
    monkeypatch.delenv("COLUMNS", raising=False)  # not a terminal (captured): 120
    for argv in (["status", "wrn-tpe"], ["pareto"], ["pareto", "--max-memory-mb", 3]):
        lines = printed(capsys, *argv, "--store", root).splitlines()
        assert max(map(len, lines)) <= terminal.MAX_WIDTH, max(lines, key=len)
    wide = printed(capsys, "status", "wrn-tpe", "--store", root, "--wide")
    assert max(map(len, wide.splitlines())) > terminal.MAX_WIDTH
    assert "tune-lowmem train --set" in wide and "other settings" in wide


def test_a_train_line_trains_the_trial_s_configuration(store, capsys, tmp_path):  # noqa: F811
    """`train --store DIR --trial ID` is that trial's configuration, seed included (`--set`
    changes it further); `profile` takes it too; an unknown id or a file beside it is one line."""
    root = store[0]
    parser = build_parser()
    trials = read_trials(root, "wrn-tpe").set_index("trial_id")
    for trial_id in ("t002", "t007"):  # a second seed of a point
        args = parser.parse_args(["train", "--store", str(root), "--trial", trial_id])
        assert config_from_arguments(args) == trial_config(trials.loc[trial_id].to_dict())
        assert config_from_arguments(args).seed == trials.loc[trial_id, "config.seed"] == 1
    argv = ["train", "--store", str(root), "--trial", "t005", "--set", "schedule.epochs=1"]
    assert main([*argv, "--json", "--threads", "1"]) == 0
    (epoch,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert epoch["epoch"] == 1 and 0 <= epoch["val_accuracy"] <= 1
    assert main(["profile", "--store", str(root), "--trial", "t005", "--json"]) == 0
    profiled = json.loads(capsys.readouterr().out)
    assert profiled["predicted"]["predicted_total_mb"] == pytest.approx(
        trials.loc["t005", "memory.predicted_total_mb"]
    )
    for argv, said in (
        (["--trial", "nope"], f"--trial: 'nope' is not a trial in the store {root}"),
        (["config.yaml", "--trial", "t005"], "--trial: not allowed with a config file"),
    ):
        assert main(["train", "--store", str(root), *argv]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"tune-lowmem train: error: {said}")


def test_the_narrow_table_s_columns_are_the_declared_list(store, capsys, monkeypatch):  # noqa: F811
    """After the trial and the objectives, the narrow table shows `terminal.NARROW`'s columns
    (those the rows have), each named below it: an entry there is a column here."""
    root = store[0]
    argv = ("pareto", "--store", root, "--sweep", "wrn-tpe")
    with_tests = printed(capsys, *argv)
    monkeypatch.setattr(terminal, "NARROW", ())
    without = printed(capsys, *argv)
    for text, shown in ((with_tests, True), (without, False)):
        (header,) = [line for line in text.splitlines() if line.startswith("trial ")]
        assert ("test_accuracy" in header.split()) is shown
        assert ("  test_accuracy: test accuracy (metric.test_accuracy;" in text) is shown
