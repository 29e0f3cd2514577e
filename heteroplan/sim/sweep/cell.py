"""Run one sweep cell: :func:`run_cell` is the single adapter between a sweep and the simulators.

:func:`run_cell` maps a :class:`~heteroplan.sim.sweep.spec.CellSpec` to plain data -- a metrics
dict and the finished jobs' completion times -- over the simulators' public API
(:func:`heteroplan.sim.simulate`, the one round loop). Every
executor (in-process, processes, Ray) runs :func:`execute_cell`, which wraps it with timing,
metadata and error capture, so a failed cell becomes a record instead of stopping the sweep.
"""

from __future__ import annotations

import os
import platform
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

from heteroplan.errors import InputError
from heteroplan.sim.sweep.spec import (
    CellSpec,
    SimulatorKind,
    WorkloadSource,
)

__all__ = ["CellFunction", "execute_cell", "failed_record", "run_cell"]

CellFunction = Callable[[CellSpec], dict[str, Any]]


def _jobs(cell: CellSpec) -> list[Any]:
    """The cell's workload: Sia CSV jobs (bundled or a file) or Gavel-generated rigid jobs."""
    w = cell.workload
    if cell.simulator == SimulatorKind.SLOTTED:
        from heteroplan.workload.gavel import generate_workload, load_throughputs
        from heteroplan.workload.rigid import rigid_jobs_from_gavel

        params = dict(w.params)
        gavel = generate_workload(params.pop("jobs"), params.pop("rate", None), seed=cell.seed, **params)
        return rigid_jobs_from_gavel(gavel, load_throughputs())[: cell.jobs]
    if cell.simulator == SimulatorKind.SIA:
        from heteroplan.workload.sia import bundled_workload, read_sia_workload

        return (bundled_workload(w.name) if w.kind == WorkloadSource.BUNDLED else read_sia_workload(w.name))[: cell.jobs]
    raise InputError("simulator", cell.simulator, f"choose one of {[k.value for k in SimulatorKind]}")


def run_cell(cell: CellSpec) -> dict[str, Any]:
    """Simulate one cell: ``{"metrics": {name: number}, "jcts": [s, ...], "error": str | None}``.

    ``metrics`` are the simulator's summary (hours where the name says ``_h``); ``jcts`` are the
    completion times (seconds) of the jobs that finished, in workload order; ``error`` is set when
    the simulation stopped early (its metrics then cover what ran). This is the one function
    between a sweep and :func:`heteroplan.sim.simulate`.
    """
    from heteroplan.sim.loop import simulate

    cluster = cell.cluster.build()
    policy = cell.policy.build()
    jobs = _jobs(cell)
    max_time = cell.max_hours * 3600 if cell.max_hours is not None else None
    round_length = cell.round_length or (360.0 if cell.simulator == SimulatorKind.SLOTTED else None)
    fidelity = cell.fidelity.build() if cell.simulator == SimulatorKind.SIA else None
    result = simulate(jobs, cluster, policy, round_length=round_length, max_time=max_time, progress=False,
                      fidelity=fidelity)
    metrics = {k: v for k, v in result.summary().items() if k not in ("policy", "error")}
    return {"metrics": metrics, "jcts": [j.jct_s for j in result.finished()], "error": result.error}


def execute_cell(cell: CellSpec, fn: CellFunction = run_cell) -> dict[str, Any]:
    """Run ``fn(cell)`` and return the cell's record: its key, inputs, labels, ``status``
    (``"ok"`` or ``"error"``), metrics, JCTs, error text, wall time (s) and where it ran.

    Exceptions become ``status = "error"`` with the error and the traceback's tail;
    ``KeyboardInterrupt`` and ``SystemExit`` propagate (the sweep stops, finished cells stay).
    """
    t0 = time.perf_counter()
    try:
        out = fn(cell)
    except Exception as exc:
        return failed_record(cell, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exc(limit=-8)),
                             time.perf_counter() - t0)
    return _record(cell, "error" if out.get("error") else "ok", out.get("metrics", {}), out.get("jcts", []),
                   out.get("error"), None, time.perf_counter() - t0)


def failed_record(cell: CellSpec, error: str, trace: str | None = None, wall_s: float = 0.0) -> dict[str, Any]:
    """The record of a cell that raised (or whose worker died) with ``error``."""
    return _record(cell, "error", {}, [], error, trace, wall_s)


def _record(cell: CellSpec, status: str, metrics: dict[str, Any], jcts: list[float], error: str | None,
            trace: str | None, wall_s: float) -> dict[str, Any]:
    from heteroplan.version import __version__

    return {"key": cell.key, "status": status, "labels": cell.labels(), "inputs": cell.to_dict(),
            "metrics": metrics, "jcts": jcts, "error": error, "traceback": trace, "wall_s": wall_s,
            "finished_at": time.time(), "version": __version__, "host": socket.gethostname(), "pid": os.getpid(),
            "python": platform.python_version()}
