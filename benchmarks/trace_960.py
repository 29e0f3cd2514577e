"""A 960-job, 48-hour trace on Sia's 64-GPU cluster, per policy: wall and CPU seconds, rounds, avg JCT.

The trace: 960 jobs drawn (seeded, without replacement) from the bundled Sia workloads
(philly/saturn workload files: their application mix and rigid requests), with arrivals spread
uniformly at random over 48 hours -- a stand-in for Sia's newTrace setting; ``--source newtrace``
uses the newTrace generator (:func:`heteroplan.workload.newtrace.generate_newtrace`, the same jobs as
``bundled_workload("newtrace/seed-<s>")`` for 960 jobs over 48 h). Every row records the load
average (1 min, before and after the run) beside wall and CPU seconds (``time.process_time``).

Issue 32 measured on this machine (wall): sia 76 s (3041 rounds), pollux 71 s, gavel 13 s, on the
sampled trace (the default source); its "pollux" is the plain ``pollux`` policy (pooled-type
mechanism), not the artifact-faithful ``pollux-sia``.
Writes ``benchmarks/results/<--out>.json``; ``--policies`` and ``--seed`` choose the runs
(``name:key=value,...`` passes options, e.g. ``sia:mode=milp,mip_gap=0.001``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_json  # noqa: E402

from heteroplan.cluster import preset  # noqa: E402
from heteroplan.sim import make_policy, simulate  # noqa: E402
from heteroplan.workload.sia import BUNDLED_WORKLOADS, JobSpec, bundled_workload  # noqa: E402

ISSUE_WALL_S = {"sia": 76.0, "pollux": 71.0, "gavel": 13.0}
HOURS = 48.0


def sampled_trace(num_jobs: int, hours: float, seed: int) -> list[JobSpec]:
    """``num_jobs`` jobs sampled from the bundled workloads, arrivals uniform over ``hours``."""
    pool = [job for name in BUNDLED_WORKLOADS for job in bundled_workload(name)]
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(pool), size=num_jobs, replace=num_jobs > len(pool))
    arrivals = np.sort(rng.uniform(0.0, hours * 3600.0, size=num_jobs))
    return [
        JobSpec(f"{pool[k].application}-{i}", float(t), pool[k].application, pool[k].num_replicas, pool[k].batch_size)
        for i, (k, t) in enumerate(zip(picks, arrivals, strict=True))
    ]


def newtrace(num_jobs: int, hours: float, seed: int) -> list[JobSpec]:
    """``num_jobs`` jobs over ``hours`` from the newTrace generator (Sia's Table 3 setting)."""
    from heteroplan.workload.newtrace import NewTraceSpec, generate_newtrace

    return generate_newtrace(NewTraceSpec(jobs=num_jobs, hours=hours), seed=seed)


def _value(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=["sia", "pollux", "gavel"])
    parser.add_argument("--jobs", type=int, default=960)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", choices=("sampled", "newtrace"), default="sampled")
    parser.add_argument("--out", default="trace_960")
    args = parser.parse_args()
    make = sampled_trace if args.source == "sampled" else newtrace
    jobs = make(args.jobs, HOURS, args.seed)
    cluster = preset("sia-64")
    rows = []
    for spec in args.policies:
        name, _, opts = spec.partition(":")
        options = {k: _value(v) for k, v in (kv.split("=", 1) for kv in opts.split(",") if kv)}
        policy = make_policy(name, **options)
        load0 = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(jobs, cluster, policy, progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        load1 = os.getloadavg()[0]
        summary = result.summary()
        rows.append({
            "policy": spec, "wall_s": wall, "cpu_s": cpu, "issue_wall_s": ISSUE_WALL_S.get(spec, float("nan")),
            "rounds": result.rounds, "avg_jct_h": summary["avg_jct_h"], "finished": len(result.finished()),
            "policy_s": float(sum(result.policy_times)), "load_avg_1min": [load0, load1],
            "source": args.source, "seed": args.seed, "jobs": args.jobs, "summary": summary,
        })
        print({k: v for k, v in rows[-1].items() if k != "summary"}, flush=True)
    print()
    print_table(rows, ["policy", "wall_s", "cpu_s", "issue_wall_s", "rounds", "policy_s", "finished", "avg_jct_h"])
    print(f"trace: {args.jobs} jobs over {HOURS:g} h ({args.source}, seed {args.seed}); target sia, pollux <= 20 s wall")
    print("wrote", write_json(args.out, rows))


if __name__ == "__main__":
    main()
