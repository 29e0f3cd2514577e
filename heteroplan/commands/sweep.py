"""``heteroplan sweep``: run a sweep file's grid of simulations, resumably, on cores or Ray."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from heteroplan.argtypes import integer, nonempty
from heteroplan.commands.jsonout import print_json
from heteroplan.names import path_component, printable
from heteroplan.sim.sweep import SweepReport, load_sweep, run_sweep
from heteroplan.sim.sweep.executors import ExecutorKind, cores
from heteroplan.sim.sweep.results import format_summary


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a grid of simulations from a sweep file (resumable; cores or Ray)",
                       description="Run every unfinished cell of SWEEP (TOML; see docs/sweeps.md). Each cell's "
                       "record is written to OUT/cells/ as soon as it finishes; rerunning resumes.")
    p.add_argument("sweep", type=nonempty("a path"), help="sweep file (TOML)")
    p.add_argument("--out", type=nonempty("a path"), default=None, help="result directory (default: sweeps/<sweep name>)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=integer(1), default=None,
                       help="local worker processes (default and most: all cores)")
    where.add_argument("--inprocess", action="store_true", help="run cells one by one in this process (debugging)")
    where.add_argument("--ray", type=nonempty("'auto' or a Ray address"), metavar="ADDRESS", default=None,
                       help="run on Ray: 'auto' starts a local instance, else the cluster address to join")
    p.add_argument("--no-retry", action="store_true", help="keep failed cells as they are instead of rerunning them")
    p.add_argument("--plots", action="store_true", help="also write bars_<metric>.png and jct_cdf.png")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (counts, output folder, failed cells, the summary's rows) "
                   "instead of the table; no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_sweep(args.sweep)
    out = Path(args.out) if args.out else Path("sweeps") / path_component("sweep name", spec.name)
    executor = ExecutorKind.INPROCESS if args.inprocess else ExecutorKind.RAY if args.ray else ExecutorKind.PROCESSES
    if executor is ExecutorKind.PROCESSES and args.workers is not None and args.workers > cores():
        print(f"heteroplan sweep: --workers {args.workers} capped at the {cores()} cores of this machine",
              file=sys.stderr)
    try:
        report = run_sweep(spec, out, executor=executor, workers=args.workers, ray_address=args.ray,
                           progress=False if args.quiet or args.json else None, retry_failed=not args.no_retry,
                           plots=args.plots)
    except KeyboardInterrupt as exc:
        print(f"heteroplan sweep: {exc}", file=sys.stderr)
        return 130
    if args.json:
        print_json(_as_json(report))
        return 0 if report.failed == 0 else 3
    print(f"{printable(spec.name)}: {report.cells} cells: {report.skipped} already done, {report.computed} computed, "
          f"{report.failed} failed, in {report.wall_s:.1f} s on {report.workers} workers")
    print(printable(format_summary(report.summary(metrics=_headline(report))), keep="\n"))
    for record in report.records():
        if record["status"] != "ok":
            print(printable(f"! {record['key']} {record['labels']}: {record['error']}"), file=sys.stderr)
    print(f"wrote {out / 'results.csv'}, {out / 'summary.csv'} and {out / 'cells'}/")
    return 0 if report.failed == 0 else 3


def _as_json(report: SweepReport) -> dict:
    """The run's counts, where its files are, its failed cells and the summary (a row per group
    and metric: n, mean, ci_low, ci_high, ci_method)."""
    return {
        "name": report.spec.name, "out": str(report.out), "cells": report.cells, "skipped": report.skipped,
        "computed": report.computed, "failed": report.failed, "wall_s": report.wall_s, "workers": report.workers,
        "failed_cells": [{"key": r["key"], "labels": r["labels"], "error": r["error"]}
                         for r in report.records() if r["status"] != "ok"],
        "summary": report.summary().to_dict(orient="records"),
    }


def _headline(report: SweepReport) -> list[str]:
    """Metrics to print: the JCTs and makespan the papers report."""
    columns = set(report.table().columns)
    return [m for m in ("avg_jct_h", "p99_jct_h", "makespan_h", "utilization") if m in columns]
