"""``heteroplan hadar``: Hadar / HadarE against Gavel and YARN-CS in Gavel's simulated setting."""

from __future__ import annotations

import argparse

from heteroplan.cluster import preset

POLICIES = ("hadar", "hadare", "gavel", "yarn-cs", "tiresias")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hadar", help="Hadar/HadarE vs Gavel, YARN-CS, Tiresias on a generated Gavel workload")
    p.add_argument("--jobs", type=int, default=60, help="generated jobs (default 60)")
    p.add_argument("--rate", type=float, default=6.0, help="arrivals per hour (default 6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--round", type=float, default=360.0, help="slot length in seconds (default 360)")
    p.add_argument("--policy", action="append", choices=POLICIES, help="repeatable; default all but tiresias")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from heteroplan.policies.registry import make_policy
    from heteroplan.sim.loop import simulate
    from heteroplan.workload.gavel import generate_workload, load_throughputs
    from heteroplan.workload.rigid import rigid_jobs_from_gavel

    cluster = preset("gavel-108")
    jobs = rigid_jobs_from_gavel(generate_workload(args.jobs, args.rate, seed=args.seed), load_throughputs())
    names = args.policy or [p for p in POLICIES if p != "tiresias"]
    print(f"{len(jobs)} generated jobs at {args.rate:g}/h on {cluster.name} ({cluster.num_gpus} GPUs), "
          f"slots of {args.round:g} s")
    cols = ("avg_jct_h", "makespan_h", "avg_queuing_delay_h", "ftf_rho_mean", "utilization")
    print(f"{'policy':>9} " + " ".join(f"{c:>20}" for c in cols) + f" {'unfinished':>10}")
    for name in names:
        res = simulate(jobs, cluster, make_policy(name, round_length=args.round), progress=False)
        m = res.summary()
        print(f"{name:>9} " + " ".join(f"{m[c]:>20.3f}" for c in cols) + f" {len(res.unfinished):>10}")
    return 0
