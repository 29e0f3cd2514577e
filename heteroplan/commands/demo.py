"""``heteroplan demo``: Sia against its baselines on a bundled trace (about a minute on 2 cores)."""

from __future__ import annotations

import argparse

from heteroplan.commands import simulate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="Sia vs baselines on the bundled Philly trace (short)")
    simulate.add_arguments(p, default_policies=("sia", "pollux", "gavel", "fifo"))
    p.set_defaults(func=run, jobs=60)


def run(args: argparse.Namespace) -> int:
    print("heteroplan demo: Sia vs baselines on the first", args.jobs, "jobs of", args.workload)
    args.policy = [p for p in (args.policy or args.default_policies) if p in simulate.POLICIES]
    return simulate.run(args)
