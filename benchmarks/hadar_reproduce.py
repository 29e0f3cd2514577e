"""Hadar / HadarE vs Gavel, YARN-CS and Tiresias on Gavel's simulated cluster.

Gavel-108 (36 each of K80, P100, V100), a Gavel-style generated workload (Poisson arrivals,
Gavel's job types, scale factors and durations, Gavel's measured throughputs), rounds of
360 s, in the one round loop (:func:`heteroplan.sim.simulate`), rigid gangs (HadarE: copies). Prints avg JCT, makespan (total time duration),
queuing delay, finish-time fairness and utilization beside the papers' reported ratios, and
the online/offline ratio of the pure online algorithm on small instances.
Writes benchmarks/results/hadar_reproduce.json. The simulations are the sweep
``examples/sweeps/hadar_reproduce.toml`` (jobs, rate, seeds and round from the options below),
run over local processes with :func:`heteroplan.sim.sweep.run_sweep` into
``benchmarks/results/sweeps/hadar_reproduce`` (a rerun reuses finished cells).

    python benchmarks/hadar_reproduce.py            # default: 200 jobs, 6 jobs/h, seed 0 (~1.5 min)
    python benchmarks/hadar_reproduce.py --jobs 100 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import tomllib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from heteroplan.formulations.hadar import HadarInstance, hadar_milp
from heteroplan.sim.hadar_experiments import evaluate_online
from heteroplan.sim.sweep import parse_sweep, run_sweep
from heteroplan.solvers import solve

SWEEP = Path(__file__).resolve().parents[1] / "examples" / "sweeps" / "hadar_reproduce.toml"

PAPER = {  # ratios reported by Hadar (IPDPS'24) / HadarE (arXiv 2503.10918)
    "avg_jct: yarn-cs / hadar": 3.0,
    "avg_jct: gavel / hadar": 2.5,
    "makespan: gavel / hadar": 1.20,
    "queuing: hadar / gavel": 0.87,
    "utilization: hadare / hadar": 1.45,
}
METRICS = ("avg_jct_h", "makespan_h", "avg_queueing_delay_h", "ftf_rho_mean", "utilization", "policy_time_s")


def sweep_tables(jobs: int, rate: float, seeds: list[int], slot: float, skip: list[str]) -> dict:
    """The sweep file's tables with this run's workload size, arrival rate, seeds and slot (s)."""
    tables = tomllib.loads(SWEEP.read_text())
    tables["workloads"] = [{"generate": "gavel", "jobs": jobs, "rate": rate}]
    tables |= {"seeds": seeds, "round": slot}
    tables["policies"] = [p | ({"options": p["options"] | {"slot": slot}} if "options" in p else {})
                          for p in tables["policies"] if p.get("label", p["name"]) not in skip]
    return tables


def small_instances(count: int, seed: int) -> list[dict]:
    """Pure online objective / MILP optimum on random small instances (gangs <= half a node)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        jobs = 6
        rates = rng.choice([0.0, 1.0, 2.0, 3.0], size=(jobs, 2), p=[0.1, 0.3, 0.3, 0.3])
        rates[rates.max(axis=1) == 0, 0] = 1.0
        inst = HadarInstance(
            rng.integers(0, 2, jobs), rng.integers(1, 3, jobs), rng.integers(1, 6, jobs) * 100.0, rates,
            np.array([4, 4]), np.array([0, 1]), slots=6, slot=100.0,
        )
        sol = solve(hadar_milp(inst), mip_gap=0.0, time_limit=30.0)
        online, _, alpha = evaluate_online(inst)
        rows.append({"instance": i, "opt": sol.objective, "online": online, "alpha": alpha,
                     "ratio": online / sol.objective if sol.objective > 0 else 1.0})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rate", type=float, default=6.0, help="arrivals, jobs/hour")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--round", type=float, default=360.0, help="round (slot) length, s")
    ap.add_argument("--small", type=int, default=20, help="small instances for online/offline")
    ap.add_argument("--skip", nargs="*", default=[], help="policies to leave out")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "hadar_reproduce.json"))
    ap.add_argument("--workers", type=int, default=None, help="local processes (default: all cores)")
    ap.add_argument("--store", default=str(Path(__file__).parent / "results" / "sweeps" / "hadar_reproduce"),
                    help="sweep result store")
    args = ap.parse_args()

    t_all = time.perf_counter()
    spec = parse_sweep(sweep_tables(args.jobs, args.rate, args.seeds, args.round, args.skip))
    report = run_sweep(spec, args.store, workers=args.workers, progress=True)
    per_seed: dict[str, list[dict]] = {}
    for record in report.records():
        if record["status"] != "ok":
            print(f"! {record['labels']['policy']} seed {record['labels']['seed']}: {record['error']}")
            continue
        m = record["metrics"] | {"wall_s": record["wall_s"]}
        per_seed.setdefault(record["labels"]["policy"], []).append(m)
    summary = {n: {k: float(np.mean([r[k] for r in rows])) for k in (*METRICS, "wall_s")} for n, rows in per_seed.items()}

    print(f"Gavel-108, {args.jobs} jobs at {args.rate} jobs/h, seeds {args.seeds}, rounds {args.round:g} s")
    print(f"{'policy':<14}{'avg JCT h':>10}{'makespan h':>11}{'queue h':>9}{'FTF rho':>9}{'util':>7}{'policy s':>9}")
    for n, s in summary.items():
        print(f"{n:<14}{s['avg_jct_h']:>10.2f}{s['makespan_h']:>11.1f}{s['avg_queueing_delay_h']:>9.2f}"
              f"{s['ftf_rho_mean']:>9.2f}{s['utilization']:>7.3f}{s['policy_time_s']:>9.1f}")

    def ratio(a: str, b: str, key: str) -> float | None:
        return summary[a][key] / summary[b][key] if a in summary and b in summary and summary[b][key] else None

    ours = {}
    for variant in ("hadar", "hadar-committed"):
        ours[variant] = {
            "avg_jct: yarn-cs / hadar": ratio("yarn-cs", variant, "avg_jct_h"),
            "avg_jct: gavel / hadar": ratio("gavel", variant, "avg_jct_h"),
            "makespan: gavel / hadar": ratio("gavel", variant, "makespan_h"),
            "queuing: hadar / gavel": ratio(variant, "gavel", "avg_queueing_delay_h"),
            "utilization: hadare / hadar": ratio("hadare", variant, "utilization"),
            # the same against the Sia artifact's Gavel (max-sum-throughput, its mechanism)
            "avg_jct: gavel-sia / hadar": ratio("gavel-sia", variant, "avg_jct_h"),
            "makespan: gavel-sia / hadar": ratio("gavel-sia", variant, "makespan_h"),
            "queuing: hadar / gavel-sia": ratio(variant, "gavel-sia", "avg_queueing_delay_h"),
        }
    print(f"\n{'ratio':<30}{'paper':>7}{'ours (hadar)':>14}{'(committed)':>15}")
    for key in ours["hadar"]:
        paper = PAPER.get(key.replace("gavel-sia", "gavel"), float("nan"))
        cells = [ours[v][key] for v in ("hadar", "hadar-committed")]
        print(f"{key:<30}{paper:>7.2f}" + "".join(f"{c:>14.2f} " if c is not None else f"{'-':>14} " for c in cells))

    rows = small_instances(args.small, seed=12345) if args.small else []
    if rows:
        r = np.array([x["ratio"] for x in rows])
        alphas = np.array([x["alpha"] for x in rows])
        worst = min(rows, key=lambda x: x["ratio"] * 2 * x["alpha"])
        print(f"\nPure online / offline MILP optimum on {len(rows)} small instances (6 jobs, 2x4 GPUs, 6 slots):"
              f" min {r.min():.3f}, median {np.median(r):.3f}, mean {r.mean():.3f};"
              f" alpha in [{alphas.min():.2f}, {alphas.max():.2f}];"
              f" min ratio * 2 alpha = {worst['ratio'] * 2 * worst['alpha']:.3f} (>= 1 means within the bound)")
    out = {
        "setting": {"cluster": "gavel-108", "jobs": args.jobs, "rate_per_h": args.rate, "seeds": args.seeds,
                    "round_s": args.round, "machine": platform.machine(), "python": platform.python_version()},
        "summary": summary,
        "per_seed": per_seed,
        "ratios": {"paper": PAPER, "ours": ours},
        "online_vs_offline": rows,
        "total_wall_s": time.perf_counter() - t_all,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\nwrote {args.out} ({out['total_wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
