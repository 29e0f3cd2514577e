"""Compare Sia with its baselines on a bundled trace and plot the JCT CDF and GPU use.

Run: ``python examples/compare_policies.py [--jobs 40] [--out examples_out]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

from heteroplan import plots
from heteroplan.cluster import preset
from heteroplan.sim.compare import compare_policies
from heteroplan.sim.metrics import compare_table
from heteroplan.workload.sia import bundled_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40, help="first N jobs of philly/workload-1")
    parser.add_argument("--out", default="examples_out", help="directory for the PNG plots")
    args = parser.parse_args()

    cluster = preset("sia-64")
    jobs = bundled_workload("philly/workload-1")[: args.jobs]
    results = compare_policies(jobs, cluster, ["sia", "pollux", "fifo"], progress=False)
    print(compare_table(results))

    out = Path(args.out)
    out.mkdir(exist_ok=True)
    plots.jct_cdf(results, path=out / "jct_cdf.png")
    plots.gpus_over_time(results[0], path=out / "gpus_sia.png")
    print(f"plots in {out}/")


if __name__ == "__main__":
    main()
