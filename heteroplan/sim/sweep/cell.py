"""Run one sweep cell: :func:`run_cell` is the single adapter between a sweep and the simulators.

:func:`run_cell` maps a :class:`~heteroplan.sim.sweep.spec.CellSpec` to plain data -- a metrics
dict and the finished jobs' completion times -- over the simulators' public API
(:func:`heteroplan.sim.simulator.simulate`, :func:`heteroplan.sim.slotted.simulate`). Every
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
from heteroplan.sim.sweep.spec import CellSpec, ClusterSpec, PolicySpec

__all__ = ["CellFunction", "build_cluster", "build_policy", "execute_cell", "failed_record", "run_cell"]

CellFunction = Callable[[CellSpec], dict[str, Any]]


def build_cluster(spec: ClusterSpec) -> Cluster:
    """The cluster of ``spec``: a preset or JSON file, every (type, zone) GPU count x ``scale``."""
    cluster = preset(spec.name) if spec.kind == "preset" else Cluster.from_json(spec.name)
    if spec.scale == 1:
        return cluster
    counts = {key: max(1, round(n * spec.scale)) for key, n in cluster.capacity_by_zone().items()}
    return Cluster.from_counts(cluster.gpu_types, counts, spec.label, cluster.zones)


def build_policy(spec: PolicySpec, simulator: str = "sia") -> Any:
    """A fresh policy for ``spec``, named by its label; :class:`InputError` for an unknown name
    (field ``policy``) or option (field ``policy.options.<option>``).

    Names are :data:`heteroplan.sim.compare.POLICY_FACTORIES`, plus ``hadar`` for the slotted
    simulator. Options are constructor keywords, or public attributes (e.g. ``round_length``) of
    the default policy, set after construction.
    """
    from heteroplan.sim.compare import POLICY_FACTORIES

    factories = dict(POLICY_FACTORIES)
    if simulator == "slotted":
        from heteroplan.policies.hadar import HadarPolicy

        factories["hadar"] = HadarPolicy
    if spec.name not in factories:
        raise InputError("policy", spec.name, f"unknown policy; known: {sorted(factories)}")
    factory = factories[spec.name]
    keywords = set(inspect.signature(factory).parameters) if inspect.isclass(factory) else set()
    policy = factory(**{k: v for k, v in spec.options if k in keywords})
    for k, v in spec.options:
        if k in keywords:
            continue
        if k.startswith("_") or not hasattr(policy, k) or callable(getattr(policy, k)):
            known = keywords | {a for a in dir(policy) if not a.startswith("_") and not callable(getattr(policy, a))}
            raise InputError(f"policy.options.{k}", v, f"{spec.name} has no such option; known: {sorted(known)}")
        setattr(policy, k, v)
    policy.name = spec.label
    return policy


def run_cell(cell: CellSpec) -> dict[str, Any]:
    """Simulate one cell: ``{"metrics": {name: number}, "jcts": [s, ...], "error": str | None}``.

    ``metrics`` are the simulator's summary (hours where the name says ``_h``); ``jcts`` are the
    completion times (seconds) of the jobs that finished, in workload order; ``error`` is set when
    the simulation stopped early (its metrics then cover what ran). This is the one function to
    re-point when the simulators' API changes.
    """
    cluster = build_cluster(cell.cluster)
    policy = build_policy(cell.policy, cell.simulator)
    max_time = cell.max_hours * 3600 if cell.max_hours is not None else None
    if cell.simulator == "sia":
        from heteroplan.sim.simulator import simulate
        from heteroplan.workload.sia import bundled_workload, read_sia_workload

        w = cell.workload
        jobs = bundled_workload(w.name) if w.kind == "bundled" else read_sia_workload(w.name)
        result = simulate(jobs[: cell.jobs], cluster, policy, round_length=cell.round_length, max_time=max_time,
                          progress=False, fidelity=cell.fidelity.build(), seed=cell.seed)
        metrics = {k: v for k, v in result.summary().items() if k not in ("policy", "error")}
        return {"metrics": metrics, "jcts": [j.jct for j in result.finished()], "error": result.error}
    if cell.simulator == "slotted":
        from heteroplan.sim import slotted
        from heteroplan.workload.gavel import generate_workload, load_throughputs

        params = dict(cell.workload.params)
        gavel = generate_workload(params.pop("jobs"), params.pop("rate", None), seed=cell.seed, **params)
        jobs = slotted.rigid_jobs_from_gavel(gavel, load_throughputs())[: cell.jobs]
        res = slotted.simulate(policy, cluster, jobs, round_length=cell.round_length or 360.0)
        metrics = res.metrics() | {"jobs": len(jobs), "unfinished": len(res.unfinished), "rejected": len(res.rejected)}
        error = f"{len(res.unfinished)} jobs unfinished at the round limit" if res.unfinished else None
        return {"metrics": metrics, "jcts": [float(x) for x in res.jcts], "error": error}
    raise InputError("simulator", cell.simulator, "choose 'sia' or 'slotted'")


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
