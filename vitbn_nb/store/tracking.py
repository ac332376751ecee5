"""A mirror of the run store in MLflow, only when asked for (``MLFLOW_TRACKING_URI`` set, or ``mlflow=True``; else
``mlflow`` is never imported). The run store stays the truth; MLflow gets each finished run once (params, per-epoch
metrics, tags, ``model.pt``, ``record.json``). Offline: ``sqlite:///abs/path/mlflow.db`` (default: in the store)."""

from __future__ import annotations

import datetime as dt
import functools
import os
import socket
import warnings
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd

from ..paths import MLFLOW_URI_VARIABLE, runs_dir
from ..system import label

EXPERIMENT_VARIABLE = "MLFLOW_EXPERIMENT_NAME"
DEFAULT_EXPERIMENT = "vitbn-book"
#: Epoch entries that are not scalar metrics (or are logged as something else).
_NOT_METRICS = {"epoch", "class_acc"}


def tracking_uri(uri: str | None = None) -> str:
    """The URI to use: ``uri``, else ``$MLFLOW_TRACKING_URI``, else a SQLite file in the run store."""
    return uri or os.environ.get(MLFLOW_URI_VARIABLE) or f"sqlite:///{runs_dir() / 'mlflow.db'}"


def _sqlite_path(uri: str) -> Path | None:
    path = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else ""
    return Path(path) if path and path != ":memory:" else None


@functools.cache
def unreachable(uri: str) -> str | None:
    """Why the server of an http(s) ``uri`` cannot be reached (None when it answers, or for a local store); asked once
    per process: MLflow's client retries a dead server for minutes per call."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=5).close()
    except OSError as error:
        return f"{parsed.hostname}:{port} does not answer ({error.strerror or error})"
    return None


@functools.cache
def warn_once(message: str) -> None:
    """One warning per process for a cause that would repeat for every run (a dead server)."""
    warnings.warn(message, stacklevel=4)


def client(uri: str | None = None):
    """An ``MlflowClient`` for ``uri`` (see the module docstring for what works offline)."""
    uri = tracking_uri(uri)
    if (why := unreachable(uri)) is not None:
        name = MLFLOW_URI_VARIABLE
        raise ConnectionError(f"{name}={uri}: {why}; fix: start the server, or unset {name}")
    if urlparse(uri).scheme in ("", "file"):
        # Naming a file store is the opt-in MLflow 3 asks for; without it the client raises.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    elif (path := _sqlite_path(uri)) is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    from mlflow.tracking import MlflowClient  # optional: only when asked for

    return MlflowClient(tracking_uri=uri)


def experiment_id(mlflow_client, name: str | None = None) -> str:
    """The id of experiment ``name`` (``$MLFLOW_EXPERIMENT_NAME`` or ``vitbn-book``), created if absent."""
    name = name or os.environ.get(EXPERIMENT_VARIABLE) or DEFAULT_EXPERIMENT
    found = mlflow_client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    # MLflow's default for a database store's artifacts is ./mlruns in whatever folder Python runs in.
    path = _sqlite_path(mlflow_client.tracking_uri)
    artifact_location = (path.parent / "mlartifacts").resolve().as_uri() if path is not None else None
    return mlflow_client.create_experiment(name, artifact_location=artifact_location)


def flatten(config: dict) -> dict[str, str]:
    """``{"model_kwargs": {"depth": 6}}`` -> ``{"model_kwargs.depth": "6"}`` (MLflow params are strings)."""
    return {key: str(value) for key, value in pd.json_normalize(config).iloc[0].items()}


def _millis(timestamp: str | None) -> int | None:
    return int(dt.datetime.fromisoformat(timestamp).timestamp() * 1000) if timestamp else None


def _epoch_metrics(record: dict, timestamp: int):
    from mlflow.entities import Metric  # optional

    metrics = []
    for epoch in record["epochs"]:
        values = {k: v for k, v in epoch.items() if k not in _NOT_METRICS and v is not None}
        values.update({f"class_acc_{i}": value for i, value in enumerate(epoch.get("class_acc", []))})
        metrics += [Metric(key, float(value), timestamp, int(epoch["epoch"])) for key, value in values.items()]
    return metrics


def _tags(record: dict) -> dict[str, str]:
    tags = {key: str(record.get(key) or "") for key in ("run_id", "status", "started", "finished", "timing")}
    tags |= {key: str(record.get(key, "")) for key in ("train_images", "test_images")}
    if record.get("diverged_epoch") is not None:
        tags["diverged_epoch"] = str(record["diverged_epoch"])
    tags |= {f"version.{name}": version for name, version in record.get("versions", {}).items()}
    return tags | {
        "resumed_at": ",".join(map(str, record.get("resumed_at", []))),
        "hardware": label(record["hardware"]),
        "device": record["hardware"]["device"],
        "mlflow.source.name": "vitbn_nb.engines.training",
    }


def mirror_run(run, *, uri: str | None = None, experiment: str | None = None, tags: dict | None = None) -> str:
    """Log ``run`` (a finished or diverged ``runs.Run``) to MLflow once; return the MLflow run id."""
    from mlflow.entities import Param, RunTag  # optional

    record = run.record
    if record["status"] not in ("finished", "diverged"):
        raise ValueError(f"run {record['run_id']} is {record['status']!r}; only finished or diverged runs are mirrored")
    mlflow_client = client(uri)
    experiment_id_ = experiment_id(mlflow_client, experiment)
    found = mlflow_client.search_runs([experiment_id_], f"tags.run_id = '{record['run_id']}'", max_results=50)
    existing = next((hit for hit in found if hit.data.tags.get("started") == (record.get("started") or "")), None)
    if existing is not None:
        for key, value in (tags or {}).items():  # the optimisation marks its trials this way
            mlflow_client.set_tag(existing.info.run_id, key, str(value))
        return existing.info.run_id
    start = _millis(record.get("started"))
    mlflow_run_id = mlflow_client.create_run(experiment_id_, start_time=start, run_name=record["run_id"]).info.run_id
    try:
        params = [Param(key, value[:6000]) for key, value in flatten(record["config"]).items()]
        all_tags = [RunTag(key, value) for key, value in {**_tags(record), **(tags or {})}.items()]
        metrics = _epoch_metrics(record, _millis(record.get("finished")) or start or 0)
        mlflow_client.log_batch(mlflow_run_id, metrics, params, all_tags)  # split into batches MLflow accepts
        for name in ("model.pt", "record.json"):
            if (run.folder / name).is_file():
                mlflow_client.log_artifact(mlflow_run_id, str(run.folder / name))
    except BaseException:
        # A half-logged run must not pass for a mirrored one next time.
        mlflow_client.set_terminated(mlflow_run_id, status="FAILED")
        mlflow_client.delete_run(mlflow_run_id)
        raise
    mlflow_client.set_terminated(mlflow_run_id, status="FINISHED", end_time=_millis(record.get("finished")))
    return mlflow_run_id


def mirror(run, *, explicit: bool, tags: dict | None = None) -> None:
    """Mirror ``run`` as training does: ``explicit`` (``mlflow=True``) raises any failure; otherwise (the URI set in
    the environment) a server that does not answer is said once, and a failure warns without stopping training."""
    if not explicit and (why := unreachable(tracking_uri())):
        warn_once(f"runs are stored but not mirrored to MLflow: {why}")
        return
    try:
        mirror_run(run, tags=tags)
    except Exception as error:
        if explicit:
            raise
        # once per cause: a dead server would otherwise warn for every run of the book
        warnings.warn(f"runs are stored but not mirrored to MLflow: {error}", stacklevel=4)
