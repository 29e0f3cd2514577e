"""Run a sweep: skip finished cells, fan the rest out, write each record as it arrives.

A rerun of the same sweep into the same directory computes only the cells without a finished
record (an interrupted sweep resumes; failed cells are retried unless ``retry_failed=False``).
Ctrl-C or SIGTERM stops the workers, keeps every finished cell, writes the tables of what is
there and re-raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heteroplan.atomic_json import inside
from heteroplan.errors import InputError
from heteroplan.names import printable
from heteroplan.signals import SignalGuard
from heteroplan.sim.sweep.cell import CellFunction, execute_cell, run_cell
from heteroplan.sim.sweep.executors import Executor, ExecutorKind, make_executor
from heteroplan.sim.sweep.results import (
    plot_bars,
    plot_jct_cdf,
    results_table,
    summarize,
    write_tables,
)
from heteroplan.sim.sweep.spec import SweepSpec, load_sweep, parse_sweep
from heteroplan.sim.sweep.store import ResultStore

__all__ = ["SweepReport", "run_sweep"]

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What a sweep run did (counts of cells; seconds) and where its results are.

    Attributes:
        out: the output directory.
        cells: cells in the sweep.
        skipped: cells already finished before this run.
        computed: cells this run finished successfully.
        failed: cells this run recorded as failed.
        wall_s: seconds this run took.
        workers: parallel workers used.
        interrupted: the run was stopped (Ctrl-C / SIGTERM) before every cell ran.
    """

    out: Path
    spec: SweepSpec = field(repr=False)
    cells: int
    skipped: int
    computed: int
    failed: int
    wall_s: float
    workers: int
    interrupted: bool = False

    def records(self) -> list[dict[str, Any]]:
        """The stored records of this sweep's cells, in grid order."""
        return ResultStore(self.out).records(c.key for c in self.spec.cells())

    def table(self) -> Any:
        """The tidy results DataFrame (a row per stored cell)."""
        return results_table(self.records())

    def summary(self, **kwargs: Any) -> Any:
        """Mean over seeds and 95% interval (n >= 3) per (cluster, fidelity, policy, workload) (see :func:`summarize`)."""
        return summarize(self.table(), **kwargs)


def _as_spec(sweep: SweepSpec | Mapping[str, Any] | str | Path) -> SweepSpec:
    if isinstance(sweep, SweepSpec):
        return sweep
    if isinstance(sweep, Mapping):
        return parse_sweep(sweep)
    return load_sweep(sweep)


def run_sweep(
    sweep: SweepSpec | Mapping[str, Any] | str | Path,
    out: str | Path,
    executor: ExecutorKind | str | Executor = ExecutorKind.PROCESSES,
    workers: int | None = None,
    ray_address: str | None = None,
    progress: bool | None = None,
    retry_failed: bool = True,
    plots: bool = False,
    cell_fn: CellFunction = run_cell,
) -> SweepReport:
    """Run every unfinished cell of ``sweep`` (a file, a dict of its tables, or a :class:`SweepSpec`).

    Args:
        out: directory of the result store (see :mod:`heteroplan.sim.sweep.store`).
        executor: an :class:`~heteroplan.sim.sweep.executors.ExecutorKind` or its value: ``"processes"`` (default; ``workers`` processes, default all cores),
            ``"inprocess"``, ``"ray"``, or an executor object.
        ray_address: with ``executor="ray"`` (implied when given): ``"auto"`` starts a local
            Ray instance, else the address of a cluster to join.
        progress: a tqdm bar with ETA over the cells on stderr (default: when stderr is a terminal).
        retry_failed: rerun cells whose stored record failed.
        plots: also write ``bars_<metric>.png`` and ``jct_cdf.png``.
        cell_fn: the cell function (picklable; default :func:`run_cell`).

    An argument of the wrong kind is an :class:`~heteroplan.errors.InputError` naming it before any
    cell runs: ``progress``, ``retry_failed`` and ``plots`` are ``True`` or ``False`` (``"no"`` is
    refused, not taken as true), ``cell_fn`` a callable, ``executor`` a kind or an object with ``run``.
    """
    _check_run_options(executor, progress, retry_failed, plots, cell_fn)
    from tqdm.auto import tqdm

    from heteroplan.version import __version__

    spec = _as_spec(sweep)
    ex = make_executor(executor, workers, ray_address) if isinstance(executor, str) else executor
    store = ResultStore(out)
    cells = spec.cells()
    store.write_manifest({"name": spec.name, "version": __version__, "sweep": spec.source,
                          "cells": [c.key for c in cells]})
    done = {"ok"} if retry_failed else {"ok", "error"}
    todo = [c for c in cells if store.status(c.key) not in done]
    report = SweepReport(Path(out), spec, len(cells), len(cells) - len(todo), 0, 0, 0.0,
                         int(getattr(ex, "workers", 1)))
    log.info("sweep %s: %d cells, %d finished before, %d to run", spec.name, len(cells), report.skipped, len(todo))
    bar = tqdm(total=len(todo), desc=printable(spec.name), unit="cell", disable=not (sys.stderr.isatty() if progress is None
                                                                          else progress))
    t0 = time.perf_counter()
    with SignalGuard() as guard:  # SIGINT/SIGTERM -> Interrupted (a KeyboardInterrupt), remembered
        records = ex.run(functools.partial(execute_cell, fn=cell_fn), todo)
        try:
            for record in records:
                # a signal landing in a C extension's import surfaces as that import's ImportError:
                # a serial cell that failed so did not fail by itself and is not stored
                if guard.received is not None and record["status"] != "ok":
                    raise KeyboardInterrupt
                store.write(record)
                if guard.received is not None:
                    raise KeyboardInterrupt
                if record["status"] == "ok":
                    report.computed += 1
                else:
                    report.failed += 1
                    log.warning("cell %s (%s) failed: %s (fix its input; a rerun retries failed cells)",
                                record["key"], record["labels"], record["error"])
                bar.update(1)
        except KeyboardInterrupt:
            report.interrupted = True
        finally:
            records.close()  # type: ignore[attr-defined]
            bar.close()
            report.wall_s = time.perf_counter() - t0
            report.workers = int(getattr(ex, "workers", report.workers))
            _write_results(report, plots)
    if report.interrupted:
        raise KeyboardInterrupt(f"sweep {spec.name} interrupted: {report.skipped + report.computed} of "
                                f"{report.cells} cells finished are kept in {out}; rerun to resume")
    return report


def _check_run_options(executor: object, progress: object, retry_failed: object, plots: object,
                       cell_fn: object) -> None:
    """:func:`run_sweep`'s options of the wrong kind, named before any cell runs."""
    for name, value in (("progress", progress), ("retry_failed", retry_failed), ("plots", plots)):
        if not isinstance(value, bool) and not (name == "progress" and value is None):
            raise InputError(name, value, "must be True or False" + (" or None" if name == "progress" else ""))
    if not callable(cell_fn):  # every cell failed with "'int' object is not callable", stored as failed
        raise InputError("cell_fn", cell_fn, "must be a callable taking a CellSpec (default run_cell)")
    if not isinstance(executor, str) and not callable(getattr(executor, "run", None)):
        raise InputError("executor", type(executor).__name__, "must be 'inprocess', 'processes', 'ray' or an "
                         "executor object with run(fn, cells)")


def _write_results(report: SweepReport, plots: bool) -> None:
    records = report.records()
    table = results_table(records)
    summary = summarize(table)
    write_tables(table, summary, report.out)
    if not plots or summary.empty:
        return
    import matplotlib.pyplot as plt

    from heteroplan.plots import policy_colors

    colors = policy_colors(p.label for p in report.spec.policies)  # one colour per policy in every figure
    for metric in ("avg_jct_h", "p99_jct_h", "makespan_h", "gpu_hours_per_job", "utilization"):
        if metric in set(summary["metric"]):
            plt.close(plot_bars(summary, metric, path=inside(report.out / f"bars_{metric}.png", report.out),
                                colors=colors))
    plt.close(plot_jct_cdf(records, path=inside(report.out / "jct_cdf.png", report.out), colors=colors))
