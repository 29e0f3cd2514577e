"""Sia policy time per round (goodputs + model build + solve + placement) from 64 to 65,536 GPUs.

The Sia cluster is replicated f times (64 f GPUs) and f x 25 jobs of mixed applications are
active, each with Sia's bootstrapped goodput model at a random point of training and a random
current allocation. Reports the median and p95 of policy wall time and the median CPU time
(``time.process_time``: steadier on a shared machine) over rounds, the optimality gap of the
solution (MILP gap, or gap of LP-rounding to the LP bound), and the growth exponent of CPU time
between neighbouring sizes (``log(t2/t1) / log(g2/g1)``; 1 = linear in the cluster). Writes
``benchmarks/results/sia_scale.json``.

Issue 32 measured (LP-round, wall): 64 GPUs 0.0037 s, 512 0.016 s, 2048 0.10 s, 8192 1.27 s,
16384 4.76 s; MILP 12.6 s and auto 6.4 s at 16384. Sia reports about 1 s per round at 2048 GPUs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_json  # noqa: E402

from heteroplan.cluster import Cluster, preset  # noqa: E402
from heteroplan.perf.applications import get_app  # noqa: E402
from heteroplan.perf.sia_data import bootstrap_model  # noqa: E402
from heteroplan.policies.base import JobState  # noqa: E402
from heteroplan.policies.sia import SiaPolicy  # noqa: E402

APPS = ("cifar10", "bert", "deepspeech2", "imagenet", "yolov3")
# Issue 32's figures (wall seconds per round, LP-round) for the table's "issue" column.
ISSUE_LP_ROUND = {64: 0.0037, 512: 0.016, 2048: 0.10, 8192: 1.27, 16384: 4.76}


def scaled_cluster(f: int) -> Cluster:
    base = preset("sia-64")
    return Cluster.from_counts(base.gpu_types, {t: c * f for t, c in base.capacity().items()}, f"sia-{64 * f}")


def jobs_for(f: int, rng: np.random.Generator, now: float) -> list[JobState]:
    models = {a: bootstrap_model(a) for a in APPS}
    jobs = []
    for i in range(25 * f):
        app = APPS[i % len(APPS)]
        jobs.append(JobState(job_id=f"j{i}", application=app, arrival_time=now - float(rng.uniform(0, 7200)),
                             max_gpus=get_app(app).max_batch_size, progress=float(rng.uniform(0, 0.9)),
                             num_restarts=int(rng.integers(0, 3)), restart_delay=get_app(app).restart_delay,
                             estimator=models[app], last_gpus=int(rng.choice([0, 1, 2, 4, 8]))))
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factors", nargs="+", type=int, default=[1, 8, 32, 128, 256, 1024])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["milp", "lp-round", "auto"])
    parser.add_argument("--milp-max-gpus", type=int, default=2048, help="skip the MILP above this many GPUs")
    parser.add_argument("--out", default="sia_scale")
    args = parser.parse_args()
    rows = []
    for f in args.factors:
        cluster = scaled_cluster(f)
        for mode in args.modes:
            if mode == "milp" and cluster.num_gpus > args.milp_max_gpus:
                continue
            rng = np.random.default_rng(f)  # the same jobs for every mode and code version
            policy = SiaPolicy(mode=mode, mip_gap=1e-2, time_limit=30)
            times, cpus, solve_times, gaps = [], [], [], []
            for r in range(args.rounds):
                jobs = jobs_for(f, rng, now=10_000.0 + r)
                t0, c0 = time.perf_counter(), time.process_time()
                policy.allocate(cluster, jobs, 10_000.0 + r)
                times.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
                res = policy.last_result
                solve_times.append(res.solve_time)
                gaps.append(res.gap)
            rows.append({
                "gpus": cluster.num_gpus, "jobs": 25 * f, "mode": mode,
                "policy_s_median": statistics.median(times), "policy_s_p95": float(np.percentile(times, 95)),
                "cpu_s_median": statistics.median(cpus),
                "solve_s_median": statistics.median(solve_times), "gap_max": max(gaps),
                "issue_lp_round_s": ISSUE_LP_ROUND.get(cluster.num_gpus, float("nan")),
            })
            print(rows[-1], flush=True)
    for mode in args.modes:  # growth exponent of CPU time between neighbouring sizes
        mine = [r for r in rows if r["mode"] == mode]
        for a, b in zip(mine, mine[1:], strict=False):
            b["exponent"] = math.log(b["cpu_s_median"] / a["cpu_s_median"]) / math.log(b["gpus"] / a["gpus"])
    print()
    print_table(rows, ["gpus", "jobs", "mode", "policy_s_median", "policy_s_p95", "cpu_s_median", "exponent",
                       "solve_s_median", "gap_max", "issue_lp_round_s"])
    print("Targets (issue 32): <= 1 s at 16384 GPUs, <= 5 s at 65536, gap <= 1%, exponent 8k->16k <= 1.2.")
    print("wrote", write_json(args.out, rows))


if __name__ == "__main__":
    main()
