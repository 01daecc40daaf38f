"""The device check, on the CPU: its dry run end to end (every part but the CUDA comparisons),
its budget, and the parts it is built from (configurations, space, mispredicted task, test list)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tune_lowmem import store
from tune_lowmem.config import TrialConfig
from tune_lowmem.memory.share import trial_share
from tune_lowmem.plugins import techniques
from tune_lowmem.techniques.precision import PRECISIONS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_check
import gpu_check_task

# Imports refused, as on the device machine, which has none of these packages.
WITHOUT = """
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent on the device)")
sys.meta_path.insert(0, Absent())
"""


NO_CUDA = {"CUDA_VISIBLE_DEVICES": ""}  # the device check as on the device, here without CUDA
WITH_BENCHMARKS = (REPO, REPO / "benchmarks")  # the scripts import each other by module name


def run_python(
    *args: str,
    env: dict[str, str] | None = None,
    path: tuple[Path, ...] = (REPO,),
    timeout: int = 600,
) -> subprocess.CompletedProcess:
    """This Python in the repository, with `env` over ours and `path` as PYTHONPATH."""
    pythonpath = os.pathsep.join(map(str, path))
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env={**os.environ, **(env or {}), "PYTHONPATH": pythonpath},
        capture_output=True,
        check=False,
        text=True,
        timeout=timeout,
    )


def check(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The device check run as on the device (no CUDA here), its report."""
    done = run_python("benchmarks/gpu_check.py", "--out", str(tmp_path), *args, env=NO_CUDA)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    return done, report


@pytest.mark.slow
def test_the_dry_run_runs_every_part_but_the_cuda_comparisons(tmp_path):
    done, report = check(tmp_path, "--size", "quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    outcomes = {p["part"]: p["outcome"] for p in report["parts"]}
    assert list(outcomes) == list(gpu_check.PARTS)
    assert outcomes["workspaces"] == outcomes["context"] == gpu_check.NO_CUDA
    assert outcomes["tests"].startswith(gpu_check.NO_CUDA)
    ran = ("run_peak", "memory", "step", "packing", "wrn")
    assert all(outcomes[p] == "ok" for p in ran), outcomes
    parts = {p["part"]: p for p in report["parts"]}
    memory = parts["memory"]["rows"]
    assert {row[0].split()[0] for row in memory} == {"wrn", "dct"}
    assert all(row[1] > 0 and row[2] > 0 for row in memory)
    assert all(row[5] > 0 and row[7] == "ok" for row in memory)  # model and optimizer held
    (peak,) = parts["run_peak"]["rows"]  # on the CPU: the allocator's replay of the whole run
    assert peak[0].startswith("rung 7") and peak[3] > 0 and peak[6] == "ok", peak
    assert not (tmp_path / "cuda_calibration.json").exists()  # nothing measured on a card
    packed = {row[0]: row for row in parts["packing"]["rows"]}
    assert set(packed) == set(gpu_check.SIZES["quick"].packing_widths)
    assert all(row[1] == "completed" and row[7] == "" for row in packed.values())
    (epoch,) = parts["wrn"]["rows"]
    assert epoch[0] == 1 and 0 <= epoch[4] <= 1
    collected = {row[0]: row[2] for row in parts["tests"]["rows"]}
    assert set(collected) == set(gpu_check.GPU_TEST_MODULES) and all(collected.values())
    log = (tmp_path / "gpu_check.log").read_text()
    assert log.startswith("gpu_check: python") and f"torch {report['versions']['torch']}" in log
    assert "summary" in log and log.index("[run_peak]") < log.index("[tests]")


def test_no_part_starts_after_the_budget_and_a_failing_part_does_not_stop_the_next(tmp_path):
    done, report = check(tmp_path, "--size", "quick", "--parts", "workspaces,wrn", "--budget", "0")
    assert done.returncode == 0, done.stderr
    assert [p["outcome"] for p in report["parts"]] == ["not started: budget of 0 s spent"] * 2
    assert report["versions"]["gpu"] == gpu_check.NO_CUDA
    failing = run_python(
        *["benchmarks/gpu_check.py", "--out", str(tmp_path / "again")],
        *["--size", "quick", "--parts", "wrn,workspaces"],
        env={**NO_CUDA, "TUNE_LOWMEM_DATA": str(tmp_path / "nothing")},
    )
    report = json.loads((tmp_path / "again" / "gpu_check.json").read_text())
    wrn, workspaces = report["parts"]
    assert failing.returncode == 1  # a part failed
    assert wrn["outcome"].startswith("failed: FileNotFoundError: data.root")
    assert "Traceback" in wrn["traceback"] and "Traceback" in failing.stdout
    assert workspaces["outcome"] == gpu_check.NO_CUDA


def test_the_gpu_tests_are_every_marked_module_and_import_without_ray_and_its_kin():
    marked = sorted(
        f"tests/{path.name}"
        for path in (REPO / "tests").glob("test_*.py")
        if re.search(r"pytest\.mark\.gpu|pytestmark = pytest\.mark\.gpu", path.read_text())
    )
    assert sorted(gpu_check.GPU_TEST_MODULES) == marked
    modules = [m.removesuffix(".py").replace("/", ".") for m in gpu_check.GPU_TEST_MODULES]
    script = WITHOUT.format(absent=set(gpu_check.ABSENT_ON_DEVICE)) + "".join(
        f"import {m}\n" for m in ["tests.conftest", *modules, "gpu_check", "gpu_check_task"]
    )
    done = run_python(
        "-c",
        script + "gpu_check.packing_part; print('imported')",
        path=WITH_BENCHMARKS,
        timeout=300,
    )
    assert done.stdout.strip() == "imported", done.stderr[-3000:]


def test_memory_configurations_cover_both_tasks_every_technique_and_precision():
    bases = {"wrn": gpu_check.SIZES["full"].wrn, "dct": gpu_check.SIZES["full"].dct}
    configs = [
        gpu_check.config_of(bases[task], fields, "cuda")
        for _, task, fields in gpu_check.MEMORY_CONFIGS
    ]
    assert len(configs) >= 15
    assert {c.task for c in configs} == {"wrn-cifar10", "dct-iwslt14"}
    assert {c.precision for c in configs} == set(PRECISIONS)
    for technique in techniques():
        if technique.NAME != "precision":  # always bound; its values are checked above
            assert any(technique.enabled(c) for c in configs), technique.NAME
    assert all(c.device == "cuda" for c in configs)
    quarter = [c for c in configs if c.microbatch.size is not None]
    assert {c.microbatch.size for c in quarter} == {128 // 4, 4000 // 4}


def test_the_step_configurations_turn_each_technique_on_alone():
    base = gpu_check.SIZES["full"].step
    configs = [gpu_check.config_of(base, fields, "cuda") for _, fields in gpu_check.STEP_CONFIGS]
    enabled = [
        {t.NAME for t in techniques() if t.NAME != "precision" and t.enabled(c)} for c in configs
    ]
    assert configs[0].model.depth == 28 and configs[0].model.width == 2
    assert enabled[0] == set() and all(len(e) <= 1 for e in enabled)
    adams = {"adam_state"}  # the WRN's optimizer is SGD
    # what a process takes once, as CUDA starts (the workspaces): not one process's steps apart
    environment = {t.NAME for t in techniques() if t.ENVIRONMENT}
    others = {t.NAME for t in techniques() if t.NAME != "precision"} - adams - environment
    assert set().union(*enabled) == others


def test_the_packing_plan_asks_for_gpu_shares_the_mispredicted_point_outgrows():
    size = gpu_check.SIZES["full"]
    plan = gpu_check.packing_plan(size, 80_000.0)
    assert size.packing_widths[0] == gpu_check_task.HOG_HIDDEN
    trials = [gpu_check_task.packing_trial(plan, w) for w in size.packing_widths]
    assert all(r.gpu == "auto" and c.device == "auto" for c, r in trials)
    shares = [trial_share(resources, config) for config, resources in trials]
    assert all(0 < share < 1 for share in shares)
    assert shares[1:] == sorted(shares[1:])  # wider points ask for more
    assert sum(shares) <= 1  # they fit on one card together
    hog = trials[0][0].model.hog_mb
    assert hog > shares[0] * 80_000  # more than its whole share of the card: it must fail


def test_a_packed_trial_runs_and_stores_its_outcome_without_ray_or_optuna(tmp_path):
    plan = gpu_check.packing_plan(gpu_check.SIZES["quick"], gpu_check.NOMINAL_CARD_MB)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    run = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    script = WITHOUT.format(absent=set(gpu_check.ABSENT_ON_DEVICE)) + run
    arguments = [
        str(gpu_check.TASK_SCRIPT),
        str(tmp_path / "plan.json"),
        "16",
        str(tmp_path / "store"),
    ]
    done = run_python("-c", script, *arguments, path=WITH_BENCHMARKS, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = store.read_trials(tmp_path / "store", gpu_check_task.SWEEP).to_dict("records")
    assert (row["trial_id"], row["status"], row["config.model.hidden"]) == (
        "width-16",
        "completed",
        16,
    )
    assert row["memory.predicted_total_mb"] > 0 and row["epochs_completed"] == 2
    assert gpu_check.text_of(row["failure_reason"]) == ""


def test_the_mispredicted_point_holds_memory_only_its_real_model_has():
    import torch

    def config(hidden: int) -> TrialConfig:
        task = "benchmarks.gpu_check_task:HungryBlobs"
        return TrialConfig.from_dict({"task": task, "model.hidden": hidden, "model.hog_mb": 1})

    task = gpu_check_task.HungryBlobs
    real = task(config(gpu_check_task.HOG_HIDDEN), torch.device("cpu")).build_model()
    seen = task(config(gpu_check_task.HOG_HIDDEN), torch.device("cpu"), synthetic=True)
    assert real.hog.nbytes == 10**6 and not hasattr(seen.build_model(), "hog")
    assert not hasattr(task(config(64), torch.device("cpu")).build_model(), "hog")


def test_a_completed_trial_s_missing_reason_reads_as_empty_text(tmp_path):
    for trial_id, status, reason in (("a", "completed", None), ("b", "infeasible", "out of mem")):
        record = store.TrialRecord(
            sweep="s", trial_id=trial_id, status=status, config={}, failure_reason=reason
        )
        store.write_trial(tmp_path, record)
    rows = store.read_trials(tmp_path, "s").set_index("trial_id")["failure_reason"]
    completed = rows["a"]
    assert completed is None or (isinstance(completed, float) and math.isnan(completed))
    assert gpu_check.text_of(completed)[:60] == ""
    assert gpu_check.text_of(rows["b"]) == "out of mem"


@pytest.mark.parametrize(
    ("predicted", "measured", "error"), [(105.0, 100.0, 0.05), (90.0, 100.0, 0.1)]
)
def test_errors_and_verdicts(predicted, measured, error):
    assert gpu_check.relative_error(predicted, measured) == pytest.approx(error)
    assert gpu_check.verdict(error, 0.05) == ("ok" if error <= 0.05 + 1e-12 else "OVER")


def test_the_table_aligns_columns_and_rounds_floats():
    text = gpu_check.table(["a", "bb"], [["x", 1.234], ["long", 2.0]])
    assert text.splitlines() == ["a     bb  ", "----  ----", "x     1.23", "long  2.00"]
