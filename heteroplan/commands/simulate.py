"""``heteroplan simulate``: replay a workload under several policies and compare them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from heteroplan.cluster import PRESETS, Cluster, preset
from heteroplan.policies.registry import POLICIES
from heteroplan.sim.compare import compare_policies
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.sim.metrics import SimResult, compare_table
from heteroplan.workload.sia import BUNDLED_WORKLOADS, bundled_workload, read_sia_workload


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="replay a workload on a cluster under several policies")
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser, default_policies: tuple[str, ...] = ("sia",)) -> None:
    p.add_argument("--workload", default="philly/workload-1",
                   help=f"Sia workload CSV path, or a bundled one: {', '.join(BUNDLED_WORKLOADS[:2])}, ...")
    p.add_argument("--cluster", default="sia-64", help=f"preset ({', '.join(PRESETS)}) or cluster JSON file")
    p.add_argument("--policy", action="append", choices=sorted(POLICIES),
                   help=f"policy to run (repeatable; default {', '.join(default_policies)})")
    p.add_argument("--jobs", type=int, default=None, help="only the first N jobs of the workload")
    p.add_argument("--round", type=float, default=None,
                   help="round length in seconds (default: the policy's own, 60 s for Sia, 360 s for Gavel)")
    p.add_argument("--max-hours", type=float, default=None,
                   help="stop after this many simulated hours (default 2160 = 90 days)")
    p.add_argument("--fidelity", choices=["sia", "ideal"], default="sia",
                   help="simulator mechanisms: the Sia artifact's slowdowns, estimated batch sizes and "
                   "per-batch gradient statistics (default), or none of them")
    p.add_argument("--out", default=None, help="directory for results.json and PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(default_policies=default_policies)


def load_inputs(args: argparse.Namespace):
    cluster = preset(args.cluster) if args.cluster in PRESETS else Cluster.from_json(args.cluster)
    jobs = bundled_workload(args.workload) if args.workload in BUNDLED_WORKLOADS else read_sia_workload(args.workload)
    if args.jobs:
        jobs = jobs[: args.jobs]
    return cluster, jobs


def run(args: argparse.Namespace) -> int:
    cluster, jobs = load_inputs(args)
    policies = args.policy or list(args.default_policies)
    print(f"{len(jobs)} jobs of {args.workload} on {cluster.name} ({cluster.num_gpus} GPUs)")
    results = compare_policies(jobs, cluster, policies, progress=None if not args.quiet else False,
                               round_length=args.round,
                               max_time=args.max_hours * 3600 if args.max_hours else None,
                               fidelity=SimFidelity.ideal() if args.fidelity == "ideal" else SimFidelity())
    print(compare_table(results))
    if args.out:
        write_outputs(results, Path(args.out))
    return 0 if not any(r.error for r in results) else 3


def write_outputs(results: list[SimResult], out: Path) -> None:
    from heteroplan import plots

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({r.policy: r.to_dict() for r in results}, default=float))
    plots.jct_cdf(results, path=out / "jct_cdf.png")
    for r in results:
        plots.gpus_over_time(r, path=out / f"gpus_{r.policy}.png")
    print(f"wrote {out / 'results.json'} and plots (jct_cdf.png, gpus_<policy>.png)")
