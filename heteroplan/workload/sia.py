"""Sia workload CSVs: ``name,time,application,num_replicas,batch_size``.

``time`` is the arrival (seconds from the trace start); ``num_replicas`` and ``batch_size``
are what a rigid (non-adaptive) scheduler gives the job; adaptive schedulers (Sia, Pollux)
start each job at 1 GPU and choose GPUs and batch size themselves.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from heteroplan.errors import InputError

__all__ = ["JobSpec", "read_sia_workload", "bundled_workload", "BUNDLED_WORKLOADS"]

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
BUNDLED_WORKLOADS = tuple(f"{trace}/workload-{i}" for trace in ("philly", "saturn") for i in range(1, 9))


@dataclass(frozen=True)
class JobSpec:
    """One job of a workload.

    Attributes:
        name: unique job name.
        arrival_time: seconds from the start of the trace.
        application: application name (see :mod:`heteroplan.perf.applications`).
        num_replicas: GPUs a rigid scheduler gives the job.
        batch_size: total batch size (samples) a rigid scheduler uses.
        elastic: whether adaptive policies may change GPUs and batch size.
    """

    name: str
    arrival_time: float
    application: str
    num_replicas: int
    batch_size: int
    elastic: bool = True


def _parse_row(row: dict[str, str], where: str, known_apps: set[str] | None) -> JobSpec:
    try:
        name = row["name"].strip()
        arrival = float(row["time"])
        app = row["application"].strip()
        replicas = float(row["num_replicas"])
        batch = float(row["batch_size"])
    except (TypeError, ValueError) as exc:
        raise InputError(where, dict(row), f"unparsable value: {exc}") from None
    if not name:
        raise InputError(f"{where}.name", name, "must not be empty")
    if not arrival >= 0:
        raise InputError(f"{where}.time", row["time"], "must be >= 0 seconds")
    if replicas != int(replicas) or replicas < 1:
        raise InputError(f"{where}.num_replicas", row["num_replicas"], "must be an integer >= 1")
    if batch != int(batch) or batch < 1:
        raise InputError(f"{where}.batch_size", row["batch_size"], "must be an integer >= 1")
    if known_apps is not None and app not in known_apps:
        raise InputError(f"{where}.application", app, f"unknown application; known: {sorted(known_apps)}")
    return JobSpec(name, arrival, app, int(replicas), int(batch))


def read_sia_workload(path: str | Path, known_apps: set[str] | None = None) -> list[JobSpec]:
    """Read a Sia workload CSV, sorted by arrival time.

    Errors name the file, the row number (1 = first data row) and the column.
    Duplicate job names get a ``#k`` suffix (the saturn traces reuse names).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError("workload", str(path), f"cannot read: {exc}") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"{path.name}.columns", reader.fieldnames, f"missing columns {missing}")
    jobs: list[JobSpec] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(reader, start=1):
        job = _parse_row(row, f"{path.name}:row {i}", known_apps)
        if job.name in seen:
            seen[job.name] += 1
            job = JobSpec(f"{job.name}#{seen[job.name]}", job.arrival_time, job.application, job.num_replicas, job.batch_size)
        else:
            seen[job.name] = 0
        jobs.append(job)
    if not jobs:
        raise InputError("workload", str(path), "has no jobs")
    return sorted(jobs, key=lambda j: j.arrival_time)


def bundled_workload(name: str = "philly/workload-1") -> list[JobSpec]:
    """One of the Sia workloads shipped with the package (``philly/workload-N``, ``saturn/workload-N``)."""
    if name not in BUNDLED_WORKLOADS:
        raise InputError("workload", name, f"unknown bundled workload; known: {list(BUNDLED_WORKLOADS)}")
    ref = resources.files("heteroplan") / "data" / "workloads" / f"{name}.csv"
    with resources.as_file(ref) as path:
        return read_sia_workload(path)
