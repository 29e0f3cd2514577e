"""torch.distributed.pipelining against heteroplan's own 1F1B loop on the same pipeline plans.

Every plan runs twice in one set of processes, once per engine (``RunConfig.pipeline``
``"torch"`` and ``"heteroplan"``), and the runs take turns
(:func:`heteroplan.runtime.interleave.measure_interleaved`: ``--rounds`` rounds, each visiting
every (plan, engine) once in a random order, 1 untimed + 2 timed iterations per visit), so both
engines see the same moods of a shared machine. Reports each one's median seconds per iteration
with its interquartile range, and the ratio torch / heteroplan per plan.

    python benchmarks/runtime_pipeline_engines.py [--rounds 20] [--gbs 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.runtime import TinyGPTTask
from heteroplan.runtime.interleave import measure_interleaved

try:
    from benchmarks._common import print_table, write_json
except ImportError:  # run as a script from benchmarks/
    from _common import print_table, write_json

ENGINES = ("torch", "heteroplan")


def pipeline_plans(gbs: int, layers: int) -> dict[str, Plan]:
    """Two-stage pipelines (2 processes) at a small and a large microbatch size."""
    rep = ReplicaGroup("cpu", "local")
    half = layers // 2
    return {f"PP 2, mbs {m}": Plan("tiny-gpt", gbs, m, (Stage(0, half, (rep,)), Stage(half, layers, (rep,))))
            for m in (2, 8)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds (each visits every plan and engine once)")
    parser.add_argument("--gbs", type=int, default=32, help="global batch (samples)")
    args = parser.parse_args()
    task = TinyGPTTask(vocab=256, seq_len=64, d_model=128, n_layers=4, n_heads=4)
    plans = pipeline_plans(args.gbs, task.num_layers)
    runs = {f"{name} / {engine}": plan for name, plan in plans.items() for engine in ENGINES}
    engines = {label: label.rsplit(" / ", 1)[1] for label in runs}
    load_before = os.getloadavg()[0]
    times = measure_interleaved(runs, task, rounds=args.rounds, pipelines=engines,
                                progress=lambda line: print(line.split(":")[0], file=sys.stderr, flush=True))
    rows = []
    for name in plans:
        median = {e: statistics.median(times[f"{name} / {e}"]) for e in ENGINES}
        for engine in ENGINES:
            samples = times[f"{name} / {engine}"]
            q25, _, q75 = statistics.quantiles(samples, n=4)
            rows.append({"plan": name, "engine": engine, "median_s": median[engine], "q25_s": q25, "q75_s": q75,
                         "torch_over_heteroplan": median["torch"] / median["heteroplan"], "samples_s": samples})
    print(f"{args.rounds} rounds x 2 timed iterations per plan and engine, interleaved")
    print_table(rows, ["plan", "engine", "median_s", "q25_s", "q75_s", "torch_over_heteroplan"])
    print(f"load average (1 min) before / after: {load_before:.2f} / {os.getloadavg()[0]:.2f}")
    print(f"JSON: {write_json('runtime_pipeline_engines', {'rows': rows, 'rounds': args.rounds, 'gbs': args.gbs})}")


if __name__ == "__main__":
    main()
