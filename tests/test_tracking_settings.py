"""A space's ``tracking`` section and ``--mlflow``: kept with the space, and a value that is not
one is one line naming it, before Ray starts and before anything is written (a module of its
own: no Ray runs beside it, so that "before Ray starts" is seen)."""

from __future__ import annotations

import pytest
import ray
import yaml

from tests.test_tracking import SPACE
from tune_lowmem.cli import main
from tune_lowmem.space import SearchSpace


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        ("flag", "localhost:5000", "--mlflow: 'localhost:5000' is not an MLflow tracking URI"),
        ("flag", "http://", "--mlflow: 'http://' is not an MLflow tracking URI"),
        ("space", "ftp://host/x", "tracking.mlflow: 'ftp://host/x' is not an MLflow tracking URI"),
        ("space", 5000, "tracking.mlflow: 5000 is not allowed; an MLflow tracking URI is required"),
        ("key", "yes", "tracking.tensorboard: 'yes' is not allowed; true or false is required"),
        ("unknown", True, "tracking.wandb: unknown key; allowed: tensorboard, mlflow"),
    ],
)
def test_a_tracking_uri_that_is_not_one_is_one_line_before_ray_starts(
    tmp_path, capsys, where, value, said
):
    assert not ray.is_initialized()
    space = dict(SPACE)
    argv = []
    if where == "flag":
        argv = ["--mlflow", value]
    elif where == "space":
        space["tracking"] = {"mlflow": value}
    elif where == "key":
        space["tracking"] = {"tensorboard": value}
    else:
        space["tracking"] = {"wandb": value}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    code = main(["launch", str(path), "--store", str(tmp_path / "store"), *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"tune-lowmem launch: error: {said}")
    assert not ray.is_initialized() and not (tmp_path / "store").exists()


def test_resume_refuses_a_tracking_uri_that_is_not_one_before_ray_starts(tmp_path, capsys):
    code = main(["resume", "any", "--store", str(tmp_path), "--mlflow", "mlflow.example:80"])
    _, err = capsys.readouterr()
    assert code == 2 and not ray.is_initialized()
    assert err.startswith("tune-lowmem resume: error: --mlflow: 'mlflow.example:80' is not an")
    assert len(err.splitlines()) == 1


def test_the_space_keeps_its_tracking_and_the_flag_overrides_it():
    space = SearchSpace.from_dict({**SPACE, "tracking": {"mlflow": "file:///tmp/mlruns"}})
    assert space.tracking.to_dict() == {"tensorboard": True, "mlflow": "file:///tmp/mlruns"}
    assert SearchSpace.from_dict(space.to_dict()) == space
    assert space.tracked("http://127.0.0.1:5000").tracking.mlflow == "http://127.0.0.1:5000"
    assert SearchSpace.from_dict(SPACE).tracking.to_dict() == {"tensorboard": True, "mlflow": None}


def test_a_sweep_that_asks_for_mlflow_without_its_client_is_one_line(tmp_path, capsys, monkeypatch):
    """Where MLflow's client is not installed, asking for it is one line before Ray starts."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mlflow" else find_spec(name, *a),
    )
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({**SPACE, "tracking": {"mlflow": "http://127.0.0.1:5000"}}))
    code = main(["launch", str(path), "--store", str(tmp_path / "store")])
    (line,) = capsys.readouterr().err.splitlines()
    assert code == 2 and not ray.is_initialized() and not (tmp_path / "store").exists()
    assert line.startswith("tune-lowmem launch: error: tracking.mlflow: MLflow's client is not")
