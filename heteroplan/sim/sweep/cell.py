"""Run one sweep cell: :func:`run_cell` is the single adapter between a sweep and the simulators.

:func:`run_cell` maps a :class:`~heteroplan.sim.sweep.spec.CellSpec` to plain data -- a metrics
dict and the finished jobs' completion times -- over the simulators' public API
(:func:`heteroplan.sim.simulate`, the one round loop). Every
executor (in-process, processes, Ray) runs :func:`execute_cell`, which wraps it with timing,
metadata and error capture, so a failed cell becomes a record instead of stopping the sweep.
"""

from __future__ import annotations

import inspect
import os
import platform
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

from heteroplan.cluster import Cluster, preset
from heteroplan.errors import InputError
from heteroplan.sim.sweep.spec import (
    CellSpec,
    ClusterSource,
    ClusterSpec,
    PolicySpec,
    SimulatorKind,
    WorkloadSource,
)

__all__ = ["CellFunction", "build_cluster", "build_policy", "execute_cell", "failed_record", "run_cell"]

CellFunction = Callable[[CellSpec], dict[str, Any]]


def build_cluster(spec: ClusterSpec) -> Cluster:
    """The cluster of ``spec``: a preset or JSON file, every (type, zone) GPU count x ``scale``."""
    cluster = preset(spec.name) if spec.kind == ClusterSource.PRESET else Cluster.from_json(spec.name)
    if spec.scale == 1:
        return cluster
    counts = {key: max(1, round(n * spec.scale)) for key, n in cluster.capacity_by_zone().items()}
    return Cluster.from_counts(cluster.gpu_types, counts, spec.label, cluster.zones)


def build_policy(spec: PolicySpec, simulator: SimulatorKind | str = SimulatorKind.SIA) -> Any:
    """A fresh policy for ``spec`` from the registry, named by its label; :class:`InputError` for
    an unknown name (field ``policy``) or option (field ``policy.options.<option>``).

    Names are :data:`heteroplan.policies.registry.POLICIES`; options are the policy's constructor
    keywords but private ones (``round_length`` is understood by every policy; ``mechanism`` by
    those whose class carries one: it picks the class, whose keywords then count). ``simulator`` is accepted for
    symmetry with the sweep file; every policy runs in the one round loop.
    """
    from heteroplan.policies.registry import make_policy

    default = make_policy(spec.name, **{k: v for k, v in spec.options if k == "mechanism"})  # it picks the class
    cls = type(default)
    accepted = ({k for k in inspect.signature(cls).parameters if not k.startswith("_")}  # not a private field
                | {"round_length", "restart_delay_s"} | ({"mechanism"} if hasattr(cls, "MECHANISM") else set())) - {"self"}
    for k, v in spec.options:
        if k not in accepted:
            raise InputError(f"policy.options.{k}", v, f"{spec.name} has no such option; known: {sorted(accepted)}")
    try:
        policy = make_policy(spec.name, **dict(spec.options)) if spec.options else default
    except InputError as exc:  # the registry names its field policy[<name>].options
        prefix = f"policy[{spec.name}]"
        if not exc.field.startswith(prefix):
            raise
        raise InputError("policy" + exc.field[len(prefix):], exc.value, exc.reason) from None
    policy.name = spec.label
    return policy


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

    cluster = build_cluster(cell.cluster)
    policy = build_policy(cell.policy, cell.simulator)
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
    from heteroplan import __version__

    return {"key": cell.key, "status": status, "labels": cell.labels(), "inputs": cell.to_dict(),
            "metrics": metrics, "jcts": jcts, "error": error, "traceback": trace, "wall_s": wall_s,
            "finished_at": time.time(), "version": __version__, "host": socket.gethostname(), "pid": os.getpid(),
            "python": platform.python_version()}
