"""A search space's ``tracking`` section: where a sweep's trials are followed besides the store.

    tracking: {tensorboard: true, mlflow: http://127.0.0.1:5000}

``tensorboard`` (default true) writes each trial's per-epoch curves as TensorBoard event files
in the sweep's folder; ``mlflow`` (default none) logs each trial as an MLflow run to that
tracking URI (`search.trackers`, docs/tracking.md). The URI is checked here, when the space is
read, so that one that is not an MLflow URI is one line before anything starts; whether MLflow
is installed and its server answers is the launch's to check (`search.trackers.check`).

It stands beside the space rather than in `search/`: the space reads it, and `search/` imports
the space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..validation import Field, checked, require

# MLflow's tracking URIs: a tracking server (http, https), a local folder or database that the
# client writes itself (file, sqlite, the SQL databases SQLAlchemy reaches), or Databricks
SERVER_SCHEMES = ("http", "https")
PATH_SCHEMES = ("file", "sqlite")
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")
URI_FORMS = (
    "http://HOST:PORT",
    "https://HOST[:PORT]",
    "file:///PATH",
    "sqlite:///PATH",
    "postgresql://...",
    "mysql://...",
    "mssql://...",
    "databricks",
)


@dataclass(frozen=True)
class TrackingSettings:
    """Where the sweep's trials are followed besides the store (see the module docstring)."""

    tensorboard: bool = True
    mlflow: str | None = None  # an MLflow tracking URI (`mlflow_uri`)

    def to_dict(self) -> dict[str, Any]:
        return {"tensorboard": self.tensorboard, "mlflow": self.mlflow}


def mlflow_uri(value: Any, field_name: str) -> str | None:
    """An MLflow tracking URI, or None: a scheme MLflow's client knows, with what it needs (a
    host for a server, a path for a folder or a database file)."""
    if value is None:
        return None
    require(
        isinstance(value, str) and bool(value.strip()),
        field_name,
        f"{value!r} is not allowed; an MLflow tracking URI is required ({', '.join(URI_FORMS)})",
    )
    parts = urlsplit(value)
    scheme = parts.scheme.split("+")[0]  # postgresql+psycopg2://: SQLAlchemy's driver named
    ok = (
        (scheme in SERVER_SCHEMES and bool(parts.hostname))
        or (scheme in PATH_SCHEMES and bool(parts.path.strip("/")))
        or (scheme in DATABASE_SCHEMES and bool(parts.netloc or parts.path))
        or scheme == "databricks"
        or value == "databricks"
    )
    require(
        ok,
        field_name,
        f"{value!r} is not an MLflow tracking URI; allowed: {', '.join(URI_FORMS)}",
    )
    return value


def _flag(value: Any, field_name: str) -> bool:
    return checked(value, isinstance(value, bool), field_name, "true or false")


FIELDS = {  # the section's keys, each with its check and default (`validation.read_section`)
    "tensorboard": Field(_flag, True),
    "mlflow": Field(mlflow_uri),
}


def tracking_settings(values: dict[str, Any], mlflow: str | None = None) -> TrackingSettings:
    """The section's values (read by `FIELDS`) as settings; ``mlflow`` (the ``--mlflow`` flag,
    checked as ``--mlflow``) overrides the section's URI."""
    if mlflow is not None:
        values = {**values, "mlflow": mlflow_uri(mlflow, "--mlflow")}
    return TrackingSettings(**values)
