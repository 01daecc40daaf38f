"""The prepared GPU check, on the CPU: it starts and says there is no GPU; what it runs on a GPU
is built from parts checked here (its configurations, its space, its mispredicted task, its table)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tune_lowmem.config import TrialConfig
from tune_lowmem.memory.share import trial_share
from tune_lowmem.plugins import techniques
from tune_lowmem.space import SearchSpace
from tune_lowmem.techniques.precision import PRECISIONS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_check
import gpu_check_task


def test_without_cuda_it_says_so_in_one_line_and_exits_0():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "gpu_check: no CUDA device on this machine; nothing was checked"
    ]


def test_memory_configurations_cover_both_tasks_every_technique_and_precision():
    configs = [gpu_check.config_of(base, fields) for _, base, fields in gpu_check.MEMORY_CONFIGS]
    assert len(configs) >= 12
    assert {c.task for c in configs} == {"wrn-cifar10", "dct-iwslt14"}
    assert {c.precision for c in configs} == set(PRECISIONS)
    for technique in techniques():
        if technique.NAME != "precision":  # always bound; its values are checked above
            assert any(technique.enabled(c) for c in configs), technique.NAME
    assert all(c.device == "cuda" for c in configs)


def test_the_step_configurations_turn_each_technique_on_alone():
    base = gpu_check.config_of({**gpu_check.WRN, "model.depth": 28}, {})
    enabled = [
        {
            t.NAME
            for t in techniques()
            if t.NAME != "precision"
            and t.enabled(gpu_check.config_of({**gpu_check.WRN, "model.depth": 28}, fields))
        }
        for _, fields in gpu_check.STEP_CONFIGS
    ]
    assert base.model.depth == 28 and base.model.width == 2
    assert enabled[0] == set() and all(len(e) <= 1 for e in enabled)
    adams = {"adam_state"}  # the WRN's optimizer is SGD
    assert set().union(*enabled) == {t.NAME for t in techniques() if t.NAME != "precision"} - adams


def test_the_packing_space_is_valid_and_asks_for_gpu_shares(tmp_path):
    text = gpu_check.PACKING_SPACE.format(widths="1000, 1024", card_mb=80_000.0)
    (tmp_path / "space.yaml").write_text(text)
    space = SearchSpace.load(tmp_path / "space.yaml")
    assert space.resources.gpu == "auto"
    assert 0 < space.resources.gpu_share(100.0) < 1
    assert gpu_check_task.HOG_HIDDEN in gpu_check.PACKING_WIDTHS
    shares = [
        trial_share(space.resources, space.trial_config({"model.hidden": w})) for w in (1000, 1024)
    ]
    assert 0 < shares[0] <= shares[1] < 1  # the plug-in task's shares, as the trials are held to


def test_the_mispredicted_point_holds_memory_only_its_real_model_has(monkeypatch):
    import torch

    monkeypatch.setattr(gpu_check_task, "HOG_MB", 1)
    config = TrialConfig.from_dict(
        {"task": "benchmarks.gpu_check_task:HungryBlobs", "model.hidden": gpu_check_task.HOG_HIDDEN}
    )
    task = gpu_check_task.HungryBlobs
    real = task(config, torch.device("cpu")).build_model()
    seen = task(config, torch.device("cpu"), synthetic=True).build_model()
    assert real.hog.nbytes == 10**6 and not hasattr(seen, "hog")
    other = TrialConfig.from_dict(
        {"task": "benchmarks.gpu_check_task:HungryBlobs", "model.hidden": 64}
    )
    assert not hasattr(task(other, torch.device("cpu")).build_model(), "hog")


@pytest.mark.parametrize(
    ("predicted", "measured", "error"), [(105.0, 100.0, 0.05), (90.0, 100.0, 0.1)]
)
def test_errors_and_verdicts(predicted, measured, error):
    assert gpu_check.relative_error(predicted, measured) == pytest.approx(error)
    assert gpu_check.verdict(error, 0.05) == ("ok" if error <= 0.05 + 1e-12 else "OVER")


def test_the_table_aligns_columns_and_rounds_floats():
    text = gpu_check.table(["a", "bb"], [["x", 1.234], ["long", 2.0]])
    assert text.splitlines() == ["a     bb  ", "----  ----", "x     1.23", "long  2.00"]
