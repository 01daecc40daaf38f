"""A quiet terminal: every line `launch` and `profile` print is the project's own or a warning it
chose to show; nothing of torch's profiler (kineto's ``USDT: ... profiler_start`` at every
workspace probe and allocator measurement, its ``gpuGetDeviceCount failed`` without a GPU)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tune_lowmem.cli import main

CLI = str(Path(sys.executable).with_name("tune-lowmem"))
PROGRESS = re.compile(r"\[\d\d:\d\d:\d\d\] ")  # `search.progress.say`
# Warnings the project shows as they come: Ray's notice, when it starts a local cluster, that the
# cluster requires a token (security: the user may want it off, as it says how)
CHOSEN_WARNINGS = (
    re.compile(r"\S+ \S+\s+WARNING authentication_token_setup\.py:\d+ -- Token authentication"),
)
PROFILE = ["--set", "model.depth=10", "--set", "model.width=1", "--set", "schedule.batch_size=20"]


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CLI, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, **env},
    )


def foreign(lines: list[str], own) -> list[str]:
    """The lines that are neither the project's own (`own`) nor a warning it chose to show."""
    return [
        line
        for line in lines
        if line.strip() and not own(line) and not any(w.match(line) for w in CHOSEN_WARNINGS)
    ]


def shapes(text: str) -> list[str]:
    """Each line with its numbers as ``#`` and its runs of spaces as one: a measurement's figures
    (a time's, a measured step's) differ from run to run, and the columns they align with."""
    return [re.sub(r" +", " ", re.sub(r"\d+(?:\.\d+)?", "#", line)) for line in text.splitlines()]


def test_profile_prints_its_own_lines_only_with_and_without_a_gpu(tmp_path):
    """What the command prints in a process of its own (every file descriptor: C++ libraries'
    logs included) is what it prints through Python here, line for line (figures aside); a CUDA
    trial predicted on a machine without a GPU, and a measured CPU one, alike."""
    for args in (
        ["profile", "--set", "device=cuda", *PROFILE],
        ["profile", "--measure", *PROFILE],
    ):
        done = run_cli(*args, CUDA_VISIBLE_DEVICES="")
        assert done.returncode == 0, done.stderr
        printed, said = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
            assert main(args) == 0
        assert shapes(done.stdout) == shapes(printed.getvalue())
        assert shapes(done.stderr) == shapes(said.getvalue())  # e.g. its thread count


def test_launch_prints_progress_and_its_outcome_only(tmp_path):
    space = {
        "name": "quiet",
        "base": {
            "device": "cpu",
            "model": {"depth": 10, "width": 1},
            "schedule": {"epochs": 1, "batch_size": 20},
            "data": {"train_subset": 100, "val_size": 40, "test_subset": 40},
        },
        "params": {"sparsity.density": {"type": "choice", "values": [0.5, 1.0]}},
        "objectives": {"val_accuracy": "maximize", "memory.predicted_run_peak_mb": "minimize"},
        "num_samples": 2,
        "sampler": "grid",
        "max_concurrent": 2,
    }
    path = tmp_path / "quiet.yaml"
    path.write_text(yaml.safe_dump(space))
    done = run_cli("launch", str(path), "--store", str(tmp_path / "store"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("sweep quiet done:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("store: "))
    outcome = set(lines[start : end + 1])  # `commands.print_outcome`: the front and the store
    assert foreign(lines, lambda line: PROGRESS.match(line) or line in outcome) == []
    assert foreign(done.stderr.splitlines(), lambda line: False) == []
    assert sum(bool(PROGRESS.match(line)) for line in lines) >= 5  # the progress it shows
