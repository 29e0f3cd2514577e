"""Sia policy time per round (model build + solve) as the cluster grows from 64 to 2048 GPUs.

The Sia cluster is replicated f times (64 f GPUs) and f x 25 jobs of mixed applications are
active, each with Sia's bootstrapped goodput model at a random point of training and a random
current allocation. Reports the median and p95 of policy time over rounds and the optimality
gap of the solution (MILP gap, or gap of LP-rounding to the LP bound). Writes
``benchmarks/results/sia_scale.json``. Sia reports about 1 s per round at 2048 GPUs.
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--factors", nargs="+", type=int, default=[1, 4, 8, 16, 32])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", nargs="+", default=["milp", "lp-round", "auto"])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for f in args.factors:
        cluster = scaled_cluster(f)
        for mode in args.modes:
            policy = SiaPolicy(mode=mode, mip_gap=1e-2, time_limit=30)
            times, solve_times, gaps = [], [], []
            for r in range(args.rounds):
                jobs = jobs_for(f, rng, now=10_000.0 + r)
                t0 = time.perf_counter()
                policy.allocate(cluster, jobs, 10_000.0 + r)
                times.append(time.perf_counter() - t0)
                res = policy.last_result
                solve_times.append(res.solve_time)
                gaps.append(res.gap)
            rows.append({
                "gpus": cluster.num_gpus, "jobs": 25 * f, "mode": mode,
                "policy_s_median": statistics.median(times), "policy_s_p95": float(np.percentile(times, 95)),
                "solve_s_median": statistics.median(solve_times), "gap_max": max(gaps),
            })
            print(rows[-1], flush=True)
    print()
    print_table(rows, ["gpus", "jobs", "mode", "policy_s_median", "policy_s_p95", "solve_s_median", "gap_max"])
    print("Target: median < 0.5 s at 2048 GPUs with gap < 1% (Sia reports ~1 s).")
    print("wrote", write_json("sia_scale", rows))


if __name__ == "__main__":
    main()
