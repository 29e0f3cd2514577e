"""Gavel's measured throughputs and Gavel-style generated workloads.

Numbers come from Gavel (OSDI'20, stanford-futuredata/gavel, MIT licence): the solo
throughputs of ``simulation_throughputs.json`` (steps/s of the *whole job* at scale factor
1, 2, 4 or 8 workers, consolidated placement), shipped reduced in
``heteroplan/data/gavel/throughputs.json``. A throughput of 0 means the job cannot run on
that GPU type at that scale (e.g. out of memory).

The generator follows the distributions Gavel's simulator uses (our own code):

- job type uniform over the job types; scale factor 1/2/4/8 with p = 0.7/0.1/0.15/0.05
  (job types measured only at scale 1 are redrawn when a larger scale is drawn);
- duration ``60 * 10**U(1.5, 3)`` s w.p. 0.8, else ``60 * 10**U(3, 4)`` s, as time on a V100;
  total steps = duration x V100 throughput at that scale;
- Poisson arrivals at ``arrival_rate`` jobs/hour (all at t = 0 when ``None``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heteroplan.errors import InputError
from heteroplan.inputs import finite_number, read_json, strict_int
from heteroplan.schema import IntKey, Number, Record, Table, Text, decode, naming_file

__all__ = [
    "GavelThroughputs",
    "GavelJob",
    "load_throughputs",
    "generate_workload",
    "SCALE_FACTORS",
    "SCALE_PROBS",
]

SCALE_FACTORS = (1, 2, 4, 8)
SCALE_PROBS = (0.7, 0.1, 0.15, 0.05)
MAX_WORKERS = 1024  # workers (scale factor) of one job
MAX_STEPS_PER_S = 1e9  # a job's steps/s on one GPU type

_RATE = Number(low=0, high=MAX_STEPS_PER_S, unit="steps/s")
_SCALE = Number(low=1, high=MAX_WORKERS, integer=True, unit="workers", numeral=True)
THROUGHPUTS_FILE = Record({"throughputs": Table(Table(Table(_RATE, IntKey(1, MAX_WORKERS, "workers"), 0, 64), Text(), 0, 10_000),
                                 Text(), 1, 1000)}, {"source": Text(max_len=4096, min_len=0),
                                                     "units": Text(max_len=4096, min_len=0)})
"""The shipped throughputs file: ``{"throughputs": {gpu: {job: {scale: steps/s}}}}``."""
GAVEL_THROUGHPUTS_FILE = Table(Table(Record({"null": _RATE}, extra=True), Text(max_len=1024), 0, 100_000), Text(), 1, 1000)
"""Gavel's ``simulation_throughputs.json``: ``{gpu: {"('job', scale)": {"null": steps/s, ...}}}``."""

_SHIPPED = Path(__file__).resolve().parent.parent / "data" / "gavel" / "throughputs.json"


class GavelThroughputs:
    """Throughput table ``{gpu_type: {job_type: {scale_factor: steps/s}}}``."""

    def __init__(self, table: Mapping[str, Mapping[str, Mapping[int, float]]]) -> None:
        if not table:
            raise InputError("throughputs", table, "empty throughput table")
        clean: dict[str, dict[str, dict[int, float]]] = {}
        for gpu, jobs in table.items():
            clean[gpu] = {}
            for job_type, scales in jobs.items():
                row: dict[int, float] = {}
                for scale, value in scales.items():
                    value = float(value)
                    if not np.isfinite(value) or value < 0:
                        raise InputError(f"throughputs[{gpu}][{job_type}][{scale}]", value, "must be >= 0")
                    row[int(scale)] = value
                clean[gpu][job_type] = row
        self._table = clean
        self.gpu_types: tuple[str, ...] = tuple(clean)
        names: dict[str, None] = {}
        for jobs in clean.values():
            names.update(dict.fromkeys(jobs))
        self.job_types: tuple[str, ...] = tuple(names)

    def _check_gpu(self, gpu_type: str) -> None:
        if gpu_type not in self._table:
            raise InputError("gpu_type", gpu_type, f"no throughput entry; known: {list(self.gpu_types)}")

    def throughput(self, job_type: str, scale_factor: int, gpu_type: str) -> float:
        """Steps/s of ``job_type`` with ``scale_factor`` workers on ``gpu_type`` (0 if not runnable).

        Raises :class:`InputError` for an unknown GPU type or job type.
        """
        self._check_gpu(gpu_type)
        if job_type not in self.job_types:
            raise InputError("job_type", job_type, "unknown job type")
        return self._table[gpu_type].get(job_type, {}).get(int(scale_factor), 0.0)

    def scales(self, job_type: str) -> tuple[int, ...]:
        """Scale factors with a positive throughput on at least one GPU type."""
        found = {
            s for g in self.gpu_types for s, v in self._table[g].get(job_type, {}).items() if v > 0
        }
        return tuple(sorted(found))

    def matrix(
        self, job_types: Sequence[str], scale_factors: Sequence[int], gpu_types: Sequence[str]
    ) -> np.ndarray:
        """``(jobs, types)`` array of steps/s for each job's (type, scale factor)."""
        for g in gpu_types:
            self._check_gpu(g)
        return np.array(
            [[self.throughput(j, s, g) for g in gpu_types] for j, s in zip(job_types, scale_factors, strict=True)],
            dtype=float,
        ).reshape(len(job_types), len(gpu_types))


def load_throughputs(path: str | Path | None = None) -> GavelThroughputs:
    """Load Gavel's throughputs: the shipped reduced table, or a file in either format.

    Accepts the shipped format (``{"throughputs": {gpu: {job: {scale: v}}}}``) or Gavel's
    original ``simulation_throughputs.json`` (keys ``"('job', scale)"`` -> ``{"null": v, ...}``;
    only the consolidated ``k80``/``p100``/``v100``-style keys without ``_unconsolidated``).
    """
    if path is None:
        return GavelThroughputs(json.loads(_SHIPPED.read_text())["throughputs"])
    with naming_file(path):
        data = read_json(path, "throughputs")
        if isinstance(data, Mapping) and "throughputs" in data:
            return GavelThroughputs(decode(THROUGHPUTS_FILE, data, "throughputs")["throughputs"])
        if isinstance(data, Mapping):  # Gavel's per-worker tables are not read
            data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.endswith("_unconsolidated"))}
        data = decode(GAVEL_THROUGHPUTS_FILE, data, "throughputs")
        table: dict[str, dict[str, dict[int, float]]] = {}
        for gpu, entries in data.items():
            table[gpu] = {}
            for key, value in entries.items():
                name, _, scale = key.strip("()").rpartition(",")
                where = f"throughputs[{gpu!r}][{key!r}]"
                job = decode(Text(), name.strip().strip("'\""), where)
                count = decode(_SCALE, scale.strip(), where)
                table[gpu].setdefault(job, {})[count] = value["null"]
        return GavelThroughputs(table)


@dataclass(frozen=True)
class GavelJob:
    """A rigid Gavel-setting job.

    Attributes:
        job_id: identifier.
        job_type: Gavel job type (e.g. ``"ResNet-50 (batch size 64)"``).
        scale_factor: workers (tasks) it runs with, all together (gang).
        total_steps: steps to train.
        arrival_time: seconds.
    """

    job_id: str
    job_type: str
    scale_factor: int
    total_steps: float
    arrival_time: float

    def __post_init__(self) -> None:
        if self.scale_factor < 1:
            raise InputError(f"job[{self.job_id}].scale_factor", self.scale_factor, "must be >= 1")
        if not self.total_steps > 0:
            raise InputError(f"job[{self.job_id}].total_steps", self.total_steps, "must be > 0")
        if not self.arrival_time >= 0:
            raise InputError(f"job[{self.job_id}].arrival_time", self.arrival_time, "must be >= 0")


def generate_workload(
    num_jobs: int,
    arrival_rate: float | None = None,
    seed: int = 0,
    throughputs: GavelThroughputs | None = None,
    multi_gpu: bool = True,
    reference_type: str = "v100",
    duration_scale: float = 1.0,
) -> list[GavelJob]:
    """Gavel-style workload (see module docstring).

    Args:
        num_jobs: number of jobs.
        arrival_rate: jobs/hour of the Poisson arrivals; ``None`` puts every job at t = 0.
        seed: RNG seed (deterministic).
        throughputs: table (default: the shipped Gavel table).
        multi_gpu: draw scale factors 1/2/4/8; otherwise all jobs use 1 worker.
        reference_type: GPU type the sampled duration refers to.
        duration_scale: multiplies every sampled duration (1 = Gavel's distribution).
    """
    strict_int("num_jobs", num_jobs, 0)
    if arrival_rate is not None and not finite_number("arrival_rate", arrival_rate) > 0:
        raise InputError("arrival_rate", arrival_rate, "must be > 0 jobs/hour or None")
    if not finite_number("duration_scale", duration_scale) > 0:  # inf: jobs that never finish
        raise InputError("duration_scale", duration_scale, "must be > 0")
    tp = throughputs or load_throughputs()
    tp._check_gpu(reference_type)
    rng = np.random.default_rng(seed)
    types = list(tp.job_types)
    jobs: list[GavelJob] = []
    now = 0.0
    for i in range(num_jobs):
        scale = int(rng.choice(SCALE_FACTORS, p=SCALE_PROBS)) if multi_gpu else 1
        while True:
            job_type = types[int(rng.integers(len(types)))]
            if tp.throughput(job_type, scale, reference_type) > 0:
                break
        if rng.random() < 0.8:
            duration = 60.0 * 10 ** rng.uniform(1.5, 3.0)
        else:
            duration = 60.0 * 10 ** rng.uniform(3.0, 4.0)
        duration *= duration_scale
        if arrival_rate is not None and i > 0:
            now += float(rng.exponential(3600.0 / arrival_rate))
        steps = duration * tp.throughput(job_type, scale, reference_type)
        jobs.append(GavelJob(f"job{i:04d}", job_type, scale, steps, now))
    return jobs
