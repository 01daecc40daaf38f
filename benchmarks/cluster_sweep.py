"""A long sweep over a three-node Ray cluster on this machine, with a worker node lost and the
driver killed on the way: is every (point, seed) stored once at the end?

The cluster is the test suite's (`tests/ray_cluster.py`: a head and two worker nodes, each its
own `ray start`, one CPU each). The sweep is `tune-lowmem launch` of the tiny user task
(`tests/tiny_task.py`), TPE, three trials at a time, as its own process. Once a third of the
points are stored, node ``node_c`` is lost (its processes stopped, its raylet SIGKILLed); once
two thirds are, the driver is SIGKILLed; then `tune-lowmem resume` finishes the sweep.

    nice -n 10 .venv/bin/python benchmarks/cluster_sweep.py --points 500

Prints the outcome and writes it to benchmarks/results/cluster_sweep.json (``--out``), with the
machine's state (`machine.Watch`: its wall times are the three nodes', which share this
machine's cores, so a loaded machine's are refused unless ``--allow-load``, then labelled).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the cluster helper and the tiny task live in tests/
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import Watch, add_arguments, describe
from sweep_scale import space_dict

from tests.ray_cluster import LocalCluster
from tune_lowmem import store
from tune_lowmem.search import sweep_study

SWEEP = "cluster"
NODES = 3  # the head and two workers, one CPU each
CLI = str(Path(sys.executable).with_name("tune-lowmem"))


def space(points: int) -> dict:
    """The tiny task's space of `sweep_scale`, three trials at a time, a failed worker retried."""
    return {**space_dict(points, 3, "tpe"), "name": SWEEP, "max_failures": 2}


def stored(root: Path) -> int:
    try:
        return len(store.trial_ids(root, SWEEP))
    except FileNotFoundError:
        return 0


def wait_until(root: Path, count: int, driver: subprocess.Popen, log: Path) -> float:
    started = time.monotonic()
    while stored(root) < count:
        if driver.poll() is not None:
            raise RuntimeError(f"the driver ended early:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=500)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cluster_sweep.json")
    parser.add_argument(
        "--keep", action="store_true", help="keep the store and logs (printed) for inspection"
    )
    add_arguments(parser)
    args = parser.parse_args()
    watch = Watch.start(min(NODES, os.cpu_count() or 1), args.allow_load)
    folder = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))  # short: Ray's socket paths
    cluster = LocalCluster(folder / "ray", env={"PYTHONPATH": str(ROOT)})
    root = folder / "storage"
    result: dict = {"command": "benchmarks/cluster_sweep.py " + " ".join(sys.argv[1:])}
    try:
        cluster.start_head()
        cluster.add_node("node_b")
        cluster.add_node("node_c")
        nodes = {cluster.nodes[n].node_id: n for n in ("head", "node_b", "node_c")}
        path = folder / "cluster.yaml"
        path.write_text(yaml.safe_dump(space(args.points), sort_keys=False))
        command = [CLI, "launch", str(path), "--store", str(root), "--address", cluster.address]
        log = folder / "launch.log"
        started = time.monotonic()
        with open(log, "w") as handle:
            driver = subprocess.Popen(
                command, env=cluster.env, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT
            )
        try:
            wait_until(root, args.points // 3, driver, log)
            result["stored_when_node_c_lost"] = stored(root)
            cluster.nodes["node_c"].lose()
            cluster.wait_until_dead("node_c")
            wait_until(root, 2 * args.points // 3, driver, log)
            result["stored_when_driver_killed"] = stored(root)
        finally:
            driver.send_signal(signal.SIGKILL)
            driver.wait()
        result["first_driver_s"] = round(time.monotonic() - started, 1)
        resumed = time.monotonic()
        done = subprocess.run(
            [CLI, "resume", SWEEP, "--store", str(root), "--address", cluster.address],
            env=cluster.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        (folder / "resume.log").write_text(done.stdout + done.stderr)
        result["resume_exit_status"] = done.returncode
        result["resume_s"] = round(time.monotonic() - resumed, 1)
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-3000:])
        rows = store.read_trials(root, SWEEP)
        epochs = store.read_epochs(root, SWEEP)
        told = [t.state.name for t in sweep_study(root, SWEEP).trials]
        result.update(
            points=args.points,
            rows=len(rows),
            statuses=rows["status"].value_counts().to_dict(),
            duplicated_point_seed=int(rows.duplicated(["point", "config.seed"]).sum()),
            distinct_point_seed=len(rows.drop_duplicates(["point", "config.seed"])),
            duplicated_epoch_rows=int(epochs.duplicated(["trial_id", "epoch"]).sum()),
            rows_by_node=rows["node_id"].map(nodes).fillna("none").value_counts().to_dict(),
            optuna_told={state: told.count(state) for state in sorted(set(told))},
            store_files={
                t: len(list((root / t / f"sweep={SWEEP}").glob("*.parquet")))
                for t in ("trials", "epochs")
            },
        )
        result["every_point_seed_once"] = (
            result["duplicated_point_seed"] == 0 and result["distinct_point_seed"] == args.points
        )
    finally:
        cluster.shutdown()
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    result["machine"] = watch.stop()
    print(describe(result["machine"]))
    for key, value in result.items():
        print(f"{key}: {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
