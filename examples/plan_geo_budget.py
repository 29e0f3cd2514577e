"""Plan a geo-distributed training job under a budget; plot its cost/throughput Pareto front
and the 1F1B pipeline timeline of the chosen plan.

Run: ``python examples/plan_geo_budget.py [--budget 0.07] [--gpus TYPE@ZONE=N,...] [--out examples_out]``

The default pool has A100s in two GCP zones (8 each) and V100s in one: the fastest plans
under a moderate budget pipeline across both zones.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from heteroplan import plots
from heteroplan.commands.plan import parse_gpus
from heteroplan.planner import plan_job
from heteroplan.planner.pareto import pareto_front

POOL = "A100-40@us-central1-a=8,A100-40@us-central1-b=8,V100-16@us-central1-a=8"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="OPT-350", help="profiled model (OPT-350, GPT-Neo-2.7, ...)")
    parser.add_argument("--gbs", type=int, default=128, help="global batch size (samples/iteration)")
    parser.add_argument("--gpus", default=POOL, help="GPUs that can be rented: TYPE@ZONE=COUNT,...")
    parser.add_argument("--budget", type=float, default=0.07, help="max $ per iteration")
    parser.add_argument("--n", type=int, default=8, help="budgets (and throughput floors) in the sweep")
    parser.add_argument("--out", default="examples_out", help="directory for the PNG plots")
    args = parser.parse_args()
    pool = parse_gpus(args.gpus)

    result = plan_job(args.model, args.gbs, pool, objective="throughput", budget=args.budget)
    print(result.describe())
    zones = sorted({z for _, z in result.plan.gpus_by_type_zone()})
    print(f"zones used: {len(zones)} ({', '.join(zones)})")
    print(f"cost: ${result.cost_per_iteration_usd:.4g}/iteration <= budget ${args.budget:.4g}")

    front = pareto_front(args.model, args.gbs, pool, n=args.n, sweep="both")
    print(front.describe())

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plots.cost_throughput_front(front, path=out / "pareto_front.png")
    plots.pipeline_timeline(result, path=out / "pipeline_timeline.png")
    print(f"plots in {out}/: pareto_front.png, pipeline_timeline.png")


if __name__ == "__main__":
    main()
