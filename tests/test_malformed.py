"""Every malformed input a user can type is refused in one line, exit status 2, before anything
runs: no Ray cluster started or joined, no store, journal or folder created or changed.

Each case is a command line run in-process (`cli.main`) in an empty working directory that
holds only the case's input files; `ray.init` is replaced by a function that fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tune_lowmem import cli
from tune_lowmem.space import SearchSpace
from tune_lowmem.store import TrialRecord, write_trial

ROOT = Path(__file__).resolve().parents[1]
NO_CUDA = not torch.cuda.is_available()

GOOD_SPACE = {
    "name": "ok",
    "base": {"device": "cpu", "model": {"depth": 10, "width": 1}, "schedule.batch_size": 20},
    "params": {
        "precision": {"type": "choice", "values": ["fp32", "bf16"]},
        "sparsity.density": {"type": "uniform", "low": 0.1, "high": 1.0},
    },
    "objectives": {"val_accuracy": "maximize", "memory.predicted_total_mb": "minimize"},
    "num_samples": 2,
}


def space(**changes) -> str:
    """GOOD_SPACE as YAML, with top-level keys replaced; ``base__x`` / ``param__x`` change
    one base value / one param (dots written as double underscores)."""
    values = {**GOOD_SPACE, "base": dict(GOOD_SPACE["base"]), "params": dict(GOOD_SPACE["params"])}
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if section in ("base", "param"):
            values["base" if section == "base" else "params"][name.replace("__", ".")] = value
        else:
            values[key] = value
    return yaml.safe_dump(values, sort_keys=False)


def launch(text: str | bytes, *flags: str) -> tuple[dict[str, str | bytes], list[str]]:
    return {"space.yaml": text}, ["launch", "space.yaml", "--store", "store", *flags]


def command(*argv: str, **files: str | bytes) -> tuple[dict[str, str | bytes], list[str]]:
    return {name.replace("__", "."): text for name, text in files.items()}, list(argv)


GOOD = space()
# case -> ((files, argv), text the one-line error must contain: the field, flag or file)
CASES = {
    # ---- search-space files: YAML itself ----
    "yaml syntax error": (
        launch("name: ok\nbase: {device: cpu\n"),
        "space.yaml: not valid YAML: line 3, column 1",
    ),
    "yaml bad indentation": (launch("name: ok\n  base: 1\n"), "space.yaml: not valid YAML: line 2"),
    "yaml duplicate key": (
        launch(GOOD + "num_samples: 3\n"),
        "the key 'num_samples' repeats the one on line",
    ),
    "yaml duplicate nested key": (
        launch(GOOD.replace("  device: cpu\n", "  device: cpu\n  device: auto\n")),
        "the key 'device' repeats",
    ),
    "yaml not UTF-8": (
        launch(GOOD.encode() + b"# caf\xe9\n"),
        "space.yaml: not UTF-8 text (byte 0xe9",
    ),
    "yaml nested too deeply (lists)": (
        launch("name: ok\nbase: " + "[" * 50_000 + "]" * 50_000 + "\n"),
        "space.yaml: not allowed: values nested too deeply to read",
    ),
    "yaml nested too deeply (mappings)": (
        launch("name: ok\nbase: " + "{a: " * 50_000 + "1" + "}" * 50_000 + "\n"),
        "space.yaml: not allowed: values nested too deeply to read",
    ),
    "yaml self-referencing anchor": (
        launch(GOOD + "description: &a [*a]\n"),
        "refers to its own anchor",
    ),
    "yaml non-string key": (
        launch(GOOD + "1: one\n"),
        "the key 1 is not allowed; keys must be text",
    ),
    "yaml list key": (launch(GOOD + "? [a]\n: 2\n"), "keys must be text"),
    "yaml empty file": (launch(""), "space.yaml: a YAML mapping"),
    "yaml top-level list": (launch("- name\n- base\n"), "space.yaml: a YAML mapping"),
    "space file missing": (
        command("launch", "nowhere.yaml", "--store", "store"),
        "nowhere.yaml: no such",
    ),
    # ---- search-space files: fields ----
    "unknown top key": (launch(space(sampler_seeds=1)), "sampler_seeds: unknown key"),
    "empty name": (launch(space(name="")), "name: '' is not allowed"),
    "name with a slash": (launch(space(name="a/b")), "name: 'a/b' is not allowed"),
    "scalar for choice values": (
        launch(space(param__precision={"type": "choice", "values": "fp32"})),
        "params.precision.values",
    ),
    "scalar for a list field": (
        launch(space(base__schedule__milestones=0.5)),
        "base.schedule.milestones: 0.5 is not allowed; a list",
    ),
    "bool for an int field": (
        launch(space(base__schedule__epochs=True)),
        "base.schedule.epochs: True is not allowed; an integer",
    ),
    "int beyond int64": (
        launch(space(base__schedule__epochs=2**64)),
        "base.schedule.epochs: 18446744073709551616",
    ),
    "number for a path": (
        launch(space(base__data__root=5)),
        "base.data.root: 5 is not allowed; text",
    ),
    "text for a bool": (
        launch(space(base__data__augment="yes")),
        "base.data.augment: 'yes' is not allowed; true or false",
    ),
    "number for a choice string": (
        launch(space(base__precision=16)),
        "base.precision: 16 is not allowed",
    ),
    "unknown device": (
        launch(space(base__device="tpu")),
        "base.device: 'tpu' is not allowed; allowed: auto, cpu, cuda",
    ),
    "label count CIFAR-10 lacks": (
        launch(space(base__model__num_classes=100)),
        "base.model.num_classes: 100 is not allowed",
    ),
    "choice value that never runs": (
        launch(space(param__precision={"type": "choice", "values": ["fp32", "fp8"]})),
        "params.precision: 'fp8' gives no valid config",
    ),
    "choices equal as numbers": (
        launch(space(param__model__width={"type": "choice", "values": [1, 1.0]})),
        "params.model.width.values: 1 and 1.0 are the same choice",
    ),
    "choices true and 1": (
        launch(space(param__data__augment={"type": "choice", "values": [1, True]})),
        "params.data.augment.values: 1 and True",
    ),
    "nan choice": (
        launch(space(param__sparsity__density={"type": "choice", "values": [0.5, float("nan")]})),
        "params.sparsity.density.values: nan",
    ),
    "int range of absurdly many values": (
        launch(space(param__schedule__epochs={"type": "int", "low": 1, "high": 10**9})),
        "params.schedule.epochs.high",
    ),
    "float step of absurdly many values": (
        launch(
            space(
                param__sparsity__density={"type": "uniform", "low": 0.1, "high": 1.0, "step": 1e-8}
            )
        ),
        "params.sparsity.density.step",
    ),
    "int range with no values": (
        launch(space(param__model__width={"type": "int", "low": 2, "high": 2})),
        "params.model.width.high",
    ),
    "step larger than the range": (
        launch(space(param__model__width={"type": "int", "low": 1, "high": 2, "step": 5})),
        "params.model.width.step",
    ),
    "step of zero": (
        launch(space(param__model__width={"type": "int", "low": 1, "high": 3, "step": 0})),
        "params.model.width.step",
    ),
    "float bounds for int": (
        launch(space(param__model__width={"type": "int", "low": 1.5, "high": 3})),
        "params.model.width.low",
    ),
    "loguniform from zero": (
        launch(space(param__schedule__lr_multiplier={"type": "loguniform", "low": 0, "high": 2})),
        "params.schedule.lr_multiplier.low",
    ),
    "unknown param type": (
        launch(space(param__model__width={"type": "normal", "low": 1, "high": 3})),
        "params.model.width.type",
    ),
    "seed searched": (
        launch(space(param__seed={"type": "int", "low": 0, "high": 3})),
        "params.seed: not searchable",
    ),
    "condition never true on a range": (
        launch(space(conditions={"sparsity.density": "precision == 'fp16'"})),
        "conditions.sparsity.density",
    ),
    "condition beyond a range": (
        launch(
            space(
                param__schedule__lr_multiplier={"type": "uniform", "low": 0.5, "high": 2},
                conditions={"schedule.lr_multiplier": "sparsity.density > 1.5"},
            )
        ),
        "conditions.schedule.lr_multiplier: 'sparsity.density > 1.5' can never hold",
    ),
    "condition with bad YAML": (
        launch(
            space(
                param__schedule__lr_multiplier={"type": "uniform", "low": 0.5, "high": 2},
                conditions={"schedule.lr_multiplier": "precision in [fp32"},
            )
        ),
        "conditions.schedule.lr_multiplier: not valid YAML",
    ),
    "condition on a later param": (
        launch(space(conditions={"precision": "sparsity.density < 1"})),
        "conditions.precision",
    ),
    "val objective with no validation data": (
        launch(space(base__data__val_size=0)),
        "base: the base data section leaves no validation split",
    ),
    "val objective with the final split": (
        launch(space(base__data__split="final")),
        "leaves no validation split",
    ),
    "val objective with a final split searched": (
        launch(space(param__data__split={"type": "choice", "values": ["search", "final"]})),
        "params.data.split: data.split='final'",
    ),
    "unknown objective": (
        launch(space(objectives={"accuracy": "maximize"})),
        "objectives.accuracy: not a metric",
    ),
    "objective direction": (
        launch(space(objectives={"val_accuracy": "max"})),
        "objectives.val_accuracy: 'max'",
    ),
    "objectives as a list": (
        launch(space(objectives=["val_accuracy"])),
        "objectives: ['val_accuracy'] is not allowed; a mapping",
    ),
    "negative budget": (launch(space(memory_budget_mb=-5)), "memory_budget_mb: -5"),
    "nan budget": (launch(space(memory_budget_mb=float("nan"))), "memory_budget_mb: nan"),
    "budget as text": (launch(space(memory_budget_mb="50MB")), "memory_budget_mb: '50MB'"),
    "time budget as text": (
        launch(space(time_budget="fast")),
        "time_budget: 'fast' is not allowed; a positive number (seconds per update) or a ratio",
    ),
    "time budget zero ratio": (launch(space(time_budget="0x")), "time_budget: '0x' is not allowed"),
    "unknown sampler": (launch(space(sampler="cmaes")), "sampler: 'cmaes' is not allowed"),
    "sampler seed beyond numpy": (launch(space(sampler_seed=2**32)), "sampler_seed: 4294967296"),
    "negative sampler seed": (launch(space(sampler_seed=-1)), "sampler_seed: -1"),
    "sampler option out of Optuna's range": (
        launch(space(sampler_options={"population_size": 1})),
        "sampler_options",
    ),
    "sampler option Optuna lets through": (
        launch(space(sampler="tpe", sampler_options={"n_startup_trials": -1})),
        "sampler_options.n_startup_trials: -1",
    ),
    "sampler option that is a function": (
        launch(space(sampler="tpe", sampler_options={"gamma": 5})),
        "sampler_options.gamma: a function",
    ),
    "seed as a sampler option": (
        launch(space(sampler_options={"seed": 3})),
        "sampler_options.seed",
    ),
    "negative num_samples in the file": (launch(space(num_samples=-1)), "num_samples: -1"),
    "bool seeds_per_point": (launch(space(seeds_per_point=True)), "seeds_per_point: True"),
    "fractional max_concurrent": (launch(space(max_concurrent=1.5)), "max_concurrent: 1.5"),
    "negative checkpoint period": (
        launch(space(resume_checkpoint_s=-1)),
        "resume_checkpoint_s: -1",
    ),
    "cuda device without a GPU": (
        launch(space(base__device="cuda")),
        "resources.gpu: 0 is not allowed with base device cuda",
    ),
    "more CPUs than the machine": (
        launch(space(resources={"cpu": 100_000})),
        "resources.cpu: 100000 is not allowed; this machine has",
    ),
    "unknown resource": (launch(space(resources={"memory": 4})), "resources.memory: unknown key"),
    # ---- launch's flags ----
    "empty --name": (launch(GOOD, "--name", ""), "--name: '' is not allowed"),
    "--name with a slash": (launch(GOOD, "--name", "../up"), "--name: '../up' is not allowed"),
    "negative --num-samples": (launch(GOOD, "--num-samples", "-3"), "--num-samples: '-3'"),
    "zero --num-samples": (launch(GOOD, "--num-samples", "0"), "--num-samples: '0'"),
    "text --num-samples": (
        launch(GOOD, "--num-samples", "many"),
        "--num-samples: 'many'",
    ),
    "--store that is a file": (
        command("launch", "space.yaml", "--store", "afile", space__yaml=GOOD, afile="x"),
        "--store: ",
    ),
    "--store under a file": (
        command("launch", "space.yaml", "--store", "afile/store", space__yaml=GOOD, afile="x"),
        "afile is a file",
    ),
    "--store as a bucket": (
        launch(GOOD, "--store", "s3://bucket/runs"),
        "--store: 's3://bucket/runs' is not allowed",
    ),
    "--address nobody answers": (
        launch(GOOD, "--address", "127.0.0.1:1"),
        "--address: nothing answers at 127.0.0.1:1",
    ),
    "ray:// address nobody answers": (
        launch(GOOD, "--address", "ray://127.0.0.1:1"),
        "--address: nothing answers",
    ),
    "--address without a port": (
        launch(GOOD, "--address", "localhost"),
        "--address: 'localhost' is not allowed",
    ),
    "--address with a bad port": (
        launch(GOOD, "--address", "localhost:99999"),
        "--address: 'localhost:99999'",
    ),
    "unknown flag": (launch(GOOD, "--nmae", "x"), "unrecognized arguments: --nmae"),
    # ---- resume and status ----
    "resume an unknown sweep": (
        command("resume", "nope", "--store", "store"),
        "NAME: no sweep 'nope'",
    ),
    "resume a name with a slash": (
        command("resume", "a/b", "--store", "store"),
        "name: 'a/b' is not allowed",
    ),
    "resume a sweep whose saved sampler options are wrong": (
        (
            {"store/ray/ok/space.yaml": space(sampler_options={"population_size": 1})},
            ["resume", "ok", "--store", "store"],
        ),
        "sampler_options",
    ),
    "resume from a file store": (
        command("resume", "ok", "--store", "afile", afile="x"),
        "no sweep 'ok'",
    ),
    "status of a file store": (command("status", "ok", "--store", "afile", afile="x"), "--store: "),
    "status of an unknown sweep": (
        command("status", "nope", "--store", "store"),
        "NAME: no sweep 'nope'",
    ),
    # ---- pareto and report ----
    "nan --max-memory-mb": (
        command("pareto", "--store", "store", "--max-memory-mb", "nan"),
        "--max-memory-mb: 'nan'",
    ),
    "negative --max-memory-mb": (
        command("pareto", "--store", "store", "--max-memory-mb", "-5"),
        "--max-memory-mb: '-5'",
    ),
    "zero --max-memory-mb": (
        command("pareto", "--store", "store", "--max-memory-mb", "0"),
        "--max-memory-mb: '0'",
    ),
    "nan --min-accuracy": (
        command("pareto", "--store", "store", "--min-accuracy", "nan"),
        "--min-accuracy: 'nan'",
    ),
    "infinite --min-accuracy": (
        command("pareto", "--store", "store", "--min-accuracy", "inf"),
        "--min-accuracy: 'inf'",
    ),
    "pareto of a file store": (command("pareto", "--store", "afile", afile="x"), "--store: "),
    "pareto of an empty store": (command("pareto", "--store", "store"), "--store: "),
    "pareto format": (
        command("pareto", "--store", "store", "--format", "xml"),
        "--format: invalid choice",
    ),
    "report --out that is a file": (
        command("report", "--store", "store", "--out", "afile", afile="x"),
        "--out: ",
    ),
    "report --out under a file": (
        command("report", "--store", "store", "--out", "afile/out", afile="x"),
        "--out: ",
    ),
    "report --only unknown": (
        command("report", "--store", "store", "--out", "out", "--only", "fig9"),
        "--only: 'fig9'",
    ),
    "report of a file store": (
        command("report", "--store", "afile", "--out", "out", afile="x"),
        "--store: ",
    ),
    # ---- train and profile: --set and config files ----
    "--set with bad YAML": (
        command("profile", "--set", "precision=[fp16"),
        "--set precision: not valid YAML",
    ),
    "--set without =": (
        command("profile", "--set", "precision"),
        "--set: 'precision' is not allowed; KEY=VALUE",
    ),
    "--set without a key": (command("profile", "--set", "=fp16"), "--set: '=fp16' is not allowed"),
    "--set with a duplicate key": (
        command("profile", "--set", "model={depth: 10, depth: 16}"),
        "the key 'depth' repeats",
    ),
    "--set with a number key": (
        command("profile", "--set", "model={1: 2}"),
        "--set model: not valid YAML",
    ),
    "--set a bool for an int": (
        command("profile", "--set", "schedule.epochs=true"),
        "schedule.epochs: True",
    ),
    "--set an infinite int": (
        command("profile", "--set", "schedule.epochs=1e400"),
        "schedule.epochs: inf",
    ),
    "--set a nan float": (command("profile", "--set", "schedule.lr=.nan"), "schedule.lr: nan"),
    "--set a scalar list": (
        command("profile", "--set", "schedule.milestones=0.5"),
        "schedule.milestones: 0.5",
    ),
    "--set a number path": (command("train", "--set", "data.root=5"), "data.root: 5"),
    "--set a negative seed": (command("train", "--set", "seed=-1"), "seed: -1"),
    "--set a huge seed": (command("train", "--set", "seed=4294967296"), "seed: 4294967296"),
    "--set an unknown field": (
        command("train", "--set", "model.height=3"),
        "model.height: unknown field",
    ),
    "--set an unknown task": (
        command("train", "--set", "task=mnist"),
        "task: 'mnist' is not allowed; allowed: wrn-cifar10",
    ),
    "--set a step runner that runs no step": (
        command("train", "--set", "step_runner=sparsity"),
        "step_runner: 'sparsity' runs no step; allowed: precision",
    ),
    "--set a field of a value": (
        command("train", "--set", "precision.x=1"),
        "precision: {'x': 1} is not allowed; text",
    ),
    "profile --lengths of zero": (
        command("profile", "--lengths", "0", "5", "--set", "task=dct-iwslt14"),
        "--lengths: 0",
    ),
    "config file not UTF-8": (
        command("profile", "c.yaml", c__yaml=b"precision: fp16 # \xff\n"),
        "c.yaml: not UTF-8",
    ),
    "config file missing": (command("profile", "none.yaml"), "none.yaml: no such config file"),
    "config file a list": (command("profile", "c.yaml", c__yaml="- 1\n"), "c.yaml: a YAML mapping"),
    "config file duplicate key": (
        command("train", "c.yaml", c__yaml="seed: 1\nseed: 2\n"),
        "c.yaml: not valid YAML: line 2",
    ),
}
NEEDS_NO_CUDA = {
    "cuda --set for train": (
        command("train", "--set", "device=cuda"),
        "device: 'cuda' is not allowed",
    ),
    "cuda measurement": (
        command("profile", "--measure", "--set", "device=cuda"),
        "device (with --measure)",
    ),
    "GPU resources on a machine without": (
        launch(space(base__device="auto", resources={"gpu": 1})),
        "resources.gpu: 1 is not allowed; this machine has 0 GPUs",
    ),
}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def run_main(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        return exit_.code


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    import ray

    def no_ray(*args, **kwargs):
        raise AssertionError("a Ray cluster was started or joined for a malformed input")

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNE_LOWMEM_CACHE", str(tmp_path / "cache"))
    return tmp_path


def refused_in_one_line(case, workdir, capsys) -> None:
    files, argv = case[0]
    for name, text in files.items():
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    before = snapshot(workdir)
    code = run_main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, lines
    assert lines[0].startswith("tune-lowmem"), lines[0]
    assert case[1] in lines[0], lines[0]
    assert snapshot(workdir) == before  # no store, journal, folder or file created or changed


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_input_is_one_line_exit_2_and_changes_nothing(name, workdir, capsys):
    refused_in_one_line(CASES[name], workdir, capsys)


@pytest.mark.skipif(not NO_CUDA, reason="these inputs are valid where CUDA is present")
@pytest.mark.parametrize("name", sorted(NEEDS_NO_CUDA))
def test_cuda_asked_where_there_is_none(name, workdir, capsys):
    refused_in_one_line(NEEDS_NO_CUDA[name], workdir, capsys)


READ_ONLY_MOUNT = 'mount -t tmpfs -o ro tmpfs ro && exec "$0" -m tune_lowmem.cli "$@"'


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_read_only_store(workdir):
    """A store on a file system that refuses every write, root's included: a read-only tmpfs
    mounted in a private mount namespace (`unshare`, as root or in a user namespace), where the
    command runs; file modes would not stop root, which is how CI runs."""
    (workdir / "ro").mkdir()
    files, argv = launch(GOOD, "--store", "ro/store")
    (workdir / "space.yaml").write_text(files["space.yaml"])
    before = snapshot(workdir)
    flags = ["--mount"] if os.geteuid() == 0 else ["--map-root-user", "--mount"]
    done = subprocess.run(
        ["unshare", *flags, "sh", "-c", READ_ONLY_MOUNT, sys.executable, *argv],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("tune-lowmem"), lines
    assert f"--store: {workdir}/ro is read-only" in lines[0], lines[0]
    assert snapshot(workdir) == before


def test_as_many_cases_as_promised():
    assert len(CASES) + len(NEEDS_NO_CUDA) >= 60


def test_scientific_notation_is_a_float(tmp_path):
    path = tmp_path / "space.yaml"
    text = space(param__schedule__lr_multiplier={"type": "loguniform", "low": 0.25, "high": 4})
    path.write_text(text.replace("low: 0.25", "low: 2.5e-1").replace("high: 4", "high: 4e0"))
    (param,) = [p for p in SearchSpace.load(path).params if p.name == "schedule.lr_multiplier"]
    assert (param.low, param.high) == (0.25, 4.0) and isinstance(param.high, float)


def test_a_missing_data_folder_is_not_created(workdir, capsys):
    argv = [
        "train",
        "--set",
        "data.root=nowhere/deep",
        "--set",
        "model.depth=10",
        "--set",
        "model.width=1",
        "--set",
        "device=cpu",
        "--set",
        "schedule.batch_size=20",
    ]
    before = snapshot(workdir)
    assert run_main(argv) == 2
    said = capsys.readouterr().err.strip().splitlines()
    (line,) = [text for text in said if not text.startswith("threads: ")]  # what train ran with
    assert "data.root: " in line and "nowhere/deep is not a folder" in line
    assert snapshot(workdir) == before and not (workdir / "nowhere").exists()


def test_a_stored_sweep_is_left_as_it_was(workdir, capsys):
    """A mistake about an existing store changes none of its files."""
    from tune_lowmem.config import TrialConfig

    record = TrialRecord(
        sweep="ok", trial_id="t1", status="completed", config=TrialConfig().to_flat()
    )
    write_trial(workdir / "store", record, [])
    for argv in (
        ["launch", "space.yaml", "--store", "store", "--name", "ok"],
        ["pareto", "--store", "store", "--max-memory-mb", "nan"],
        ["report", "--store", "store", "--out", "afile"],
    ):
        (workdir / "space.yaml").write_text(GOOD)
        (workdir / "afile").write_text("x")
        before = snapshot(workdir)
        assert run_main(argv) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
        assert snapshot(workdir) == before


def test_the_installed_command_prints_one_line(tmp_path):
    """The console entry point, as a user runs it: one line on stderr, status 2, no traceback."""
    path = tmp_path / "space.yaml"
    path.write_text(GOOD + "name: twice\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tune_lowmem.cli",
            "launch",
            str(path),
            "--store",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "the key 'name' repeats the one on line 1" in run.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("saved", "said"),
    [
        ("", "an empty file"),
        ("name: [unclosed\n", "not valid YAML"),
        (b"\xff\xfe", "not UTF-8"),
        ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
        ("- a list\n", "a list, not a mapping"),
    ],
)
def test_an_unreadable_saved_space_is_named_and_the_rows_answer(workdir, capsys, saved, said):
    """status, pareto and report: one line naming the sweep's space file, then the answer from
    the stored rows (exit 0)."""
    from tune_lowmem.config import TrialConfig

    config = TrialConfig.from_dict({"model.depth": 10, "model.width": 1}).to_flat()
    for trial_id, accuracy in (("t1", 0.5), ("t2", 0.6)):
        record = TrialRecord(
            sweep="ok",
            trial_id=trial_id,
            status="completed",
            config={**config, "seed": int(trial_id[1])},
            metrics={"val_accuracy": accuracy},
            memory={"predicted_total_mb": 5.0},
        )
        write_trial(workdir / "store", record, [])
    folder = workdir / "store" / "ray" / "ok"
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_bytes(saved if isinstance(saved, bytes) else saved.encode())
    for argv in (
        ["status", "ok", "--store", "store"],
        ["pareto", "--store", "store"],
        ["report", "--store", "store", "--out", "report", "--only", "table3"],
    ):
        code = run_main(argv)
        err = capsys.readouterr().err
        named = [line for line in err.splitlines() if "space.yaml" in line]
        assert code == 0, err
        assert len(named) == 1 and said in named[0], err
        assert "Traceback" not in err
    assert "2 trials stored (2 completed" in run_main_output(["status", "ok", "--store", "store"])


def run_main_output(argv: list[str]) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run_main(argv) == 0
    return out.getvalue()
