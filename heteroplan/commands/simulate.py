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

from heteroplan.argtypes import integer, nonempty, number
from heteroplan.atomic_json import inside, write_json_atomic
from heteroplan.cluster import PRESETS, Cluster, preset
from heteroplan.commands.jsonout import print_json
from heteroplan.commands.outdir import writable_dir
from heteroplan.inputs import MIN_ROUND_S, enum_values
from heteroplan.names import path_component, printable
from heteroplan.policies.registry import POLICIES, make_policy
from heteroplan.signals import Interrupted, SignalGuard
from heteroplan.sim.fidelity import FidelityPreset, SimFidelity
from heteroplan.sim.loop import simulate
from heteroplan.sim.metrics import SimResult, compare_table
from heteroplan.version import __version__
from heteroplan.workload.sia import (
    BUNDLED_WORKLOADS,
    JobSpec,
    bundled_workload,
    is_bundled_workload,
    read_sia_workload,
)

# Exit codes (docs/errors.md): 0 every policy ran to the end; 2 bad input; 3 a simulation stopped
# early (its error is in the table and results.json); 128 + signal number when interrupted.
EXIT_STOPPED_EARLY = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="replay a workload on a cluster under several policies")
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser, default_policies: tuple[str, ...] = ("sia",)) -> None:
    p.add_argument("--workload", type=nonempty("a bundled workload or a CSV path"), default="philly/workload-1",
                   help=f"Sia workload CSV path, or a bundled one: {', '.join(BUNDLED_WORKLOADS[:2])}, ..., newtrace/seed-0, ...")
    p.add_argument("--cluster", type=nonempty("a preset name or a path"), default="sia-64", help=f"preset ({', '.join(PRESETS)}) or cluster JSON file")
    p.add_argument("--policy", action="append", choices=sorted(POLICIES),
                   help=f"policy to run (repeatable; default {', '.join(default_policies)})")
    p.add_argument("--jobs", type=integer(1), default=None, help="only the first N jobs of the workload (N >= 1)")
    p.add_argument("--round", type=number(MIN_ROUND_S, strict=False), default=None,
                   help="round length in seconds (default: the policy's own, 60 s for Sia, 360 s for Gavel)")
    p.add_argument("--max-hours", type=number(0), default=None,
                   help="stop after this many simulated hours (> 0; default 2160 = 90 days)")
    p.add_argument("--fidelity", choices=enum_values(FidelityPreset), default=FidelityPreset.SIA.value,
                   help="simulator mechanisms: the Sia artifact's slowdowns, estimated batch sizes and "
                   "per-batch gradient statistics (default), or none of them")
    p.add_argument("--out", type=nonempty("a path"), default=None,
                   help="directory for results.json, one <policy>.json per policy (written as each finishes) and PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON instead of a table")
    p.set_defaults(default_policies=default_policies)


def load_inputs(args: argparse.Namespace) -> tuple[Cluster, list[JobSpec]]:
    from heteroplan.perf.applications import APPLICATIONS

    cluster = preset(args.cluster) if args.cluster in PRESETS else Cluster.from_json(args.cluster)
    if is_bundled_workload(args.workload):
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
    print(printable(f"{len(jobs)} jobs of {args.workload} on {cluster.name} ({cluster.num_gpus} GPUs)"),
          file=sys.stderr if args.json else sys.stdout)
    meta = run_metadata(args, cluster, jobs, policies)
    earlier = earlier_results(out, meta, policies) if out is not None else {}
    fidelity = SimFidelity.preset(args.fidelity)
    results: list[SimResult] = []
    stopped: Interrupted | None = None
    # the guard stays up until run.json says how the run ended: a second signal cannot cut that short
    with SignalGuard() as guard:
        try:
            for name in policies:
                policy = make_policy(name)
                if out is not None:
                    result_path(out, policy.name, ".json")  # a name unfit for a file is refused before the run
                result = simulate(jobs, cluster, policy, round_length=args.round,
                                  max_time=args.max_hours * 3600 if args.max_hours is not None else None,
                                  progress=False if args.quiet or args.json else None, fidelity=fidelity)
                results.append(result)
                warn_rejected(result)
                if out is not None:
                    with guard.deferred():  # the files of one result are written all or none
                        write_result(out, result, results, meta, pending=policies[len(results):], earlier=earlier)
        except BaseException as exc:
            stopped = guard.interruption(exc)
            if stopped is None:
                raise
            partial = getattr(exc, "result", None)
            if out is not None and partial is not None:  # the policy that was running: what it had done
                write_json_atomic(result_path(out, partial.policy, ".partial.json"),
                                  {"meta": meta | {"interrupted": str(stopped)}, "result": partial.to_dict()},
                                  default=float, root=out)
            if out is not None:
                done = [r.policy for r in results]
                write_json_atomic(out / "run.json", meta | {"completed": list(earlier) + done,
                                                            "pending": [p for p in policies if p not in done],
                                                            "interrupted": str(stopped)}, root=out)
    if args.json:
        print_json([r.summary().to_dict() for r in results])
    elif results:
        print(compare_table(results))
    if out is not None and results:
        write_plots(out, results)
        print(f"wrote {out / 'results.json'}, <policy>.json and plots (jct_cdf.png, gpus_<policy>.png)",
              file=sys.stderr)
    if stopped is not None:
        done = ", ".join(printable(r.policy) for r in results) or "none"
        print(f"heteroplan simulate: interrupted by {stopped}; finished policies kept: {done}", file=sys.stderr)
        return 128 + stopped.signum
    return EXIT_STOPPED_EARLY if any(r.error for r in results) else 0


def warn_rejected(result: SimResult, limit: int = 5) -> None:
    """Say on stderr which jobs the policy could never run (also in results.json's ``rejected``)."""
    if not result.rejected:
        return
    shown = "; ".join(f"{printable(job)}: {printable(why)}" for job, why in list(result.rejected.items())[:limit])
    more = f" (and {len(result.rejected) - limit} more)" if len(result.rejected) > limit else ""
    print(f"heteroplan: warning: {printable(result.policy)}: {len(result.rejected)} job(s) rejected, they can never run on "
          f"this cluster: {shown}{more}", file=sys.stderr)


def earlier_results(out: Path, meta: dict[str, Any], policies: list[str]) -> dict[str, Any]:
    """The results already in ``out`` of other policies on the same inputs (kept in results.json
    beside this run's); an ``out`` holding a run on other inputs or options is refused up front."""
    from heteroplan.errors import InputError
    from heteroplan.inputs import read_json

    if not (out / "run.json").exists():
        return {}
    before = read_json(out / "run.json", "--out run.json")
    same = ("inputs_sha256", "seed")
    if not isinstance(before, dict) or any(before.get(k) != meta[k] for k in same) or \
            {k: v for k, v in before.get("options", {}).items() if k != "policies"} != \
            {k: v for k, v in meta["options"].items() if k != "policies"}:
        raise InputError("--out", str(out), "holds the results of a run on other inputs or options; "
                         "give another directory (or empty this one)")
    stored = read_json(out / "results.json", "--out results.json") if (out / "results.json").exists() else {}
    if not isinstance(stored, dict):
        raise InputError("--out results.json", str(out / "results.json"), "is not a table of results")
    return {name: value for name, value in stored.items() if name not in policies}


def write_result(out: Path, result: SimResult, results: list[SimResult], meta: dict[str, Any],
                 pending: list[str], earlier: dict[str, Any] | None = None) -> None:
    """``<policy>.json`` for the newest result, then ``results.json`` (``earlier`` runs' policies
    kept) and ``run.json`` for all so far."""
    earlier = earlier or {}
    write_json_atomic(result_path(out, result.policy, ".json"), {"meta": meta, "result": result.to_dict()},
                      default=float, root=out)
    write_json_atomic(out / "results.json", earlier | {r.policy: r.to_dict() for r in results}, default=float,
                      root=out)
    write_json_atomic(out / "run.json", meta | {"completed": list(earlier) + [r.policy for r in results],
                                                "pending": pending}, default=float, root=out)


def result_path(out: Path, policy: str, suffix: str, prefix: str = "") -> Path:
    """The file of ``policy``'s result in ``out`` (``<prefix><policy><suffix>``): the policy's
    name passes :func:`~heteroplan.names.path_component` (a plugin's ``../x`` is refused)."""
    return out / f"{prefix}{path_component('policy name', policy)}{suffix}"


def write_plots(out: Path, results: list[SimResult]) -> None:
    from heteroplan import plots

    plots.jct_cdf(results, path=inside(out / "jct_cdf.png", out))
    for r in results:
        plots.gpus_over_time(r, path=inside(result_path(out, r.policy, ".png", prefix="gpus_"), out))
