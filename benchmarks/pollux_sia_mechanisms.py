"""The Sia artifact's Pollux (``pollux-sia``) under load: each mechanism switched on and off.

Runs labelled variants of ``pollux-sia`` (``VARIANTS``: the registered policy with some options)
on bundled workloads (``philly/workload-1``, ``saturn/workload-1``, generated
``newtrace/seed-<s>``), each with ``record=True`` so that
:func:`heteroplan.sim.breakdown.load_breakdown` splits the time of every job into queueing,
restoring and running. Prints avg / p99 JCT and makespan (h), queueing and restoring hours per
job, restarts per job, the share of GPUs held and the most jobs waiting in one round; writes
``benchmarks/results/<name>.json`` after every run (an interrupted run keeps what finished).

Usage: ``python benchmarks/pollux_sia_mechanisms.py --workloads newtrace/seed-4 philly/workload-1
--variants before app-delays pollux-sia [--policy-seeds 0 1] [--name pollux_sia_mechanisms]``. A 960-job
run takes 1-2 minutes of one core, a 160-job run about 20 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_json  # noqa: E402

from heteroplan.cluster import preset  # noqa: E402
from heteroplan.policies.registry import make_policy  # noqa: E402
from heteroplan.sim import simulate  # noqa: E402
from heteroplan.sim.breakdown import load_breakdown  # noqa: E402
from heteroplan.workload.sia import bundled_workload  # noqa: E402

ONE_GPU = {"speedup_base": "one-gpu"}  # speed-ups relative to one GPU, lam = 1.1
# label -> options of make_policy("pollux-sia", ...)
VARIANTS: dict[str, dict[str, Any]] = {
    # main before issue 34 item 2: every restart paid 30 s, speed-ups relative to one GPU
    "before": {"restart_delay_s": 30.0} | ONE_GPU,
    "app-delays": ONE_GPU,  # + the applications' restore delays, restarts priced at 30 s, no pinning
    "app-delays+pin": {"pin_restoring": True} | ONE_GPU,  # ... but restoring jobs pinned
    "pollux-sia": {},  # the registered default: + the artifact's fair-share fitness
    "30s-delays": {"restart_delay_s": 30.0},  # the default but every restart paid 30 s
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["newtrace/seed-4", "philly/workload-1", "saturn/workload-1"])
    ap.add_argument("--variants", nargs="+", default=["before", "app-delays", "pollux-sia"], choices=sorted(VARIANTS))
    ap.add_argument("--policy-seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--name", default="pollux_sia_mechanisms", help="stem of the JSON file in benchmarks/results/")
    args = ap.parse_args()
    cluster = preset("sia-64")
    rows: list[dict[str, Any]] = []
    for workload in args.workloads:
        jobs = bundled_workload(workload)
        for label in args.variants:
            for seed in args.policy_seeds:
                t0 = time.process_time()
                policy = make_policy("pollux-sia", seed=seed, **VARIANTS[label])
                result = simulate(jobs, cluster, policy, progress=False, record=True)
                s = result.summary()
                bd = load_breakdown(result)
                every = bd.summaries()[0]
                rows.append({"workload": workload, "variant": label, "seed": seed, "avg_jct_h": s["avg_jct_h"],
                             "p99_jct_h": s["p99_jct_h"], "makespan_h": s["makespan_h"],
                             "queued_h": every.queued_h, "restoring_h": every.restoring_h,
                             "restarts_per_job": s["restarts_per_job"], "gpus_held": bd.utilization,
                             "mean_waiting": float(sum(bd.jobs_waiting)) / max(len(bd.jobs_waiting), 1),
                             "max_waiting": int(max(bd.jobs_waiting, default=0)), "cpu_s": time.process_time() - t0})
                write_json(args.name, {"runs": rows})
                r = rows[-1]
                print(f"{workload} {label} seed {seed}: {r['avg_jct_h']:.3f} / {r['p99_jct_h']:.2f} / "
                      f"{r['makespan_h']:.1f} h, queued {r['queued_h']:.3f} h, restoring {r['restoring_h']:.3f} h "
                      f"({r['cpu_s']:.0f} CPU s)", flush=True)
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
