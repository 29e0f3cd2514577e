"""``heteroplan simulate``: replay a workload under several policies and compare them.

With ``--out``, each policy's result is written as soon as it exists (atomically: a reader
never sees half a file), with the run's metadata; SIGINT/SIGTERM stop the run but keep
every policy that finished.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from heteroplan import __version__
from heteroplan.argtypes import integer, number
from heteroplan.atomic_json import write_json_atomic
from heteroplan.cluster import PRESETS, Cluster, preset
from heteroplan.commands.outdir import writable_dir
from heteroplan.policies.registry import POLICIES, make_policy
from heteroplan.signals import Interrupted, SignalGuard
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.sim.loop import simulate
from heteroplan.sim.metrics import SimResult, compare_table
from heteroplan.workload.sia import BUNDLED_WORKLOADS, JobSpec, bundled_workload, read_sia_workload

# Exit codes (docs/errors.md): 0 every policy ran to the end; 2 bad input; 3 a simulation stopped
# early (its error is in the table and results.json); 128 + signal number when interrupted.
EXIT_STOPPED_EARLY = 3


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
    p.add_argument("--jobs", type=integer(1), default=None, help="only the first N jobs of the workload (N >= 1)")
    p.add_argument("--round", type=number(0), default=None,
                   help="round length in seconds (default: the policy's own, 60 s for Sia, 360 s for Gavel)")
    p.add_argument("--max-hours", type=number(0), default=None,
                   help="stop after this many simulated hours (> 0; default 2160 = 90 days)")
    p.add_argument("--fidelity", choices=["sia", "ideal"], default="sia",
                   help="simulator mechanisms: the Sia artifact's slowdowns, estimated batch sizes and "
                   "per-batch gradient statistics (default), or none of them")
    p.add_argument("--out", default=None,
                   help="directory for results.json, one <policy>.json per policy (written as each finishes) and PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON instead of a table")
    p.set_defaults(default_policies=default_policies)


def load_inputs(args: argparse.Namespace) -> tuple[Cluster, list[JobSpec]]:
    from heteroplan.perf.applications import APPLICATIONS

    cluster = preset(args.cluster) if args.cluster in PRESETS else Cluster.from_json(args.cluster)
    if args.workload in BUNDLED_WORKLOADS:
        jobs = bundled_workload(args.workload)
    else:
        limits = {name: app.max_batch_size for name, app in APPLICATIONS.items()}
        jobs = read_sia_workload(args.workload, known_apps=set(APPLICATIONS), batch_limits=limits)
    if args.jobs is not None:
        jobs = jobs[: args.jobs]
    return cluster, jobs


def inputs_hash(cluster: Cluster, jobs: list[JobSpec]) -> str:
    """SHA-256 of the parsed cluster and jobs: equal hashes, equal inputs."""
    text = json.dumps({"cluster": cluster.to_dict(), "jobs": [asdict(j) for j in jobs]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def run_metadata(args: argparse.Namespace, cluster: Cluster, jobs: list[JobSpec], policies: list[str]) -> dict[str, Any]:
    """What a result file needs to be reproduced: version, seed, inputs' hash and options."""
    return {
        "heteroplan_version": __version__,
        "seed": 0,  # the simulator's default seed (it is deterministic)
        "inputs_sha256": inputs_hash(cluster, jobs),
        "workload": args.workload, "cluster": cluster.name, "jobs": len(jobs),
        "options": {"policies": policies, "round_s": args.round, "max_hours": args.max_hours,
                    "fidelity": args.fidelity, "jobs": args.jobs},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run(args: argparse.Namespace) -> int:
    out = writable_dir(args.out) if args.out else None
    cluster, jobs = load_inputs(args)
    policies = args.policy or list(args.default_policies)
    print(f"{len(jobs)} jobs of {args.workload} on {cluster.name} ({cluster.num_gpus} GPUs)",
          file=sys.stderr if args.json else sys.stdout)
    meta = run_metadata(args, cluster, jobs, policies)
    fidelity = SimFidelity.ideal() if args.fidelity == "ideal" else SimFidelity()
    results: list[SimResult] = []
    stopped: Interrupted | None = None
    with SignalGuard() as guard:
        try:
            for name in policies:
                result = simulate(jobs, cluster, make_policy(name), round_length=args.round,
                                  max_time=args.max_hours * 3600 if args.max_hours is not None else None,
                                  progress=False if args.quiet or args.json else None, fidelity=fidelity)
                results.append(result)
                if out is not None:
                    with guard.deferred():  # the files of one result are written all or none
                        write_result(out, result, results, meta, pending=policies[len(results):])
        except BaseException as exc:
            stopped = guard.interruption(exc)
            if stopped is None:
                raise
            partial = getattr(exc, "result", None)
            if out is not None and partial is not None:  # the policy that was running: what it had done
                write_json_atomic(out / f"{partial.policy}.partial.json",
                                  {"meta": meta | {"interrupted": str(stopped)}, "result": partial.to_dict()}, default=float)
    if args.json:
        print(json.dumps([r.summary() for r in results], indent=1, default=float))
    elif results:
        print(compare_table(results))
    if out is not None and results:
        write_plots(out, results)
        print(f"wrote {out / 'results.json'}, <policy>.json and plots (jct_cdf.png, gpus_<policy>.png)",
              file=sys.stderr)
    if stopped is not None:
        done = ", ".join(r.policy for r in results) or "none"
        print(f"heteroplan simulate: interrupted by {stopped}; finished policies kept: {done}", file=sys.stderr)
        if out is not None:
            write_json_atomic(out / "run.json", meta | {"completed": [r.policy for r in results],
                                                        "interrupted": str(stopped)})
        return 128 + stopped.signum
    return EXIT_STOPPED_EARLY if any(r.error for r in results) else 0


def write_result(out: Path, result: SimResult, results: list[SimResult], meta: dict[str, Any],
                 pending: list[str]) -> None:
    """``<policy>.json`` for the newest result, then ``results.json`` and ``run.json`` for all so far."""
    write_json_atomic(out / f"{result.policy}.json", {"meta": meta, "result": result.to_dict()}, default=float)
    write_json_atomic(out / "results.json", {r.policy: r.to_dict() for r in results}, default=float)
    write_json_atomic(out / "run.json", meta | {"completed": [r.policy for r in results], "pending": pending},
                      default=float)


def write_plots(out: Path, results: list[SimResult]) -> None:
    from heteroplan import plots

    plots.jct_cdf(results, path=out / "jct_cdf.png")
    for r in results:
        plots.gpus_over_time(r, path=out / f"gpus_{r.policy}.png")
