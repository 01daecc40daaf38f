"""A sweep's folder on its own: moved while half done, stopped by a full disk, read by Optuna's
and Ray Tune's own tools. Each scenario is one small real sweep on a local 2-CPU Ray."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from ray import tune

from tests.ray_cluster import wait_for_trials_to_end
from tune_lowmem import store
from tune_lowmem.cli import main
from tune_lowmem.search import JOURNAL, resume, sweep_folder, sweep_study
from tune_lowmem.search.journal import TORN_SUFFIX, CheckedJournal, repair

BASE = {
    "device": "cpu",
    "model": {"depth": 10, "width": 1},
    "schedule": {"epochs": 2, "batch_size": 20},
    "data": {"train_subset": 200, "val_size": 100, "test_subset": 100},
}
POINTS, SEEDS = 3, 2
CLI = str(Path(sys.executable).with_name("tune-lowmem"))


def write_space(folder: Path, name: str) -> Path:
    """Two epochs, a checkpoint after the first: a trial writes into the sweep's folder."""
    space = {
        "name": name,
        "base": BASE,
        "resume_checkpoint_s": 0,
        "sampler": "random",
        "num_samples": POINTS,
        "seeds_per_point": SEEDS,
        "baseline": False,
        "max_concurrent": 2,
        "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
        "params": {"schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0}},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def stored_points(root: Path, sweep: str) -> list[tuple[int, int]]:
    """(point, seed) of every stored row, sorted, repeats kept."""
    rows = store.read_trials(root, sweep)
    return sorted(zip(rows["point"].astype(int), rows["config.seed"].astype(int), strict=True))


def assert_each_point_once_per_seed(root: Path, sweep: str) -> None:
    pairs = stored_points(root, sweep)
    points = sorted({point for point, _ in pairs})
    assert len(points) == POINTS
    assert pairs == [(point, seed) for point in points for seed in range(SEEDS)]  # none twice
    assert (store.read_trials(root, sweep)["status"] == "completed").all()
    trials = sweep_study(root, sweep).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * POINTS


@pytest.fixture(scope="module")
def moved(local_ray, tmp_path_factory):
    """A sweep killed half done, its store copied elsewhere, the original deleted, then resumed,
    its status, Pareto front and report asked, all from the copy."""
    folder = tmp_path_factory.mktemp("moved")
    space, original, copy = write_space(folder, "moved"), folder / "original", folder / "copy"
    with open(folder / "launch.log", "w") as log:
        driver = subprocess.Popen(
            [CLI, "launch", str(space), "--store", str(original), "--address", local_ray],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 240
        while len(store.trial_ids(original, "moved")) < 2:
            assert driver.poll() is None and time.monotonic() < deadline, (
                folder / "launch.log"
            ).read_text()[-3000:]
            time.sleep(0.25)
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    wait_for_trials_to_end(os.getpid(), "moved")  # none to write where it was after the move
    before = stored_points(original, "moved")
    known = {
        t.trial_id for t in tune.ExperimentAnalysis(str(sweep_folder(original, "moved"))).trials
    }
    shutil.copytree(original, copy, symlinks=True)
    stored_before = set(store.trial_ids(copy, "moved"))  # what the move took, read from the copy
    shutil.rmtree(original)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        resume("moved", store_root=copy)
        commands = [
            ["status", "moved"],
            ["pareto", "--sweep", "moved"],
            ["report", "--out", str(copy / "report")],
        ]
        codes = [main([*command, "--store", str(copy)]) for command in commands]
    return {
        "original": original,
        "copy": copy,
        "before": before,
        "stored_before": stored_before,
        "known": known,
        "codes": codes,
        "printed": printed.getvalue(),
    }


def test_a_moved_half_done_sweep_resumes_in_its_new_place(moved):
    assert 2 <= len(moved["before"]) < POINTS * SEEDS, "the driver was to be killed mid-sweep"
    assert_each_point_once_per_seed(moved["copy"], "moved")
    assert set(moved["before"]) <= set(stored_points(moved["copy"], "moved"))
    print(
        f"\nmoved: {len(moved['before'])} rows before the move, {len(stored_points(moved['copy'], 'moved'))} after"
    )
    assert moved["codes"] == [0, 0, 0]
    assert "sweep moved: 6 trials stored (6 completed" in moved["printed"]
    assert (moved["copy"] / "report" / "index.html").is_file()


def test_a_moved_sweep_writes_nothing_where_it_was(moved):
    assert not moved["original"].exists()  # not recreated by Tune, the searcher or a trial
    folder = sweep_folder(moved["copy"], "moved")
    started = set(store.trial_ids(moved["copy"], "moved")) - moved["stored_before"]
    assert started, "the resumed sweep was to start trials of its own"
    checkpointed = {p.parent.name for p in folder.glob("*/checkpoint_*")}
    assert started <= checkpointed  # their checkpoints too
    snapshots = list(folder.glob("searcher-state-*.pkl"))
    assert snapshots and all(
        str(moved["original"]).encode() not in p.read_bytes() for p in snapshots
    )


def test_the_study_names_its_objectives(moved):
    path = sweep_folder(moved["copy"], "moved") / JOURNAL
    study = optuna.load_study(
        study_name="moved", storage=JournalStorage(JournalFileBackend(str(path)))
    )
    assert study.metric_names == ["val_accuracy", "memory.predicted_total_mb"]


def test_ray_tunes_own_tools_read_the_sweep_folder(moved):
    folder = str(sweep_folder(moved["copy"], "moved"))
    assert tune.Tuner.can_restore(folder)
    analysis = tune.ExperimentAnalysis(folder)
    # Tune snapshots its trials at its own period (`tune_state`): a trial the killed driver ran
    # after its last snapshot is the store's alone; every other trial is Tune's too, those of the
    # resumed driver (which saved its state as it ended) included
    unsnapshotted = moved["stored_before"] - moved["known"]
    expected = set(store.trial_ids(moved["copy"], "moved")) - unsnapshotted
    assert expected - moved["stored_before"], "the resumed driver was to run trials of its own"
    assert {t.trial_id for t in analysis.trials} >= expected
    last = analysis.dataframe().set_index("trial_id")  # each trial's last result, as Tune logged it
    rows = store.read_trials(moved["copy"], "moved").set_index("trial_id").loc[sorted(expected)]
    assert last.loc[rows.index, "val_accuracy"].tolist() == pytest.approx(
        rows["metric.val_accuracy"].tolist()
    )


def torn_append_after_first_row(root: Path, sweep: str, failed: list[bytes]):
    """Optuna's journal append, failing as a full disk does once a row is stored: half the
    line written, then ENOSPC."""
    append = JournalFileBackend.append_logs

    def append_logs(self, logs):
        if failed or not store.trial_ids(root, sweep):
            return append(self, logs)
        line = b'{"op_code":' + b"x" * 40
        with open(self.path, "ab") as handle:
            handle.write(line[: len(line) // 2])
        failed.append(line[: len(line) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))

    return append_logs


def test_a_full_disk_stops_the_sweep_and_resume_finishes_it(
    local_ray, tmp_path, monkeypatch, capsys
):
    space, root = write_space(tmp_path, "full"), tmp_path / "store"
    journal = sweep_folder(root, "full") / JOURNAL
    torn: list[bytes] = []
    monkeypatch.setattr(
        JournalFileBackend, "append_logs", torn_append_after_first_row(root, "full", torn)
    )
    code = main(["launch", str(space), "--store", str(root)])
    monkeypatch.undo()
    said = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and torn
    assert said[-1] == (
        f"tune-lowmem launch: stopped: cannot write {journal}: No space left on device; "
        "once there is room, `tune-lowmem resume` continues the sweep"
    )
    before = stored_points(root, "full")
    assert 1 <= len(before) < POINTS * SEEDS and journal.read_bytes().endswith(torn[0])

    assert main(["resume", "full", "--store", str(root)]) == 0
    printed = capsys.readouterr().out
    (kept,) = journal.parent.glob(f"{JOURNAL}{TORN_SUFFIX}*")
    assert kept.read_bytes() == torn[0] and journal.read_bytes().endswith(b"\n")
    assert (
        printed.count("cut a torn last line") == 1 and f"{journal}: cut a torn last line" in printed
    )
    assert_each_point_once_per_seed(root, "full")
    assert set(before) <= set(stored_points(root, "full"))
    print(
        f"\nfull disk: {len(before)} rows at the stop ({len(said)} stderr lines), "
        f"{len(stored_points(root, 'full'))} after resume"
    )


@pytest.mark.parametrize(
    ("tail", "torn"),
    [
        (b'{"op_code": 4, "worker', b'{"op_code": 4, "worker'),
        (b"\x00\x00\x00\n", b"\x00\x00\x00\n"),
        (b"", b""),
    ],
    ids=["cut-short", "not-json", "whole"],
)
def test_repair_cuts_only_a_torn_last_line(tmp_path, capsys, tail, torn):
    path = tmp_path / JOURNAL
    whole = b'{"op_code": 0, "study_name": "s"}\n{"op_code": 5, "trial_id": 0}\n'
    path.write_bytes(whole + tail)
    kept = repair(path)
    assert path.read_bytes() == whole
    if not torn:
        assert kept is None and capsys.readouterr().out == ""
        return
    assert kept.parent == tmp_path and kept.name.startswith(f"{JOURNAL}{TORN_SUFFIX}")
    assert kept.read_bytes() == torn
    (line,) = capsys.readouterr().out.splitlines()
    assert f"{path}: cut a torn last line ({len(torn)} bytes" in line and kept.name in line
    assert repair(path) is None  # once


ASK_THEN = """
import os, sys
from pathlib import Path
import optuna
from optuna.storages import JournalStorage
from tune_lowmem.search.journal import CheckedJournal
journal = CheckedJournal(Path(sys.argv[1]))
study = optuna.create_study(study_name="s", storage=JournalStorage(journal), load_if_exists=True)
with journal.one_write():
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    assert [t.number for t in study.get_trials()] == [trial.number]  # seen before it is written
    if sys.argv[2] == "killed":
        os._exit(9)
trial.suggest_float("y", 0.0, 1.0)
"""


def test_a_point_is_asked_in_one_write_or_not_at_all(tmp_path):
    """A driver killed while asking leaves no half-asked point in the journal."""
    path = tmp_path / JOURNAL
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    run = [sys.executable, "-c", ASK_THEN, str(path)]

    def trials():
        return optuna.load_study(
            study_name="s", storage=JournalStorage(JournalFileBackend(str(path)))
        ).trials

    assert subprocess.run([*run, "killed"], env=env, check=False).returncode == 9
    assert trials() == [] and path.read_bytes().endswith(b"\n")
    assert subprocess.run([*run, "asked"], env=env, check=False).returncode == 0
    (trial,) = trials()
    assert set(trial.params) == {"x", "y"}


def test_the_journal_is_read_from_where_it_was_left_not_from_its_start(tmp_path, monkeypatch):
    """Each ask is one write; afterwards Optuna's reader is asked only from a line it has read
    (where it knows the offset), so a sync reads the new lines, not the whole journal again."""
    starts = []
    read = JournalFileBackend.read_logs

    def recorded(backend, log_number_from):
        starts.append((log_number_from, backend.read))
        return read(backend, log_number_from)

    monkeypatch.setattr(JournalFileBackend, "read_logs", recorded)
    journal = CheckedJournal(tmp_path / JOURNAL)
    study = optuna.create_study(study_name="s", storage=JournalStorage(journal))
    for _ in range(30):
        with journal.one_write():
            trial = study.ask()
            trial.suggest_float("x", 0.0, 1.0)
        study.tell(trial, 1.0)
    lines = len((tmp_path / JOURNAL).read_bytes().splitlines())
    assert len(study.trials) == 30 and journal.read == lines
    assert all(start <= known for start, known in starts)  # never a line it has not read
    assert max(start for start, _ in starts) > lines - 10  # and it went on from the end
