"""Following a sweep where people look, each checked against the real thing: TensorBoard's
event files read back with TensorBoard's own reader, MLflow runs on a real `mlflow server` on
the loopback address, optuna-dashboard on the sweep's journal in headless Chromium. One sweep
serves them: launched (logging to the server), its driver killed mid-sweep, resumed while the
dashboard reads the journal. A tracker that fails is one line and the sweep goes on; a tracking
URI that is not one is one line before Ray starts."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import shutil
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.browser import needs_chromium, shown_text
from tests.loopback import free_port, mlflow_server, served
from tests.test_search import OBJECTIVES, TINY_BASE, launch_then_kill
from tune_lowmem import store
from tune_lowmem.analysis.query import yaml_value
from tune_lowmem.search import SweepResult, launch, place, resume, sweep_folder
from tune_lowmem.search.journal import JOURNAL
from tune_lowmem.search.trackers import SETTINGS_FILE, Trackers
from tune_lowmem.search.trackers.curves import trial_run
from tune_lowmem.search.trackers.event_files import FOLDER, EventFiles
from tune_lowmem.search.trackers.mlflow_runs import RUNS_FILE, MLflowRuns
from tune_lowmem.space import SearchSpace

needs_tensorboard = pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None,
    reason="TensorBoard is not installed (the dev extra installs it: pip install -e '.[dev]')",
)
needs_mlflow = pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("flask") is None,
    reason="MLflow's client and server are not installed (the dev extra installs them: "
    "pip install -e '.[dev]'; the mlflow extra alone installs the client)",
)
DASHBOARD = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent))
needs_dashboard = pytest.mark.skipif(
    DASHBOARD is None,
    reason="optuna-dashboard is not installed (the dev and dashboard extras install it)",
)
EPOCHS, POINTS = 3, 4
SPACE = {
    "name": "followed",
    "base": {**TINY_BASE, "schedule": {"epochs": EPOCHS, "batch_size": 20}},
    "params": {
        "precision": {"type": "choice", "values": ["fp32", "bf16"]},
        "schedule.lr_multiplier": {"type": "loguniform", "low": 0.5, "high": 2.0},
    },
    "objectives": OBJECTIVES,
    "sampler": "random",
    "exactness": False,
    "num_samples": POINTS,
    "baseline": False,  # its run is named apart (test_the_baseline_s_run_is_named_for_it)
    "max_concurrent": 2,
    "resume_checkpoint_s": 0,  # a checkpoint every epoch: a restarted trial resumes mid-way
}


def accumulated(run: Path):
    """The run's events as TensorBoard reads them (its purge of a restart's orphans included)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run))
    events.Reload()
    return events


def hparams_of(events) -> tuple[dict, list[int]]:
    """A run's hparams (name -> value) and the statuses its session ends recorded."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    values, ended = {}, []
    for tag, content in events.PluginTagToContent("hparams").items():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if tag.endswith("session_start_info"):
            for name, value in data.session_start_info.hparams.items():
                values[name] = getattr(value, value.WhichOneof("kind"))
        else:
            ended.append(data.session_end_info.status)
    return values, ended


@dataclass
class Followed:
    """The followed sweep: its store, its rows before the kill, its end, the dashboard's study
    page and what the dashboard answered while the resumed driver wrote."""

    root: Path
    before: pd.DataFrame
    outcome: SweepResult
    page: str | None
    polls: list


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory):
    if importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("flask") is None:
        yield None
        return
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri


@pytest.fixture(scope="module")
def followed(local_ray, tracking_server, tmp_path_factory):
    """The sweep: launched (to the MLflow server where there is one), its driver SIGKILLed once
    a trial is stored, then resumed while a thread asks optuna-dashboard, started on the
    journal, for the study every half second."""
    folder = tmp_path_factory.mktemp("followed")
    space = {**SPACE, "tracking": {"tensorboard": True, "mlflow": tracking_server}}
    path = folder / "followed.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    root = folder / "store"
    launch_then_kill(path, root, local_ray, "followed", rows=1)
    before = store.read_trials(root, "followed")
    assert 1 <= len(before) < POINTS, "the driver was to be killed mid-sweep"
    journal = sweep_folder(root, "followed") / JOURNAL
    polls: list = []
    if DASHBOARD is None:
        yield Followed(root, before, resume("followed", store_root=root), None, polls)
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [DASHBOARD, str(journal), "--host", "127.0.0.1", "--port", str(port)]
    with served(command, f"{url}/api/studies", folder / "dashboard.log"):
        study = get_json(f"{url}/api/studies")["study_summaries"][0]["study_id"]
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                try:
                    trials = get_json(f"{url}/api/studies/{study}?after=0")["trials"]
                    polls.append(sum(t["state"] == "Complete" for t in trials))
                except OSError as error:
                    polls.append(error)
                time.sleep(0.5)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            outcome = resume("followed", store_root=root)
        finally:
            done.set()
            poller.join()
        deadline = time.monotonic() + 30  # the dashboard keeps its answer a few seconds
        while polls[-1] != POINTS and time.monotonic() < deadline:
            time.sleep(0.5)
            trials = get_json(f"{url}/api/studies/{study}?after=0")["trials"]
            polls.append(sum(t["state"] == "Complete" for t in trials))
        yield Followed(root, before, outcome, f"{url}/dashboard/studies/{study}", polls)


def run_key(row) -> str:
    """A stored trial's run: its point and seed, as the trackers name it."""
    return f"point {row['point']} seed {row['config.seed']}"


@needs_tensorboard
def test_each_trial_s_curves_read_back_with_tensorboard_s_reader(followed):
    """One run per training (point and seed; none twice though the driver was killed), named by
    them and the searched values, holding each epoch once (the store's values: a restarted
    trial's orphaned epochs purged), its memory and learning rate, no test metric, its searched
    values and trial as hparams and its outcome."""
    root = followed.root
    rows = followed.outcome.trials.set_index("trial_id")
    assert len(rows) == POINTS and (rows["status"] == "completed").all()
    folders = list((sweep_folder(root, "followed") / FOLDER).iterdir())
    runs = {" ".join(p.name.split(" ")[:4]): p for p in folders}
    assert len(runs) == len(folders) == POINTS
    assert sorted(runs) == sorted(run_key(row) for _, row in rows.iterrows())
    epochs = store.read_epochs(root, "followed")
    for trial_id, row in rows.iterrows():
        run = runs[run_key(row)]
        assert f"precision={row['config.precision']}" in run.name
        events = accumulated(run)
        scalars = events.Tags()["scalars"]
        assert {"val_accuracy", "train_loss", "lr", "memory/measured_step_eval_peak_mb"} <= set(
            scalars
        )
        assert not [tag for tag in scalars if tag.startswith("test_")]
        mine = epochs[epochs["trial_id"] == trial_id].sort_values("epoch")
        curve = events.Scalars("val_accuracy")
        assert [e.step for e in curve] == list(range(1, EPOCHS + 1))
        assert [e.value for e in curve] == pytest.approx(mine["metric.val_accuracy"].tolist())
        (peak,) = {e.value for e in events.Scalars("memory/measured_step_eval_peak_mb")}
        assert peak == pytest.approx(row["memory.measured_step_eval_peak_mb"], rel=1e-6)
        values, ended = hparams_of(events)
        assert values["point"] == row["point"] and values["precision"] == row["config.precision"]
        assert values["schedule.lr_multiplier"] == pytest.approx(
            row["config.schedule.lr_multiplier"]
        )
        assert ended and ended[-1] == 1  # STATUS_SUCCESS


def test_a_restarted_trial_s_epochs_read_once_as_its_last_attempt_wrote_them(tmp_path):
    """A training run again from its checkpoint at epoch 1 (here under a new trial id, as a
    point a killed driver had started is asked again) writes a new file in its run: TensorBoard
    drops the first attempt's epochs 2 and 3 and reads the second attempt's."""
    pytest.importorskip("tensorboard", reason="the dev extra installs TensorBoard")
    run = trial_run("t1", 0, {"precision": "bf16", "seed": 0})
    first = EventFiles(tmp_path)
    first.start(run, {})
    for epoch, value in ((1, 0.1), (2, 0.2), (3, 0.3)):
        first.result(run.key, epoch, {"val_accuracy": value})
    first.close()  # the driver died: no end recorded
    again = EventFiles(tmp_path)
    again.start(trial_run("t2", 0, {"precision": "bf16", "seed": 0}), {})  # asked again
    for epoch, value in ((2, 0.25), (3, 0.35)):
        again.result(run.key, epoch, {"val_accuracy": value})
    again.end(run.key, "completed")
    (folder,) = (tmp_path / FOLDER).iterdir()
    assert folder.name == "point 0 seed 0 precision=bf16" and len(list(folder.iterdir())) == 2
    curve = accumulated(folder).Scalars("val_accuracy")
    assert [e.step for e in curve] == [1, 2, 3]
    assert [e.value for e in curve] == pytest.approx([0.1, 0.25, 0.35])


@needs_mlflow
def test_the_baseline_s_run_is_named_for_it():
    """The sweep's baseline has no point (`search.baseline`): its run says so, apart from every
    point's, and carries no point among its hparams."""
    run = trial_run("t9", None, {"precision": "fp32", "seed": 1})
    assert run.key == "baseline seed 1" and run.name == "baseline seed 1 precision=fp32"
    assert "point" not in run.params and run.key != trial_run("t1", 0, {"seed": 1}).key


def test_each_trial_is_one_mlflow_run_under_the_sweep_s_across_the_resume(followed):
    """The server holds one parent run for the sweep and one child run per training (point and
    seed; none twice though the driver was killed and resumed), each with its configuration as
    params, its metrics at each epoch once, the predicted and measured memory, its trial and
    its outcome."""
    from mlflow import MlflowClient

    root, before = followed.root, followed.before
    folder = sweep_folder(root, "followed")
    ids = yaml.safe_load((folder / RUNS_FILE).read_text())
    client = MlflowClient(ids["uri"])
    runs = client.search_runs([ids["experiment_id"]], max_results=1000)
    (parent,) = [r for r in runs if r.info.run_name == "followed"]
    assert parent.info.run_id == ids["parent"] and parent.info.status == "FINISHED"
    assert parent.data.params["sampler"] == "random"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == ids["parent"]]
    rows = followed.outcome.trials.set_index("trial_id")
    by_run = {r.data.tags["tune_lowmem.run"]: r for r in children}
    assert len(children) == len(by_run) == len(rows)  # no training logged twice
    assert sorted(by_run) == sorted(ids["runs"]) == sorted(run_key(r) for _, r in rows.iterrows())
    epochs = store.read_epochs(root, "followed")
    for trial_id, row in rows.iterrows():
        run = by_run[run_key(row)]
        assert run.info.run_id == ids["runs"][run_key(row)] and run.info.status == "FINISHED"
        assert run.data.tags["tune_lowmem.status"] == "completed"
        assert run.data.tags["tune_lowmem.trial_id"] == trial_id
        assert run.info.run_name.startswith(f"{run_key(row)} precision={row['config.precision']}")
        config = store.config_values(row)
        assert run.data.params == {key: yaml_value(value) for key, value in config.items()}
        history = client.get_metric_history(run.info.run_id, "val_accuracy")
        assert sorted(m.step for m in history) == list(range(1, EPOCHS + 1))
        for name in ("memory.predicted_total_mb", "memory.measured_step_eval_peak_mb"):
            assert run.data.metrics[name] == pytest.approx(row[name], rel=1e-6)
        assert not [name for name in run.data.metrics if name.startswith("test_")]
        if trial_id in set(before["trial_id"]):  # done before the kill: its epochs as stored
            mine = epochs[epochs["trial_id"] == trial_id].sort_values("epoch")
            logged = [m.value for m in sorted(history, key=lambda m: m.step)]
            assert logged == pytest.approx(mine["metric.val_accuracy"].tolist())


@needs_dashboard
@needs_chromium
def test_optuna_dashboard_shows_the_study_while_the_sweep_writes_it(followed):
    """Started on the journal between the kill and the resume, optuna-dashboard read it while
    the resumed driver appended (each answer a study, more trials complete as it went, all of
    them once it ended), and in Chromium shows the study, each trial, and both objectives by
    name."""
    page, polls = followed.page, followed.polls
    errors = [p for p in polls if not isinstance(p, int)]
    counts = [p for p in polls if isinstance(p, int)]
    assert errors == [] and counts
    assert counts == sorted(counts) and counts[0] < POINTS == counts[-1]
    shown = shown_text(page)
    assert "followed" in shown and "Pareto Front" in shown
    assert "val_accuracy" in shown and "memory.predicted_total_mb" in shown
    listed = shown_text(f"{page}/trials")
    assert f"{POINTS} Trials" in listed
    assert all(f"Trial {number} Complete" in listed for number in range(POINTS))


# ---- failures there never fail the sweep ------------------------------------------------------


def full_disk_after(writes: int, monkeypatch) -> None:
    """tensorboardX's record writer failing as a full disk does once `writes` records are
    written (the event files' own writes; nothing else of the sweep goes through it)."""
    from tensorboardX.record_writer import RecordWriter

    write, written = RecordWriter.write, []

    def write_or_fail(self, data):
        if len(written) >= writes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(data)
        return write(self, data)

    monkeypatch.setattr(RecordWriter, "write", write_or_fail)


def test_a_full_disk_and_a_server_that_does_not_answer_are_one_line_each(
    local_ray, tmp_path, monkeypatch, capsys
):
    """The event files' disk fills after the first few events and nothing listens at the MLflow
    URI: each is one line, and every trial trains and is stored."""
    uri = f"http://127.0.0.1:{free_port()}"
    space = SearchSpace.from_dict(
        {
            **SPACE,
            "name": "unfollowed",
            "base": {**TINY_BASE, "schedule": {"epochs": 2, "batch_size": 20}},
            "num_samples": 3,
            "tracking": {"mlflow": uri},
        }
    )
    full_disk_after(4, monkeypatch)
    outcome = launch(space, store_root=tmp_path / "store")
    lines = capsys.readouterr().out.splitlines()
    assert len(outcome.trials) == 3 and (outcome.trials["status"] == "completed").all()
    assert len(store.read_epochs(tmp_path / "store", "unfollowed")) == 3 * 2
    tensorboard = [line for line in lines if "TensorBoard:" in line]
    mlflow = [line for line in lines if "MLflow:" in line]
    assert len(tensorboard) == 1 and len(mlflow) == 1, lines
    assert tensorboard[0].endswith("No space left on device; the sweep goes on without it")
    assert "cannot write " in tensorboard[0]
    assert mlflow[0].endswith(
        f"MLflow: {uri} does not answer (Connection refused); the sweep goes on without it"
    )


@needs_mlflow
def test_a_server_lost_mid_sweep_is_one_line_and_nothing_waits_on_it(tmp_path):
    """The server answers, then goes away: the calls after it fail once, said in one line, and
    closing the runs returns (nothing queued is left waiting)."""
    said: list[BaseException] = []
    with mlflow_server(tmp_path) as uri:
        run = trial_run("t1", 0, {"precision": "bf16", "seed": 0})
        runs = MLflowRuns(uri, tmp_path, "lost", {"sampler": "random"}, said.append)
        runs.start(run, {"precision": "bf16", "seed": 0})
        runs.result(run.key, 1, {"val_accuracy": 0.25})
        ids, deadline = tmp_path / RUNS_FILE, time.monotonic() + 120
        while not (ids.exists() and run.key in yaml.safe_load(ids.read_text())["runs"]):
            assert time.monotonic() < deadline and not said
            time.sleep(0.2)
    runs.result(run.key, 2, {"val_accuracy": 0.5})
    runs.end(run.key, "completed")
    started = time.monotonic()
    runs.close(timeout=120)
    assert len(said) == 1 and time.monotonic() - started < 120


@needs_mlflow
def test_a_run_whose_driver_died_before_its_params_gets_them_when_it_goes_on(tmp_path):
    """A driver killed between saving a training's run id and logging its params: the resumed
    driver, continuing the same run, logs them."""
    from mlflow import MlflowClient

    config = {"precision": "bf16", "seed": 0}
    run = trial_run("t1", 0, config)
    with mlflow_server(tmp_path) as uri:
        MLflowRuns(uri, tmp_path, "killed", {}, pytest.fail).close(timeout=120)  # the parent
        ids, client = yaml.safe_load((tmp_path / RUNS_FILE).read_text()), MlflowClient(uri)
        tags = {"mlflow.parentRunId": ids["parent"], "tune_lowmem.run": run.key}
        made = client.create_run(ids["experiment_id"], run_name=run.name, tags=tags)
        ids["runs"][run.key] = made.info.run_id
        (tmp_path / RUNS_FILE).write_text(yaml.safe_dump(ids))  # then the driver died
        again = MLflowRuns(uri, tmp_path, "killed", {}, pytest.fail)
        again.start(run, config)
        again.close(timeout=120)
        params = client.get_run(made.info.run_id).data.params
    assert params == {key: yaml_value(value) for key, value in config.items()}


def test_settings_in_the_sweep_s_folder_choose_the_trackers(tmp_path):
    """What a driver runs is what its sweep's folder says when it starts (so resume --mlflow
    reaches a sweep launched without it): no event files when tensorboard is false."""
    space = SearchSpace.from_dict({**SPACE, "tracking": {"tensorboard": False}})
    folder = sweep_folder(tmp_path, "followed")
    folder.mkdir(parents=True)
    place.bind("followed", tmp_path)
    (folder / SETTINGS_FILE).write_text(yaml.safe_dump(space.tracking.to_dict()))
    trackers = Trackers(space, "followed")
    trackers.setup()
    assert trackers.trackers == {}
    (folder / SETTINGS_FILE).write_text("tensorboard: true\nmlflow: null\n")
    restored = Trackers.__new__(Trackers)
    restored.__setstate__(trackers.__getstate__())  # as Tune unpickles it on resume
    restored.setup()
    assert list(restored.trackers) == ["TensorBoard"]
