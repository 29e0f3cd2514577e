"""Sia and its baselines under load: generated workloads in the Sia paper's newTrace setting.

960 jobs over 48 hours on the 64-GPU cluster (``heteroplan.workload.newtrace``, one workload per
seed), each policy simulated with ``record=True`` so that :func:`heteroplan.sim.breakdown.load_breakdown`
can split every job's time into queueing, restoring and running. Prints avg / p99 JCT and makespan
per (seed, policy), their mean over seeds beside the paper's Table 3, the avg-JCT ratios to Sia,
and the breakdown table of each run; writes ``benchmarks/results/sia_newtrace.json`` after every
run (an interrupted run keeps what finished).

Usage: ``python benchmarks/sia_newtrace.py [--seeds 1 2] [--policies sia pollux-sia gavel-sia]
[--jobs 960 --hours 48] [--name sia_newtrace]``. One 960-job run takes 1-2 minutes of one core
(sia, pollux-sia). ``--policies`` also takes the variants in ``VARIANTS`` (``pollux-sia-one-gpu``:
``pollux-sia`` with speed-ups relative to one GPU instead of the artifact's fair share); ``--name`` sets
the JSON file's stem, so that runs in parallel processes do not overwrite each other.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_json  # noqa: E402

from heteroplan.cluster import preset  # noqa: E402
from heteroplan.policies.registry import make_policy  # noqa: E402
from heteroplan.sim import simulate  # noqa: E402
from heteroplan.sim.breakdown import load_breakdown  # noqa: E402
from heteroplan.workload.newtrace import NewTraceSpec, generate_newtrace  # noqa: E402

# Sia paper, Table 3 (newTrace, mean of 10 traces): avg JCT h, p99 JCT h, makespan h.
PAPER = {"sia": (0.7, 4.6, 52.2), "pollux-sia": (1.5, 10.3, 62.3), "gavel-sia": (11.3, 98.1, 110.0)}
# Benchmark label -> (registered policy, constructor options) for variants not in the registry.
VARIANTS = {"pollux-sia-one-gpu": ("pollux-sia", {"speedup_base": "one-gpu"})}
PAPER["pollux-sia-one-gpu"] = PAPER["pollux-sia"]


def _policy(label: str):
    """A fresh policy for a benchmark label: a registered name or one of ``VARIANTS``."""
    name, options = VARIANTS.get(label, (label, {}))
    return make_policy(name, **options)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--policies", nargs="+", default=["sia", "pollux-sia", "gavel-sia"])
    ap.add_argument("--jobs", type=int, default=960)
    ap.add_argument("--hours", type=float, default=48.0)
    ap.add_argument("--name", default="sia_newtrace", help="stem of the JSON file in benchmarks/results/")
    args = ap.parse_args()
    cluster = preset("sia-64")
    rows, breakdowns = [], []
    for seed in args.seeds:
        jobs = generate_newtrace(NewTraceSpec(jobs=args.jobs, hours=args.hours), seed=seed)
        for name in args.policies:
            t0 = time.process_time()
            result = simulate(jobs, cluster, _policy(name), progress=False, record=True)
            s = result.summary()
            bd = load_breakdown(result)
            rows.append({"seed": seed, "policy": name, "avg_jct_h": s["avg_jct_h"], "p99_jct_h": s["p99_jct_h"],
                         "makespan_h": s["makespan_h"], "restarts_per_job": s["restarts_per_job"],
                         "queued_h": bd.summaries()[0].queued_h, "restoring_h": bd.summaries()[0].restoring_h,
                         "gpus_held": bd.utilization, "cpu_s": time.process_time() - t0})
            breakdowns.append(f"seed {seed}: {bd.table()}")
            write_json(args.name, {"jobs": args.jobs, "hours": args.hours, "runs": rows})
            r = rows[-1]
            print(f"seed {seed} {name}: {r['avg_jct_h']:.3f} / {r['p99_jct_h']:.2f} / {r['makespan_h']:.1f} h "
                  f"({r['cpu_s']:.0f} CPU s)", flush=True)
    print_table(rows, list(rows[0]))
    means = []
    for name in args.policies:
        mine = [r for r in rows if r["policy"] == name]
        avg = {k: float(np.mean([r[k] for r in mine])) for k in ("avg_jct_h", "p99_jct_h", "makespan_h")}
        paper = PAPER.get(name, (float("nan"),) * 3)
        means.append({"policy": name, **avg, "paper_avg": paper[0], "paper_p99": paper[1], "paper_makespan": paper[2]})
    sia = next((m["avg_jct_h"] for m in means if m["policy"] == "sia"), float("nan"))
    for m in means:
        m["avg_over_sia"] = m["avg_jct_h"] / sia
    print()
    print_table(means, list(means[0]))
    print()
    print("\n\n".join(breakdowns))
    write_json(args.name, {"jobs": args.jobs, "hours": args.hours, "runs": rows, "means": means})


if __name__ == "__main__":
    main()
