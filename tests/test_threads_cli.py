"""`train` and `profile --measure` set torch's threads from --threads and say what they used."""

import pytest
import torch

from tune_lowmem.cli import main

TINY = ["--set", "model.depth=10", "--set", "model.width=1", "--set", "device=cpu"]
TRAIN = [
    *TINY,
    "--set",
    "schedule.epochs=1",
    "--set",
    "schedule.batch_size=20",
    "--set",
    "data.train_subset=40",
    "--set",
    "data.val_size=20",
    "--set",
    "data.test_subset=20",
]


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_train_uses_the_threads_it_is_given_and_says_so(capsys):
    torch.set_num_threads(2)
    assert main(["train", *TRAIN, "--threads", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert torch.get_num_threads() == 1
    assert "threads: 1 (--threads)" in captured.err and "threads" not in captured.out


def test_profile_measure_uses_the_threads_it_is_given(capsys):
    torch.set_num_threads(2)
    assert (
        main(["profile", *TINY, "--set", "schedule.batch_size=8", "--measure", "--threads", "1"])
        == 0
    )
    assert torch.get_num_threads() == 1 and "threads: 1 (--threads)" in capsys.readouterr().err


def test_without_the_flag_the_default_is_said(capsys):
    torch.set_num_threads(2)
    assert main(["train", *TRAIN, "--json"]) == 0
    assert "threads: 2 (torch's default; set --threads)" in capsys.readouterr().err


def test_bad_thread_count_is_refused_in_one_line(capsys):
    assert main(["train", *TRAIN, "--threads", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "tune-lowmem train: error: --threads: 0 is not allowed; a positive integer is required"
    )
