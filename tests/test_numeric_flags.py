"""Numeric flags outside `pareto` (whose own are in test_pareto_cli): one line, exit 2, before Ray
starts or anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tune_lowmem.cli import main

SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "quickstart.yaml"


@pytest.mark.parametrize("value", ["-3", "0", "2.5", "many", "nan"])
def test_launch_num_samples_refuses_what_is_not_a_count(value, tmp_path, capsys):
    store = tmp_path / "store"
    code = main(["launch", str(SPACE), "--num-samples", value, "--store", str(store)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"--num-samples: {value!r} is not allowed; a whole number > 0 is required" in err
    assert not store.exists()
