"""Profile this machine, plan, run for real, and compare simulated with measured iteration time.

Pipeline: ``profile_layers`` (tiny GPT, 1 thread per process, as the runtime runs) and
``measure_network`` (gloo between local processes) write a data directory; the Sailor planner
plans on ``N`` "GPUs" = processes of this machine (``N`` = CPU cores, so processes do not share a
core); every plan (the planner's pick and a few fixed layouts, including heterogeneous
microbatch counts) is simulated with ``PROFILED_CONFIG`` and executed with the runtime.
Target (issue): simulated within 15% of measured on CPU.

Timings on a small shared machine drift in bursts (another process taking a core slows every
rank of a pipeline), so every plan runs ``--rounds`` times, the plans interleaved, and the
median over rounds is compared; the spread and the load average are printed beside it.

    python benchmarks/runtime_vs_sim.py [--steps 15] [--gbs 32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

import torch

from heteroplan.cluster import GPUType
from heteroplan.planner import plan_job, simulate
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan
from heteroplan.runtime.netbench import measure_network
from heteroplan.runtime.profiler import profile_layers

try:
    from benchmarks._common import print_table, write_json
except ImportError:  # run as a script from benchmarks/
    from _common import print_table, write_json

MODEL = "tiny-gpt-bench"


def fixed_plans(gbs: int, layers: int, cores: int) -> dict[str, Plan]:
    rep = ReplicaGroup("cpu", "local")
    half = layers // 2
    plans = {
        "1 process, mbs 8": Plan(MODEL, gbs, 8, (Stage(0, layers, (rep,)),)),
        "1 process, mbs 4": Plan(MODEL, gbs, 4, (Stage(0, layers, (rep,)),)),
    }
    if cores >= 2:
        plans |= {
            "DP 2, mbs 8": Plan(MODEL, gbs, 8, (Stage(0, layers, (ReplicaGroup("cpu", "local", 1, 2),)),)),
            "DP 2, microbatches 3+1": Plan(MODEL, gbs, 8, (Stage(0, layers, (ReplicaGroup("cpu", "local", 1, 2),)),),
                                           (3, 1)),
            "PP 2, mbs 4": Plan(MODEL, gbs, 4, (Stage(0, half, (rep,)), Stage(half, layers, (rep,)))),
            "PP 2, mbs 2": Plan(MODEL, gbs, 2, (Stage(0, half, (rep,)), Stage(half, layers, (rep,)))),
        }
    return plans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15, help="iterations per run (the first 3 are warm-up)")
    parser.add_argument("--gbs", type=int, default=32, help="global batch (samples)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="processes at most")
    parser.add_argument("--rounds", type=int, default=3, help="runs of every plan (interleaved); the median counts")
    args = parser.parse_args()
    task = TinyGPTTask(vocab=256, seq_len=64, d_model=128, n_layers=4, n_heads=4)
    layers = task.num_layers
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as data_dir:
        prof = profile_layers(task.build_model(), lambda m: task.batch(0, 0, m)[0], microbatch_sizes=(1, 2, 4, 8),
                              loss_fn=lambda out: out.float().logsumexp(-1).mean(), repeats=7)
        prof.write(data_dir, MODEL, "cpu")
        net = measure_network(world_size=2) if args.cores >= 2 else None
        if net is not None:
            net.write(data_dir, "cpu", zone="local")
        cpu = GPUType("cpu", memory_gb=16, gpus_per_node=max(args.cores, 1), price_per_hour=0.1)
        plans = fixed_plans(args.gbs, layers, args.cores)
        best = plan_job(MODEL, args.gbs, {("cpu", "local"): args.cores}, gpu_types=(cpu,), data_dir=data_dir)
        plans = {f"planner: PP {best.plan.pp} x DP {best.plan.dp}, mbs {best.plan.microbatch_size}": best.plan} | plans
        load_before = os.getloadavg()[0]
        measured: dict[str, list[float]] = {name: [] for name in plans}
        for _ in range(args.rounds):
            for name, plan in plans.items():
                result = run_plan(plan, task, RunConfig(steps=args.steps, optimizer="sgd", lr=0.01, threads_per_rank=1))
                measured[name].append(result.median_iteration_time(skip=3))
        rows = []
        for name, plan in plans.items():
            sim = simulate(plan, data_dir=data_dir, gpu_types={"cpu": cpu})
            runs = measured[name]
            median = statistics.median(runs)
            rows.append({"plan": name, "processes": plan.num_gpus, "simulated_s": sim.iteration_time,
                         "measured_s": median, "spread_pct": 100 * (max(runs) - min(runs)) / median,
                         "error_pct": 100 * (sim.iteration_time - median) / median, "runs_s": runs})
    print_table(rows, ["plan", "processes", "simulated_s", "measured_s", "spread_pct", "error_pct"])
    print(f"load average (1 min) before / after the runs: {load_before:.2f} / {os.getloadavg()[0]:.2f}")
    errors = sorted(abs(r["error_pct"]) for r in rows)
    print(f"median |error| {errors[len(errors) // 2]:.1f}%, max {errors[-1]:.1f}% (target: within 15%)")
    payload = {"rows": rows, "cores": args.cores, "gbs": args.gbs, "rounds": args.rounds}
    print(f"JSON: {write_json('runtime_vs_sim', payload)}")


if __name__ == "__main__":
    main()
