"""Sia workload CSVs: ``name,time,application,num_replicas,batch_size``.

``time`` is the arrival (seconds from the trace start); ``num_replicas`` and ``batch_size``
are what a rigid (non-adaptive) scheduler gives the job; adaptive schedulers (Sia, Pollux)
start each job at 1 GPU and choose GPUs and batch size themselves.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from heteroplan.atomic_json import write_text_atomic
from heteroplan.errors import InputError
from heteroplan.inputs import read_text
from heteroplan.names import a_path
from heteroplan.schema import Number, Record, Text, decode, shown
from heteroplan.workload.job_spec import MAX_ARRIVAL, MAX_BATCH_SIZE, MAX_REPLICAS, JobSpec

__all__ = ["JobSpec", "read_sia_workload", "write_sia_workload", "bundled_workload", "is_bundled_workload",
           "BUNDLED_WORKLOADS"]

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
log = logging.getLogger(__name__)
BUNDLED_WORKLOADS = tuple(f"{trace}/workload-{i}" for trace in ("philly", "saturn") for i in range(1, 9))


MAX_ROWS = 1_000_000  # jobs of one workload file (the largest published traces hold ~100k)
ROW = Record({"name": Text(), "time": Number(low=0, high=MAX_ARRIVAL, unit="seconds", numeral=True),
              "application": Text(),
              "num_replicas": Number(low=1, high=MAX_REPLICAS, integer=True, unit="GPUs", numeral=True),
              "batch_size": Number(low=1, high=MAX_BATCH_SIZE, integer=True, unit="samples", numeral=True)},
             extra=True)
"""One row of a Sia workload CSV (cells are text; names stripped of edge spaces first); other columns pass unread."""


def _parse_row(row: dict[str | None, str | list[str] | None], where: str, known_apps: set[str] | None,
               batch_limits: Mapping[str, int] | None) -> JobSpec:
    if None in row:  # more cells than the header has columns
        raise InputError(f"{where}", shown(row[None]), f"more cells than the {len(COLUMNS)}+ columns of the header")
    missing = [c for c in COLUMNS if row.get(c) is None]
    if missing:
        raise InputError(f"{where}.{missing[0]}", None, "missing: the row has fewer cells than the header")
    cells = {k: v.strip() if k in ("name", "application") and isinstance(v, str) else v for k, v in row.items()}
    job = decode(ROW, cells, where)
    limit = (batch_limits or {}).get(job["application"], MAX_BATCH_SIZE)
    if job["batch_size"] > limit:
        raise InputError(f"{where}.batch_size", row["batch_size"], f"must be an integer in [1, {limit}] samples")
    if known_apps is not None and job["application"] not in known_apps:
        raise InputError(f"{where}.application", job["application"], f"unknown application; known: {sorted(known_apps)}")
    return JobSpec(job["name"], float(job["time"]), job["application"], job["num_replicas"], job["batch_size"])


def read_sia_workload(path: str | Path, known_apps: set[str] | None = None,
                      batch_limits: Mapping[str, int] | None = None) -> list[JobSpec]:
    """Read a Sia workload CSV (UTF-8), sorted by arrival time.

    Errors name the file, the row number (1 = first data row) and the column. Times must be
    finite, in ``[0, 10 years]``; ``batch_size`` at most ``batch_limits[application]`` (else
    :data:`MAX_BATCH_SIZE`). A repeated job name gets the first free ``#k`` suffix (the saturn
    traces reuse names), so names stay unique even when the file already has ``j#1``.
    """
    path = a_path("workload", path)
    text = read_text(path, "workload")
    reader = csv.DictReader(text.splitlines())
    try:
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise InputError(f"{path.name}.columns", shown(reader.fieldnames), f"missing columns {missing}")
        parsed = []
        for i, row in enumerate(reader, start=1):
            if i > MAX_ROWS:
                raise InputError(str(path), f"more than {MAX_ROWS:,} rows", f"at most {MAX_ROWS:,} jobs in one workload")
            parsed.append(_parse_row(row, f"{path.name}:row {i}", known_apps, batch_limits))
    except csv.Error as exc:  # a cell beyond csv's field limit (128k characters), a NUL byte
        raise InputError(str(path), f"line {reader.line_num}", f"not a valid CSV file: {exc}") from None
    jobs = _unique_names(parsed)
    if not jobs:
        raise InputError("workload", str(path), "has no jobs")
    return sorted(jobs, key=lambda j: j.arrival_time)


def write_sia_workload(jobs: list[JobSpec], path: str | Path) -> Path:
    """Write ``jobs`` as a Sia workload CSV (the columns :func:`read_sia_workload` reads, the
    format of the Sia artifact's ``workloads/*.csv``), in arrival order; returns the path.

    Arrival times are written in seconds, as integers when whole (as the artifact's files are), else
    with :func:`repr` precision, so reading the file back gives the same jobs. Job names must be
    unique and contain no comma, quote or line break.
    """
    path = Path(path)
    names = [j.name for j in jobs]
    if not jobs:
        raise InputError("jobs", jobs, "must not be empty")
    if len(set(names)) != len(names):
        raise InputError("jobs", sorted({n for n in names if names.count(n) > 1}), "job names must be unique")
    for job in jobs:
        if not isinstance(job, JobSpec):
            raise InputError("jobs", job, "must be JobSpec items")
        for field, value in (("name", job.name), ("application", job.application)):
            if any(c in value for c in ',"\r\n') or value != value.strip():
                raise InputError(f"JobSpec[{job.name}].{field}", value,
                                 "must not contain commas, quotes, line breaks or edge spaces")
    lines = [",".join(COLUMNS)]
    for job in sorted(jobs, key=lambda j: j.arrival_time):
        t = float(job.arrival_time)
        time = str(int(t)) if t.is_integer() else repr(t)
        lines.append(f"{job.name},{time},{job.application},{job.num_replicas},{job.batch_size}")
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def _unique_names(jobs: list[JobSpec]) -> list[JobSpec]:
    """``jobs`` with each repeated name renamed ``name#k``, ``k`` the smallest suffix no job uses."""
    taken = {j.name for j in jobs}
    first: set[str] = set()
    out = []
    for job in jobs:
        if job.name in first:
            k = 1
            while f"{job.name}#{k}" in taken:
                k += 1
            taken.add(f"{job.name}#{k}")
            log.info("job name %r repeats: renamed %r", job.name, f"{job.name}#{k}")
            job = JobSpec(f"{job.name}#{k}", job.arrival_time, job.application, job.num_replicas, job.batch_size)
        first.add(job.name)
        out.append(job)
    return out


def is_bundled_workload(name: str) -> bool:
    """Whether :func:`bundled_workload` knows ``name``: a shipped CSV or ``newtrace/seed-<s>``."""
    from heteroplan.workload.newtrace import newtrace_seed

    return name in BUNDLED_WORKLOADS or newtrace_seed(name) is not None


def bundled_workload(name: str = "philly/workload-1") -> list[JobSpec]:
    """One of the Sia workloads shipped with the package (``philly/workload-N``, ``saturn/workload-N``),
    or the generated newTrace-setting workload ``newtrace/seed-<s>`` (960 jobs over 48 hours, see
    :func:`heteroplan.workload.newtrace.generate_newtrace`)."""
    from heteroplan.workload.newtrace import generate_newtrace, newtrace_seed

    seed = newtrace_seed(name)
    if seed is not None:
        return generate_newtrace(seed=seed)
    if name not in BUNDLED_WORKLOADS:
        raise InputError("workload", name, f"unknown bundled workload; known: {list(BUNDLED_WORKLOADS)}"
                                           " and newtrace/seed-<s>")
    ref = resources.files("heteroplan") / "data" / "workloads" / f"{name}.csv"
    with resources.as_file(ref) as path:
        return read_sia_workload(path)
