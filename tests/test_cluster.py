"""Running on a Ray cluster: cluster.yaml as Ray's launcher accepts it, and sweeps on a real
multi-node Ray cluster on this machine (tests/ray_cluster.py) that survive a lost worker node
and a killed driver."""

from __future__ import annotations

import copy
import importlib.resources
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import yaml
from ray.autoscaler.sdk import fillout_defaults

from tests.ray_cluster import LocalCluster, signal_all, trial_processes
from tune_lowmem import store
from tune_lowmem.cli import main
from tune_lowmem.search import sweep_folder, sweep_study
from tune_lowmem.search.tune_state import tune_trials

RAY_SCHEMA = json.loads(
    (importlib.resources.files("ray.autoscaler") / "ray-schema.json").read_text()
)
PROJECT = Path(__file__).resolve().parents[1]
CLUSTER_YAML = PROJECT / "cluster.yaml"
STORAGE_ROOT = "/mnt/tune-lowmem"


@pytest.fixture(scope="module")
def cluster_yaml() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


# ---- cluster.yaml ----------------------------------------------------------------------------


def prepare_config(config: dict) -> dict:
    """Ray's defaults for the config's cloud provider filled in, as `ray up` does."""
    return fillout_defaults(config)


def validate_config(config: dict) -> None:
    """Ray's launcher schema, the file its own validation reads (ray/autoscaler/ray-schema.json)."""
    jsonschema.validate(config, RAY_SCHEMA)


def test_cluster_yaml_passes_rays_own_schema(cluster_yaml):
    """What `ray up` does before it calls the cloud: fill Ray's AWS defaults, then validate."""
    validate_config(prepare_config(copy.deepcopy(cluster_yaml)))


def test_rays_validator_rejects_a_broken_cluster_yaml(cluster_yaml):
    """The check above has teeth: a misspelt key, or a worker type without resources, fails it."""
    misspelt = {**copy.deepcopy(cluster_yaml), "max_worker": 8}
    with pytest.raises(jsonschema.ValidationError, match="max_worker"):
        validate_config(prepare_config(misspelt))
    no_resources = copy.deepcopy(cluster_yaml)
    del no_resources["available_node_types"]["gpu-a10g"]["resources"]
    with pytest.raises(jsonschema.ValidationError, match="resources"):
        validate_config(prepare_config(no_resources))


def test_dashboard_is_reachable_only_through_the_ssh_tunnel(cluster_yaml):
    (start,) = [c for c in cluster_yaml["head_start_ray_commands"] if "ray start" in c]
    assert "--dashboard-host=127.0.0.1" in start and "0.0.0.0" not in start
    # Ray's default security group opens only SSH to the outside; no extra rule may add ports.
    assert not cluster_yaml["provider"].get("security_group", {}).get("IpPermissions")
    assert "--ray-client-server-port" not in start


def test_head_has_no_gpu_and_gpu_workers_autoscale(cluster_yaml):
    types = cluster_yaml["available_node_types"]
    head = types[cluster_yaml["head_node_type"]]
    assert head["node_config"]["InstanceType"].startswith("m5.")  # a CPU instance
    assert head["resources"] == {"CPU": 0}  # no trial ever lands next to the driver and the GCS
    workers = {name: t for name, t in types.items() if name != cluster_yaml["head_node_type"]}
    assert workers
    for worker in workers.values():
        assert worker["node_config"]["InstanceType"].split(".")[0] in {"g5", "g6", "p4d", "p5"}
        assert worker["min_workers"] == 0 < worker["max_workers"] <= cluster_yaml["max_workers"]


def test_every_node_installs_this_checkout_and_mounts_the_storage_root(cluster_yaml):
    remote = next(r for r, local in cluster_yaml["file_mounts"].items() if local == ".")
    assert f"pip install --quiet -e {remote}" in cluster_yaml["setup_commands"]
    assert ".venv" in cluster_yaml["rsync_exclude"]
    mount = " ".join(cluster_yaml["initialization_commands"])
    assert "mount -t nfs4" in mount and STORAGE_ROOT in mount
    assert f"-v {STORAGE_ROOT}:{STORAGE_ROOT}" in " ".join(cluster_yaml["docker"]["run_options"])


@pytest.mark.parametrize("verb", ["launch", "resume"])
def test_a_bucket_uri_is_refused_as_the_storage_root(verb, tmp_path, capsys, monkeypatch):
    """The store needs a shared file system; a URI would silently become a local folder."""
    monkeypatch.chdir(tmp_path)
    target = space_yaml(tmp_path, "uri", 1, 1) if verb == "launch" else "uri"
    assert main([verb, str(target), "--store", "s3://bucket/tune-lowmem"]) == 2
    assert "--store: 's3://bucket/tune-lowmem' is not allowed" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["uri.yaml"] if verb == "launch" else [])


# ---- sweeps on a real multi-node Ray cluster on this machine --------------------------------
#
# One cluster for the module: a head and one worker node, 1 CPU each, each with its own custom
# resource ("head", "node_b"). The test that loses node_b runs last.

TUNE_LOWMEM = str(Path(sys.executable).with_name("tune-lowmem"))
SWEEP_SECONDS = 240  # a ceiling, far above the ~1 minute each sweep takes here


LR = {"schedule.lr_multiplier": {"type": "loguniform", "low": 0.25, "high": 4.0}}


def space_yaml(
    folder: Path,
    name: str,
    points: int,
    epochs: int,
    params: dict = LR,
    sampler: str = "random",
    **options,
) -> Path:
    """WRN-10-1 on 200 CIFAR-10 images, on the CPU: a trial trains in about a second an epoch."""
    space = {
        "name": name,
        "base": {
            "task": "wrn-cifar10",
            "device": "cpu",
            "model": {"depth": 10, "width": 1},
            "schedule": {"epochs": epochs, "batch_size": 20},
            "data": {"train_subset": 200, "val_size": 100, "test_subset": 100, "augment": False},
        },
        "params": params,
        "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
        "sampler": sampler,
        "sampler_seed": 0,
        "num_samples": points,
        "seeds_per_point": 1,
        "resources": {"cpu": 1, "gpu": 0},
        "max_concurrent": 2,
        "max_failures": 1,
        "baseline": False,  # trained and resumed apart (tests/test_search.py)
        **options,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def sweep_command(cluster: LocalCluster, verb: str, target: str | Path, root: Path) -> list[str]:
    return [TUNE_LOWMEM, verb, str(target), "--store", str(root), "--address", cluster.address]


def run_sweep(cluster: LocalCluster, verb: str, target: str | Path, root: Path) -> str:
    done = subprocess.run(
        sweep_command(cluster, verb, target, root),
        env=cluster.env,
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=SWEEP_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def tune_results(root: Path, sweep: str, trial_id: str) -> list[dict]:
    """Tune's own record of every result a trial reported (its result.json, one per line)."""
    path = sweep_folder(root, sweep) / trial_id / "result.json"
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def optuna_trials(root: Path, sweep: str) -> list:
    """What the searcher was told: the sweep's Optuna study, read from its journal."""
    return sweep_study(root, sweep).trials


def stored(root: Path, sweep: str) -> pd.DataFrame:
    return store.read_trials(root, sweep).set_index("trial_id")


@pytest.fixture(scope="module")
def cluster():
    folder = Path(
        tempfile.mkdtemp(prefix="rc-", dir="/tmp")
    )  # short: Ray's socket paths are bounded
    local = LocalCluster(folder)
    try:
        local.start_head()
        local.add_node("node_b")
        yield local
    finally:
        local.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_sweep_spreads_over_the_nodes(cluster, tmp_path):
    root = tmp_path / "storage"
    run_sweep(cluster, "launch", space_yaml(tmp_path, "spread", points=4, epochs=1), root)

    rows = stored(root, "spread")
    assert len(rows) == 4 and set(rows["status"]) == {"completed"}
    # Where each trial ran, as Ray's runtime context told the trial, against the GCS's node table.
    nodes = {cluster.nodes[name].node_id: name for name in ("head", "node_b")}
    placed = rows["node_id"].map(nodes)
    assert placed.notna().all(), rows["node_id"]
    assert set(placed) == {"head", "node_b"}, placed.value_counts()
    for trial_id, row in rows.iterrows():  # Tune's own per-result record agrees with the store
        assert {r["node_id"] for r in tune_results(root, "spread", trial_id)} == {row["node_id"]}


def launch_in_background(
    cluster, space: Path, root: Path, log_path: Path, **env: str
) -> subprocess.Popen:
    """The sweep's driver as a process of its own, for the tests that kill it or a node under
    it; its output goes to `log_path`; ``env`` adds to the cluster's environment."""
    with open(log_path, "w") as log:
        return subprocess.Popen(
            sweep_command(cluster, "launch", space, root),
            env={**cluster.env, **env},
            cwd=PROJECT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def wait_for(condition, what: str, driver: subprocess.Popen, every: float = 0.05):
    """Poll `condition` until it gives something, while the sweep's driver runs."""
    deadline = time.monotonic() + SWEEP_SECONDS
    while not (found := condition()):
        if driver.poll() is not None or time.monotonic() > deadline:
            raise TimeoutError(f"{what}: never seen while the sweep ran")
        time.sleep(every)
    return found


def hold_unstored(root: Path, sweep: str, find, driver: subprocess.Popen) -> dict:
    """Stop (SIGSTOP) the trial processes that `find` gives once none of their trials is stored
    after the stop: a trial stored in the moment between the look and the stop is let go on
    (SIGCONT) and the look repeated. A trial stores its row before it reports its last epoch,
    so a stopped trial that is not stored cannot be stored until it is let go."""
    while True:
        held = wait_for(find, "trials to hold", driver)
        signal_all(held, signal.SIGSTOP)
        if not set(held.values()) & set(store.trial_ids(root, sweep)):
            return held
        signal_all(held, signal.SIGCONT)


def past_first_epoch(root: Path, sweep: str) -> set[str]:
    """Trials not in the store whose second epoch checkpoint is saved, named in Tune's newest
    snapshot of its trials (what a resume restores; Tune takes one at its own period). A worker
    writes each checkpoint to the storage root as it reports, and trains on only once the driver
    has taken the report, so Tune knows of at least the first epoch of each of these."""
    saved = {
        p.parent.name
        for p in sweep_folder(root, sweep).glob("*/checkpoint_*")
        if p.name != "checkpoint_000000"
    }
    if not saved:
        return set()
    try:
        snapshot = set(tune_trials(sweep_folder(root, sweep)))
    except Exception:  # noqa: BLE001 - a snapshot being written: look again
        return set()
    return (saved & snapshot) - set(store.trial_ids(root, sweep))


def test_a_killed_driver_resumes_from_the_storage_root(cluster, tmp_path):
    root, sweep = tmp_path / "storage", "driverloss"
    space = space_yaml(tmp_path, sweep, points=4, epochs=3, resume_checkpoint_s=0)  # every epoch
    # Tune snapshotting every second (its own period, at least 10 s, can miss so short a sweep):
    # the trial killed in flight is one the snapshot knows, so resume continues it
    log = tmp_path / "launch.log"
    driver = launch_in_background(cluster, space, root, log, TUNE_GLOBAL_CHECKPOINT_S="1")
    try:
        # Kill it with a trial stored and another one training past its first epoch (so Tune's
        # experiment state knows it), which is held where it is (SIGSTOP) so that it cannot
        # finish in the moment before the cluster ends it.
        def stored_and_training() -> dict[tuple[int, int], str]:
            done, known = set(store.trial_ids(root, sweep)), past_first_epoch(root, sweep)
            training = {
                proc: trial
                for node in cluster.nodes.values()
                for proc, trial in trial_processes(node.process.pid, sweep).items()
                if trial in known
            }
            return training if done else {}

        held = hold_unstored(root, sweep, stored_and_training, driver)
        interrupted = set(held.values())
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    time.sleep(3)  # the cluster kills the dead driver's trial actors
    signal_all(held, signal.SIGKILL)  # any it has not killed yet
    before = stored(root, sweep)
    assert len(before) < 4, f"the driver was to be killed mid-sweep: {len(before)} of 4 stored"
    assert not interrupted & set(before.index), f"held {interrupted}, stored {set(before.index)}"

    output = run_sweep(cluster, "resume", sweep, root)

    after = stored(root, sweep)
    assert len(after) == 4 and set(after["status"]) == {"completed"}, output  # nothing lost
    assert interrupted <= set(after.index)
    for (
        trial_id,
        row,
    ) in before.iterrows():  # nothing repeated: stored trials were not trained again
        assert after.loc[trial_id, "finished_at"] == row["finished_at"]
        assert after.loc[trial_id, "node_id"] == row["node_id"]
    epochs = store.read_epochs(root, sweep)
    assert len(epochs) == 4 * 3 and not epochs.duplicated(["trial_id", "epoch"]).any()
    # The searcher was told each stored trial once and no failure. (A point asked in the second
    # before the kill, after Tune's last snapshot, can stay RUNNING in the journal, never trained.)
    told = [t.state.name for t in optuna_trials(root, sweep)]
    assert told.count("COMPLETE") == 4 and "FAIL" not in told, told


def test_out_of_memory_is_infeasible_and_told_not_retried(cluster, tmp_path):
    """A WRN-10-2e10 cannot even be built: the allocator refuses its first wide convolution
    (184 TB, beyond any address space, so nothing is ever touched). The searcher screens it,
    stores it as infeasible with the reason, and tells Optuna dominated values; no worker sees it."""
    root, sweep = tmp_path / "storage", "oom"
    params = {"model.width": {"type": "choice", "values": [1, 20_000_000_000]}}
    output = run_sweep(cluster, "launch", space_yaml(tmp_path, sweep, 2, 1, params, "grid"), root)

    rows = store.read_trials(root, sweep).set_index("config.model.width")
    assert rows.loc[1, "status"] == "completed"
    huge = rows.loc[20_000_000_000]
    assert huge["status"] == "infeasible" and huge["epochs_completed"] == 0, output
    assert "out of memory" in huge["failure_reason"]
    assert "can't allocate memory" in huge["failure_reason"]
    assert huge["trial_id"].startswith("infeasible-")
    assert (
        len(list(sweep_folder(root, sweep).glob("*/result.json"))) == 1
    )  # one Tune trial: width 1
    told = {t.params["model.width"]: t for t in optuna_trials(root, sweep)}
    assert told[20_000_000_000].state.name == "COMPLETE"
    assert told[20_000_000_000].values == [0.0, 1e9]  # the worst accuracy, the worst memory
    assert told[1].values[0] == pytest.approx(rows.loc[1, "metric.val_accuracy"])


def test_a_lost_worker_node_has_its_trial_retried_elsewhere(cluster, tmp_path):
    """Runs last: it takes node_b away from the module's cluster."""
    root, sweep = tmp_path / "storage", "nodeloss"
    node_b = cluster.nodes["node_b"].node_id
    space = space_yaml(tmp_path, sweep, points=3, epochs=4, resume_checkpoint_s=0)  # every epoch
    driver = launch_in_background(cluster, space, root, tmp_path / "launch.log")
    try:
        # A trial on node_b is past its first epoch's checkpoint, held there unstored (so it
        # cannot finish in the moment before): the machine goes away.
        def past_first_epoch_on_b() -> dict[tuple[int, int], str]:
            known = past_first_epoch(root, sweep)
            on_b = trial_processes(cluster.nodes["node_b"].process.pid, sweep)
            return {proc: trial for proc, trial in on_b.items() if trial in known}

        on_b = set(hold_unstored(root, sweep, past_first_epoch_on_b, driver).values())
        cluster.nodes["node_b"].lose()
        cluster.wait_until_dead("node_b")
        assert driver.wait(SWEEP_SECONDS) == 0, (tmp_path / "launch.log").read_text()[-3000:]
    finally:
        driver.kill()
        driver.wait()

    rows = stored(root, sweep)
    assert len(rows) == 3 and set(rows["status"]) == {"completed"}  # every trial, once
    assert len(on_b) == 1, f"held on node_b: {on_b}"
    (lost,) = on_b
    head = cluster.nodes["head"].node_id
    assert rows.loc[lost, "node_id"] == head  # finished where the cluster still had a node
    results = tune_results(root, sweep, lost)
    before = [r["epoch"] for r in results if r["node_id"] == node_b]
    after = [r["epoch"] for r in results if r["node_id"] == head]
    # Resumed from a checkpoint it saved on node_b, not from scratch. (Tune fetches a reported
    # checkpoint with a second call to the trial; a node lost between the two leaves Tune the
    # checkpoint before, and that epoch is trained again: its row is still stored once. Nor
    # does Tune's result log bound the resumed epoch: on a loaded machine it once held only
    # epoch 1 from node_b where the trial resumed at epoch 3, from node_b's epoch-2 checkpoint.)
    assert before and 1 < after[0] and after[-1] == 4
    epochs = store.read_epochs(root, sweep, lost)
    assert list(epochs["epoch"]) == [1, 2, 3, 4]
    # The searcher heard each point once, with its real result: the retry was not a failure.
    told = optuna_trials(root, sweep)
    assert [t.state.name for t in told] == ["COMPLETE"] * 3, [(t.number, t.state) for t in told]
