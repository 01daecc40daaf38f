"""The CUDA libraries' workspaces as a trial's setting: checked in one line before anything runs,
searchable, set in the trial's process before CUDA starts, counted by the prediction."""

from __future__ import annotations

import contextlib
import io
import os

import pytest

from tests.conftest import tiny_wrn_config
from tune_lowmem.cli import main
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.memory.cuda import CudaTarget
from tune_lowmem.memory.predict import predict
from tune_lowmem.space import SearchSpace
from tune_lowmem.train import apply_environment, trial_environment

SPACE = {
    "name": "workspaces",
    "base": {"device": "auto", "model": {"depth": 10, "width": 1}},
    "params": {
        "cuda_workspace.cublas": {"type": "choice", "values": [":4096:8", ":16:8"]},
        "cuda_workspace.cudnn_limit_mb": {"type": "choice", "values": [0, 64, None]},
    },
    "objectives": {"val_accuracy": "maximize", "memory.predicted_run_peak_mb": "minimize"},
    "num_samples": 2,
    "resources": {"cpu": 1, "gpu": "auto", "gpu_memory_mb": 80_000, "gpu_capability": "9.0"},
}


@pytest.mark.parametrize(
    ("flat", "message"),
    [
        (
            {"cuda_workspace.cublas": ":4096"},
            "cuda_workspace.cublas: ':4096' is not allowed; CUBLAS_WORKSPACE_CONFIG's form",
        ),
        ({"cuda_workspace.cublas": "4096:8"}, "cuda_workspace.cublas: '4096:8' is not allowed"),
        (
            {"cuda_workspace.cudnn_limit_mb": -1},
            "cuda_workspace.cudnn_limit_mb: -1 is not allowed; an integer >= 0 is required",
        ),
        ({"cuda_workspace.cudnn_limit_mb": 1.5}, "cuda_workspace.cudnn_limit_mb: 1.5"),
    ],
)
def test_a_value_torch_does_not_take_is_one_line_before_anything_runs(flat, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        TrialConfig.from_dict(flat)
    args = [f"--set={key}={value}" for key, value in flat.items()]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["profile", *args]) == 2
    (line,) = err.getvalue().strip().splitlines()
    assert line.startswith(f"tune-lowmem profile: error: {message.split(':')[0]}:")


def test_the_settings_are_the_trial_s_environment_and_set_before_cuda_starts(monkeypatch):
    for name in ("CUBLAS_WORKSPACE_CONFIG", "CUDNN_CONV_WSCAP_DBG"):
        monkeypatch.setenv(name, "")  # so that what the test sets is undone after it
        monkeypatch.delenv(name)
    assert trial_environment(tiny_wrn_config()) == {}  # torch's defaults: nothing set
    config = tiny_wrn_config(
        **{"cuda_workspace.cublas": ":16:8", "cuda_workspace.cudnn_limit_mb": 0}
    )
    expected = {"CUBLAS_WORKSPACE_CONFIG": ":16:8", "CUDNN_CONV_WSCAP_DBG": "0"}
    assert trial_environment(config) == expected
    assert apply_environment(config) == expected
    assert {k: os.environ[k] for k in expected} == expected


def test_a_space_searches_them_on_a_gpu_and_each_trial_takes_its_own_process():
    from tune_lowmem.search.driver import searches_environment

    space = SearchSpace.from_dict(SPACE)
    assert searches_environment(space)
    learning_rate = {"schedule.lr_multiplier": {"type": "uniform", "low": 0.5, "high": 2.0}}
    fixed = {**SPACE, "base": {**SPACE["base"], "cuda_workspace.cublas": ":16:8"}}
    assert not searches_environment(SearchSpace.from_dict({**fixed, "params": learning_rate}))
    config = space.trial_config(
        {"cuda_workspace.cublas": ":16:8", "cuda_workspace.cudnn_limit_mb": 64, "seed": 0}
    )
    assert config.cuda_workspace.cublas == ":16:8" and config.cuda_workspace.cudnn_limit_mb == 64


def test_a_cpu_space_that_searches_them_is_refused():
    cpu = {**SPACE, "base": {**SPACE["base"], "device": "cpu"}, "resources": {"cpu": 1}}
    with pytest.raises(ConfigError, match="cuda_workspace.cublas: searched with device cpu"):
        SearchSpace.from_dict(cpu)


def test_the_prediction_counts_the_workspaces_the_settings_give():
    target = CudaTarget(capability=(9, 0), version=(2, 14))
    small = tiny_wrn_config(device="cuda", **{"cuda_workspace.cublas": ":16:8"})
    default = tiny_wrn_config(device="cuda")
    # the target the trial's own environment gives it, on this machine's rules
    from tune_lowmem.memory.cuda import trial_target

    assert trial_target(small).cublas == ":16:8"
    peak = predict(default, target=target).cuda
    smaller = predict(small, target=trial_target(small)).cuda
    assert peak.blas_bytes - smaller.blas_bytes == 2 * (32 * 2**20 - 128 * 1024)
