"""``heteroplan hadar``: Hadar / HadarE against Gavel and YARN-CS in Gavel's simulated setting."""

from __future__ import annotations

import argparse
import sys

from heteroplan.argtypes import integer, number
from heteroplan.cluster import preset
from heteroplan.commands.jsonout import print_json
from heteroplan.errors import InputError
from heteroplan.inputs import MAX_GENERATED_JOBS, MIN_ROUND_S
from heteroplan.names import printable
from heteroplan.signals import Interrupted, SignalGuard

POLICIES = ("hadar", "hadare", "gavel", "yarn-cs", "tiresias")

MAX_JOBS = 5_000
"""Most jobs one ``heteroplan hadar`` run takes. It runs each policy in turn in one process and
prints a policy's row when its whole simulation ends: 400 jobs took 190 s for Hadar alone on a busy
2-core machine, so 100,000 would run for days with nothing written. Larger workloads belong in a
sweep or regime file (``heteroplan sweep``), which runs cells in parallel, writes each as it
finishes and keeps them on Ctrl-C."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hadar", help="Hadar/HadarE vs Gavel, YARN-CS, Tiresias on a generated Gavel workload")
    p.add_argument("--jobs", type=integer(1, MAX_GENERATED_JOBS), default=60,
                   help=f"generated jobs, at most {MAX_JOBS:,} (default 60; more: a sweep file)")
    p.add_argument("--rate", type=number(1e-3, strict=False, high=1e6), default=6.0,
                   help="arrivals per hour, in [0.001, 1e6] (default 6)")
    p.add_argument("--seed", type=integer(0), default=0, help="seed of the generated workload (default 0)")
    p.add_argument("--round", type=number(MIN_ROUND_S, strict=False), default=360.0, help="slot length in seconds (default 360)")
    p.add_argument("--policy", action="append", choices=POLICIES, help="repeatable; default all but tiresias")
    p.add_argument("--json", action="store_true", help="print one JSON object: each policy's metrics by name")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from heteroplan.commands.simulate import warn_rejected
    from heteroplan.policies.registry import make_policy
    from heteroplan.sim.loop import simulate
    from heteroplan.sim.metrics import table_header, table_row, table_widths
    from heteroplan.workload.gavel import generate_workload, load_throughputs
    from heteroplan.workload.rigid import rigid_jobs_from_gavel

    if args.jobs > MAX_JOBS:
        raise InputError("--jobs", args.jobs, f"at most {MAX_JOBS:,} jobs in one `heteroplan hadar` run (each policy "
                         "runs in turn and its row is printed when it ends; 400 jobs took minutes per policy); for more, "
                         "write a sweep file with a `generate` workload and run `heteroplan sweep`, which writes each "
                         "cell as it finishes")
    cluster = preset("gavel-108")
    jobs = rigid_jobs_from_gavel(generate_workload(args.jobs, args.rate, seed=args.seed), load_throughputs())
    names = args.policy or [p for p in POLICIES if p != "tiresias"]
    print(f"{len(jobs)} generated jobs at {args.rate:g}/h on {cluster.name} ({cluster.num_gpus} GPUs), "
          f"slots of {args.round:g} s", file=sys.stderr if args.json else sys.stdout)
    cols = ("policy", "finished", "avg_jct_h", "makespan_h", "avg_queueing_delay_h", "ftf_rho_mean", "utilization")
    widths = table_widths(cols, names)  # `simulate`'s table, a row printed as each policy finishes
    if not args.json:
        print("\n".join(table_header(cols, widths)), flush=True)
    rows = {}
    stopped: Interrupted | None = None
    with SignalGuard() as guard:  # SIGINT/SIGTERM: the policies that finished are still printed
        try:
            for name in names:
                # progress bar on stderr when it is a terminal (never on stdout: the table stays as it was)
                res = simulate(jobs, cluster, make_policy(name, round_length=args.round), progress=None)
                warn_rejected(res)
                m = res.summary()
                rows[name] = {c: m[c] for c in cols[2:]} | {"unfinished": len(res.unfinished)}
                if not args.json:
                    print(table_row(m, cols, widths), flush=True)
        except BaseException as exc:
            stopped = guard.interruption(exc)
            if stopped is None:
                raise
        if args.json:
            print_json(rows)
        if stopped is not None:
            print(f"heteroplan hadar: interrupted by {stopped}; finished policies kept: {printable(', '.join(rows)) or 'none'}",
                  file=sys.stderr)
            return 128 + stopped.signum
    return 0
