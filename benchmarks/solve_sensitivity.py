"""How far a 960-job trace's metrics move when only a round's choice among near-optimal answers changes.

Runs one policy on 960-job, 48-hour traces (``trace_960.py``'s sources, one per ``--seeds``) three
ways, paired per trace: ``milp`` (the MILP every round at the policy's ``mip_gap``), ``auto`` (LP +
rounding kept when within ``mip_gap`` of the LP bound, else the MILP) and ``milp`` with HiGHS's
``random_seed`` set to ``--highs-seed`` -- the same model and the same certified gap, only
HiGHS's arbitrary choices differ. The third column is the yardstick for the second: when a
different random seed alone moves a trace's average JCT by tens of percent, a solver change that
keeps every round within the gap cannot be judged per trace against a 1% bar (issue 32).

Prints per trace avg / p99 JCT (h), makespan (h), rounds and CPU seconds (``time.process_time``),
then the paired changes against ``milp``; writes ``benchmarks/results/<--out>.json`` after every
run (an interrupted sweep keeps what it finished).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import highspy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_json  # noqa: E402
from trace_960 import HOURS, newtrace, sampled_trace  # noqa: E402

from heteroplan.cluster import preset  # noqa: E402
from heteroplan.sim import make_policy, simulate  # noqa: E402

_set_option = highspy.Highs.setOptionValue


def _with_highs_seed(seed: int | None) -> None:
    """Every HiGHS solve from now on uses ``random_seed = seed`` (``None``: HiGHS's default)."""
    if seed is None:
        highspy.Highs.setOptionValue = _set_option
        return

    def set_option(self: highspy.Highs, name: str, value: object) -> object:
        status = _set_option(self, name, value)
        if name == "time_limit":  # set on every solve (heteroplan.solvers.highs.solve_highs)
            _set_option(self, "random_seed", seed)
        return status

    highspy.Highs.setOptionValue = set_option


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="pollux")
    parser.add_argument("--source", choices=("sampled", "newtrace"), default="sampled")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--highs-seed", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=960)
    parser.add_argument("--out", default="solve_sensitivity")
    args = parser.parse_args()
    make = sampled_trace if args.source == "sampled" else newtrace
    variants = (("milp", "milp", None), ("auto", "auto", None), (f"milp, HiGHS seed {args.highs_seed}", "milp",
                                                                   args.highs_seed))
    rows = []
    for seed in args.seeds:
        jobs = make(args.jobs, HOURS, seed)
        for label, mode, highs_seed in variants:
            _with_highs_seed(highs_seed)
            c0 = time.process_time()
            result = simulate(jobs, preset("sia-64"), make_policy(args.policy, mode=mode), progress=False)
            cpu = time.process_time() - c0
            s = result.summary()
            rows.append({"trace": seed, "variant": label, "avg_jct_h": s.avg_jct_h, "p99_jct_h": s.p99_jct_h,
                         "makespan_h": s.makespan_h, "rounds": result.rounds, "cpu_s": cpu,
                         "policy": args.policy, "source": args.source})
            print(rows[-1], flush=True)
            write_json(args.out, rows)
    _with_highs_seed(None)
    base = {r["trace"]: r for r in rows if r["variant"] == "milp"}
    for r in rows:
        b = base[r["trace"]]
        r["avg_change_pct"] = 100 * (r["avg_jct_h"] / b["avg_jct_h"] - 1)
        r["cpu_ratio"] = r["cpu_s"] / b["cpu_s"]
    print()
    print_table(rows, ["trace", "variant", "avg_jct_h", "p99_jct_h", "makespan_h", "rounds", "cpu_s",
                       "avg_change_pct", "cpu_ratio"])
    for label, _, _ in variants[1:]:
        changes = [r["avg_change_pct"] for r in rows if r["variant"] == label]
        ratios = [r["cpu_ratio"] for r in rows if r["variant"] == label]
        spread = statistics.stdev(changes) if len(changes) > 1 else float("nan")
        print(f"{label} vs milp: avg JCT change mean {statistics.mean(changes):+.1f}% (sd {spread:.1f}%), "
              f"range {min(changes):+.1f}..{max(changes):+.1f}%; CPU x{statistics.median(ratios):.2f} (median)")
    print("wrote", write_json(args.out, rows))


if __name__ == "__main__":
    main()
