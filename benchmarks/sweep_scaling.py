"""The Sia reproduction as a sweep: wall time on 1 process vs 2 processes vs local Ray.

Runs ``examples/sweeps/sia_reproduce.toml`` (8 Philly + 8 Helios workloads x Sia, Pollux,
Gavel, FIFO, Tiresias on sia-64: 80 cells) from scratch once per mode, checks that every mode
gives the same table (timing columns aside), measures Ray's start-up and per-cell overhead with
no-op cells, and prints the summary (mean and 95% interval over the 8 workloads of each trace)
beside the published numbers. Writes ``benchmarks/results/sweep_scaling.json``.

    python benchmarks/sweep_scaling.py                       # all 80 cells, full workloads (long)
    python benchmarks/sweep_scaling.py --jobs 40             # first 40 jobs of each workload
    python benchmarks/sweep_scaling.py --modes processes:2   # one mode only
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_json  # noqa: E402
from sia_reproduce import PUBLISHED, SWEEP  # noqa: E402

from heteroplan.sim.sweep import parse_sweep, run_sweep  # noqa: E402
from heteroplan.sim.sweep.results import BY_FAMILY, TIMING_COLUMNS  # noqa: E402

METRICS = ("avg_jct_h", "p99_jct_h", "makespan_h", "gpu_hours_per_job")


def noop_cell(cell):
    """A cell that does nothing: its sweep's wall time is the executor's own overhead."""
    return {"metrics": {"seed": cell.seed}, "jcts": [], "error": None}


def burn(n: int = 20_000_000) -> float:
    """Seconds of a pure-Python loop (CPU only)."""
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return time.perf_counter() - t0


def parallel_capacity(workers: int = 2) -> float:
    """How many cores this machine gives us right now: ``workers`` x (one burn alone) / (the
    slowest of ``workers`` burns at once); ~2 on an idle 2-core machine, less when shared."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers) as pool:
        alone = pool.submit(burn).result()
        together = max(pool.map(burn, [20_000_000] * workers))
    return workers * alone / together


def run_mode(mode: str, tables: dict, store: Path, cell_fn=None) -> tuple[float, object]:
    """Run the sweep from scratch in ``mode`` (``processes:N`` or ``ray:N``); (wall s, report)."""
    kind, _, n = mode.partition(":")
    shutil.rmtree(store, ignore_errors=True)
    kwargs = {"cell_fn": cell_fn} if cell_fn else {}
    t0 = time.perf_counter()
    if kind == "ray":
        import ray

        ray.init(num_cpus=int(n), include_dashboard=False, configure_logging=False, logging_level="WARNING")
        t_init = time.perf_counter() - t0
        try:
            report = run_sweep(tables, store, ray_address="auto", progress=False, **kwargs)
        finally:
            ray.shutdown()
        report.ray_init_s = t_init  # type: ignore[attr-defined]
    else:
        report = run_sweep(tables, store, executor=kind, workers=int(n), progress=False, **kwargs)
    return time.perf_counter() - t0, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=None, help="only the first N jobs of each workload")
    ap.add_argument("--modes", nargs="+", default=["processes:1", "processes:2", "ray:2"])
    ap.add_argument("--noop-cells", type=int, default=200, help="no-op cells for the overhead measurement")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the no-op overhead measurement")
    args = ap.parse_args()
    tables = tomllib.loads(SWEEP.read_text())
    if args.jobs:
        tables["jobs"] = args.jobs
    cells = len(parse_sweep(tables).cells())
    load_before = os.getloadavg()
    capacity = parallel_capacity()
    print(f"{cells} cells, jobs per workload: {args.jobs or 'all'}; cores: {os.cpu_count()}; "
          f"load average {load_before[0]:.1f}; 2 CPU-bound processes run {capacity:.2f}x as fast as one", flush=True)
    rows, tables_by_mode, reports = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            wall, report = run_mode(mode, tables, Path(tmp) / mode.replace(":", "-"))
            cell_s = [r["wall_s"] for r in report.records()]
            rows.append({"mode": mode, "wall_s": wall, "cells": report.computed, "failed": report.failed,
                         "cell_s_sum": sum(cell_s), "cell_s_median": statistics.median(cell_s),
                         "cell_s_max": max(cell_s), "ray_init_s": getattr(report, "ray_init_s", ""),
                         "load_avg_1m": os.getloadavg()[0]})
            if not reports:  # the first mode's summary, read while its store exists
                summary = report.summary(metrics=list(METRICS), by=BY_FAMILY)  # the paper reports per trace
            reports[mode] = report
            tables_by_mode[mode] = report.table().drop(columns=list(TIMING_COLUMNS), errors="ignore") \
                .sort_values("key").reset_index(drop=True)
            print(f"{mode}: {wall:.1f} s ({report.computed} cells, {report.failed} failed)", flush=True)
        base = args.modes[0]
        for row in rows:
            row["speedup"] = rows[0]["wall_s"] / row["wall_s"]
            row["same_table"] = tables_by_mode[row["mode"]].equals(tables_by_mode[base])
        overhead = []
        noop_modes = [m for m in args.modes if m.startswith("ray")] + [m for m in args.modes if m == "processes:2"]
        noop = {"name": "noop", "seeds": list(range(args.noop_cells)), "workloads": [{"bundled": "philly/workload-1"}],
                "clusters": [{"preset": "sia-64"}], "policies": [{"name": "fifo"}]}
        for mode in noop_modes:
            times = [run_mode(mode, noop, Path(tmp) / "noop", cell_fn=noop_cell) for _ in range(args.repeats)]
            per_cell = [1e3 * (w - getattr(r, "ray_init_s", 0.0)) / args.noop_cells for w, r in times]
            overhead.append({"mode": mode, "noop_cells": args.noop_cells, "per_cell_ms_median": statistics.median(per_cell),
                             "per_cell_ms_min": min(per_cell), "per_cell_ms_max": max(per_cell),
                             "startup_s_median": statistics.median(getattr(r, "ray_init_s", 0.0) for _, r in times)})
    print()
    print_table(rows, ["mode", "wall_s", "speedup", "cells", "failed", "same_table", "cell_s_sum", "cell_s_median",
                       "cell_s_max", "ray_init_s", "load_avg_1m"])
    print("\nExecutor overhead with no-op cells (ms per cell, excluding Ray start-up; median [min, max] of "
          f"{args.repeats}):")
    print_table(overhead, ["mode", "noop_cells", "per_cell_ms_median", "per_cell_ms_min", "per_cell_ms_max",
                           "startup_s_median"])
    out_rows = []
    for (policy, family), sub in summary.groupby(["policy", "family"], sort=False):
        pub = PUBLISHED.get(family, {}).get(policy)
        row = {"policy": policy, "family": family, "n": int(sub["n"].max())}
        for i, metric in enumerate(METRICS):
            r = sub[sub["metric"] == metric].iloc[0]
            row[metric] = f"{r['mean']:.3g} [{r['ci_low']:.3g}, {r['ci_high']:.3g}]"
            row[f"pub_{metric.removesuffix('_h').removesuffix('_per_job')}"] = pub[i] if pub else ""
        out_rows.append(row)
    print(f"\nSummary over the workloads of each trace (mean [95% interval]), beside the Sia paper"
          f"{'' if not args.jobs else f' (first {args.jobs} jobs only: not comparable to the paper)'}:")
    print_table(out_rows, list(out_rows[0]))
    print("wrote", write_json("sweep_scaling", {
        "jobs": args.jobs, "cells": cells, "cpu_count": os.cpu_count(), "load_avg_before": load_before,
        "parallel_capacity_before": capacity, "parallel_capacity_after": parallel_capacity(),
        "modes": rows, "noop_overhead": overhead, "summary": out_rows,
        "summary_long": summary.to_dict(orient="records")}))


if __name__ == "__main__":
    main()
