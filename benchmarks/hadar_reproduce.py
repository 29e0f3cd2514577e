"""Hadar / HadarE vs Gavel, YARN-CS and Tiresias on Gavel's simulated cluster.

Hadar: Sultana, Xu, Yuan, Chen, Tzeng, "Hadar: Heterogeneity-Aware Optimization-Based Online
Scheduling for Deep Learning Cluster", IPDPS 2024. HadarE: Sultana, Pakka, Xu, Yuan, Chen,
Tzeng, arXiv 2503.10918 (2025). Only the abstracts are public; heteroplan's variant is
described in docs/hadar.md.

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
    python benchmarks/hadar_reproduce.py --regime examples/sweeps/hadar_all_at_t0.toml [--seeds 0 1]

``--regime`` runs a regime file (:func:`heteroplan.sim.hadar_experiments.load_regime`: one
restart delay for every policy, a measured window) and prints every policy beside the floors
(avg JCT floor: each measured job's solo time on its fastest type plus one restore; makespan
floor: :func:`~heteroplan.sim.hadar_experiments.makespan_floor`), per workload family, as the
mean and range over seeds; writes benchmarks/results/hadar_<regime>.json.
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
from heteroplan.sim.hadar_experiments import evaluate_online, load_regime, run_regime
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


def small_instances(count: int, seed: int, capacity: int = 4, jobs: int = 6) -> list[dict]:
    """Pure online objective vs the MILP optimum on random small instances (2 nodes, one per
    type, ``capacity`` GPUs each; gangs of 1-2: at most half a node when capacity = 4), with
    the utility each loses split into jobs the online rule dropped and jobs it finished later."""
    from heteroplan.formulations.hadar import hadar_utility

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        rates = rng.choice([0.0, 1.0, 2.0, 3.0], size=(jobs, 2), p=[0.1, 0.3, 0.3, 0.3])
        rates[rates.max(axis=1) == 0, 0] = 1.0
        inst = HadarInstance(
            rng.integers(0, 2, jobs), rng.integers(1, 3, jobs), rng.integers(1, 6, jobs) * 100.0, rates,
            np.array([capacity, capacity]), np.array([0, 1]), slots=6, slot=100.0,
        )
        sol = solve(hadar_milp(inst), mip_gap=0.0, time_limit=30.0)
        online, slots, alpha = evaluate_online(inst)
        f = hadar_utility(inst)
        z = np.asarray(sol["z"])
        y = np.asarray(sol["y"]).round()
        opt_job = (z * f).sum(axis=1)
        on_job = np.array([f[j, slots[f"j{j}"]] if f"j{j}" in slots and slots[f"j{j}"] < inst.slots else 0.0
                           for j in range(jobs)])
        dropped = [j for j in range(jobs) if f"j{j}" not in slots and opt_job[j] > 0]
        # the optimum changes a job's pace (types) between slots, or pauses it, where the
        # online rule keeps one pace: a schedule outside the online rule's family
        paces = [set(np.flatnonzero(y[j].sum(axis=0))) for j in range(jobs)]
        runs = [np.flatnonzero(y[j].sum(axis=1)) for j in range(jobs)]
        opt_moves = sum(len(p) > 1 or (len(r) > 1 and np.ptp(r) + 1 > len(r)) for p, r in zip(paces, runs, strict=True))
        rows.append({"instance": i, "capacity": capacity, "opt": sol.objective, "online": online, "alpha": alpha,
                     "ratio": online / sol.objective if sol.objective > 0 else 1.0,
                     "lost_to_dropped": float(opt_job[dropped].sum()),
                     "lost_to_later": float(sum(max(0.0, opt_job[j] - on_job[j]) for j in range(jobs) if j not in dropped)),
                     "opt_jobs_changing_pace_or_pausing": int(opt_moves)})
    return rows


def gap_report(rows: list[dict], label: str) -> None:
    """Print the online/optimum ratio's distribution and where the worst instances lose."""
    r = np.array([x["ratio"] for x in rows])
    bound = np.array([x["ratio"] * 2 * x["alpha"] for x in rows])
    print(f"{label}: {len(rows)} instances; online/optimum min {r.min():.3f}, p10 {np.quantile(r, 0.1):.3f}, "
          f"median {np.median(r):.3f}, mean {r.mean():.3f}; optimum reached in {np.mean(r > 1 - 1e-9):.0%}; "
          f"below 1/(2 alpha): {int((bound < 1 - 1e-9).sum())}")
    worst = sorted(rows, key=lambda x: x["ratio"])[: max(1, len(rows) // 10)]
    lost_d = sum(x["lost_to_dropped"] for x in worst)
    lost_l = sum(x["lost_to_later"] for x in worst)
    moves = np.mean([x["opt_jobs_changing_pace_or_pausing"] for x in worst])
    print(f"  worst {len(worst)}: utility lost to dropped jobs {lost_d:.1f}, to later completions {lost_l:.1f}; "
          f"optimum changes pace or pauses {moves:.1f} jobs per instance")


REGIME_METRICS = ("avg_jct_h", "window_avg_jct_h", "floor_jct_h", "jct_over_floor", "makespan_h", "floor_makespan_h",
                  "makespan_over_floor", "avg_queueing_delay_h", "restarts_per_job", "utilization", "util_queued_k80",
                  "util_queued_p100", "util_queued_v100", "queued_rounds", "window_unfinished", "policy_time_s")


def regime(path: str, seeds: list[int] | None, workers: int | None, out_dir: Path, skip: list[str] | None = None,
           families: list[str] | None = None, stored_only: bool = False) -> dict:
    """Run one regime file (optionally fewer seeds, policies or workload families); print mean
    [min, max] over seeds per (family, policy); return the JSON."""
    from dataclasses import replace

    reg = load_regime(path)
    spec = reg.spec
    if seeds is not None:
        spec = replace(spec, seeds=tuple(seeds))
    if skip:
        spec = replace(spec, policies=tuple(p for p in spec.policies if p.label not in skip))
    if families:
        spec = replace(spec, workloads=tuple(w for w in spec.workloads if w.family in families))
    store = out_dir / "sweeps" / f"{spec.name}_restart{reg.setting.restart_delay_s:g}"
    if stored_only:  # report the finished cells, run nothing
        from heteroplan.sim.sweep.store import ResultStore

        records = ResultStore(store).records(c.key for c in spec.cells())
    else:
        records = run_regime(type(reg)(spec, reg.setting), store, workers=workers, progress=False).records()
    cells: dict[tuple[str, str], list[dict]] = {}
    for record in records:
        lab = record["labels"]
        if record["status"] != "ok":
            print(f"! {lab['policy']} {lab['family']} seed {lab['seed']}: {record['error']}")
            continue
        metrics = dict(record["metrics"])
        if "avg_queuing_delay_h" in metrics:  # records stored before the key's rename
            metrics.setdefault("avg_queueing_delay_h", metrics.pop("avg_queuing_delay_h"))
        cells.setdefault((lab["family"], lab["policy"]), []).append(metrics | {"seed": lab["seed"]})
    stats = {f"{fam} | {pol}": {k: {"mean": float(np.mean([r[k] for r in rows])), "min": float(np.min([r[k] for r in rows])),
                                   "max": float(np.max([r[k] for r in rows]))} for k in REGIME_METRICS if k in rows[0]}
             | {"seeds": sorted(r["seed"] for r in rows)} for (fam, pol), rows in cells.items()}
    print(f"\n{spec.name}: restart {reg.setting.restart_delay_s:g} s for every policy, window {reg.setting.window}, "
          f"mean [min, max] over seeds")
    head = (f"{'family | policy':<18}{'avg JCT h':>24}{'floor h':>9}{'x floor':>8}{'makespan h':>24}"
            f"{'floor h':>9}{'x floor':>8}{'queue h':>8}{'restarts/job':>13}{'util':>6}  util while queued k80/p100/v100")
    print(head)

    def cell(st: dict, key: str, fmt: str) -> str:
        v = st.get(key)
        return "-" if v is None else (f"{v['mean']:{fmt}} [{v['min']:{fmt}}, {v['max']:{fmt}}]")

    for name, st in stats.items():
        jct_key = "window_avg_jct_h" if reg.setting.window else "avg_jct_h"
        print(f"{name:<18}{cell(st, jct_key, '.2f'):>24}{st['floor_jct_h']['mean']:>9.2f}"
              f"{st['jct_over_floor']['mean']:>8.2f}{cell(st, 'makespan_h', '.1f'):>24}"
              f"{st['floor_makespan_h']['mean']:>9.1f}{st['makespan_over_floor']['mean']:>8.2f}"
              f"{st['avg_queueing_delay_h']['mean']:>8.2f}{st['restarts_per_job']['mean']:>13.2f}"
              f"{st['utilization']['mean']:>6.2f}  " + "/".join(
                  f"{st[f'util_queued_{k}']['mean']:.2f}" for k in ("k80", "p100", "v100")))
    out = {"regime": spec.name, "file": str(path), "restart_delay_s": reg.setting.restart_delay_s,
           "window": reg.setting.window, "seeds": list(spec.seeds), "stats": stats,
           "per_seed": {f"{f} | {p}": rows for (f, p), rows in cells.items()}}
    dest = out_dir / f"hadar_{spec.name.removeprefix('hadar_')}.json"
    dest.write_text(json.dumps(out, indent=1))
    print(f"wrote {dest}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gap", type=int, default=0, help="only the online/offline study, on this many instances per family")
    ap.add_argument("--stored-only", action="store_true", help="with --regime: report finished cells, run none")
    ap.add_argument("--family", nargs="*", default=None, help="with --regime: only these workload families")
    ap.add_argument("--regime", nargs="*", default=None, help="regime files (examples/sweeps/hadar_*.toml) to run instead")
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
    if args.gap:
        small = small_instances(args.gap, seed=12345)
        big = small_instances(args.gap, seed=54321, capacity=2, jobs=4)
        gap_report(small, "gangs <= half a node (6 jobs, 2 x 4 GPUs, 6 slots)")
        gap_report(big, "node-sized gangs (4 jobs, 2 x 2 GPUs, 6 slots)")
        dest = Path(args.out).parent / "hadar_online_offline.json"
        dest.write_text(json.dumps({"small_demand": small, "node_sized": big}, indent=1))
        print(f"wrote {dest}")
        return
    if args.regime is not None:
        seeds = args.seeds if "--seeds" in sys.argv else None
        for path in args.regime:
            regime(path, seeds, args.workers, Path(args.out).parent, args.skip, args.family, args.stored_only)
        return

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
        print()
        gap_report(rows, "Pure online vs offline MILP (6 jobs, 2 x 4 GPUs, 6 slots; gangs <= half a node)")
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
