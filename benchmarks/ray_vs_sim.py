"""Simulator against reality: a small trace run for real on a local multi-node Ray cluster, then
replayed by the simulator with the same performance models.

The jobs are emulated-GPU jobs (``heteroplan.runtime.emulated``): each trains a real tiny GPT
on Ray actors (placement groups on the decision's nodes, gloo rendezvous, checkpoints, restarts)
while its compute per iteration lasts what its GPU type's would (0.1 s + 0.02 s/sample on
``A100``, 0.05 s/sample on ``V100``) whatever the CPU's load. The policy reads the exact goodput
model of that step time, so the simulator (:func:`heteroplan.sim.modelled.simulate_modelled`)
replays the same trace with the same models: the difference is what the executor adds (actor
start-up, rendezvous, checkpoints, rounds that run long), which the simulator prices only as the
restart delay the policy assumes.

Prints per-job and average JCT, restarts, GPU-seconds and restart latencies side by side and
writes ``benchmarks/results/ray_vs_sim.json`` as each policy finishes.

    python benchmarks/ray_vs_sim.py [--policies sia gavel-sia] [--jobs 8] [--round 30] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from heteroplan.policies.registry import make_policy
from heteroplan.runtime import RunConfig
from heteroplan.runtime.config import StepEmulation
from heteroplan.runtime.emulated import EmulatedWorkload, emulated_jobs
from heteroplan.runtime.ray_backend import RayBackend
from heteroplan.runtime.rounds import RoundExecutor
from heteroplan.sim.modelled import ModelledJob, simulate_modelled

EMULATION = StepEmulation({"A100": 0.02, "V100": 0.05}, overhead_s=0.1)


def start_cluster(gpus_per_node: int):
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")  # no idle workers importing at start
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 0})
    for label in ("A100", "V100"):
        cluster.add_node(num_cpus=gpus_per_node, num_gpus=gpus_per_node, resources={f"accelerator_type:{label}": 1})
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    cluster.wait_for_nodes()
    return cluster


def run_policy(name: str, workload: EmulatedWorkload, round_length: float, workdir: Path) -> dict:
    jobs = emulated_jobs(workload, RunConfig(lr=0.01, startup_timeout_s=300.0, timeout_s=120.0))
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    executor = RoundExecutor(None, make_policy(name), jobs, workdir, round_length=round_length,
                             backend=RayBackend(), max_rounds=500,
                             progress=lambda e: print(f"  [{name}] round {e.index} t={e.time:.0f}s "
                                                      + ", ".join(map(str, e.events)), flush=True))
    real = executor.run()
    wall = time.monotonic() - t0
    load = (load0 + os.getloadavg()[0]) / 2
    modelled = [ModelledJob(j.job_id, j.arrival_time, j.estimator, j.steps * j.global_batch_size, j.max_gpus,
                            j.global_batch_size, j.restart_delay_s, j.requested_gpus) for j in jobs]
    sim = {r.job_id: r for r in simulate_modelled(executor.session.cluster, make_policy(name), modelled, round_length)}
    rows = []
    for j in jobs:
        a, b = real[j.job_id], sim[j.job_id]
        rows.append({"job": j.job_id, "arrival": j.arrival_time, "steps": j.steps,
                     "real_jct": a.jct_s, "sim_jct": b.jct_s, "real_restarts": a.restarts, "sim_restarts": b.restarts,
                     "real_gpu_s": a.gpu_seconds, "sim_gpu_s": b.gpu_seconds, "failures": a.failures})
    lat = [x.seconds for x in executor.latencies]
    return {"policy": name, "rows": rows, "wall_s": wall, "load_1min": load,
            "latency_first_start_s": [x.seconds for x in executor.latencies if not x.restart],
            "latency_restart_s": [x.seconds for x in executor.latencies if x.restart],
            "latency_median_s": statistics.median(lat) if lat else None,
            "assumed_restart_s": workload.restart_delay_s}


def summary(result: dict) -> str:
    rows = result["rows"]
    done = [r for r in rows if r["real_jct"] is not None and r["sim_jct"] is not None]
    lines = [f"== {result['policy']}: {len(done)}/{len(rows)} jobs finished, wall {result['wall_s']:.0f} s, "
             f"1-min load {result['load_1min']:.1f} (2 cores)",
             f"{'job':8} {'arrive':>6} {'steps':>5} {'JCT real':>9} {'JCT sim':>8} {'diff':>6} "
             f"{'restarts r/s':>12} {'GPU-s real':>10} {'GPU-s sim':>9}"]
    for r in rows:
        diff = (f"{(r['real_jct'] / r['sim_jct'] - 1) * 100:+5.0f}%" if r["real_jct"] and r["sim_jct"] else "   n/a")
        lines.append(f"{r['job']:8} {r['arrival']:6.0f} {r['steps']:5d} {r['real_jct'] or float('nan'):9.1f} "
                     f"{r['sim_jct'] or float('nan'):8.1f} {diff} {r['real_restarts']:>5d}/{r['sim_restarts']:<6d} "
                     f"{r['real_gpu_s']:10.0f} {r['sim_gpu_s']:9.0f}")
    if done:
        real = statistics.mean(r["real_jct"] for r in done)
        sim = statistics.mean(r["sim_jct"] for r in done)
        lines.append(f"average JCT: real {real:.1f} s, simulated {sim:.1f} s ({(real / sim - 1) * 100:+.1f}%); "
                     f"restarts real {sum(r['real_restarts'] for r in rows)}, simulated "
                     f"{sum(r['sim_restarts'] for r in rows)}")
    first, again = result["latency_first_start_s"], result["latency_restart_s"]
    if first or again:
        lines.append(f"decision -> first iteration: first starts median {statistics.median(first or [0]):.1f} s, "
                     f"restarts median {statistics.median(again or [0]):.1f} s (max {max(again or [0]):.1f}); "
                     f"the policy assumed {result['assumed_restart_s']:.0f} s a restart")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", nargs="+", default=["sia", "gavel-sia"])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--round", type=float, default=30.0, help="seconds per round")
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--restart-delay", type=float, default=10.0, help="restart delay the policy assumes (s)")
    parser.add_argument("--out", default="benchmarks/results/ray_vs_sim.json")
    args = parser.parse_args()
    workload = EmulatedWorkload.generate(args.jobs, EMULATION, seed=args.seed, restart_delay_s=args.restart_delay,
                                         max_gpus=args.gpus_per_node)
    cluster = start_cluster(args.gpus_per_node)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for name in args.policies:
            with tempfile.TemporaryDirectory() as tmp:
                result = run_policy(name, workload, args.round, Path(tmp))
            results.append(result)
            print(summary(result), flush=True)
            out.write_text(json.dumps({"workload": {"arrivals": workload.arrivals, "steps": workload.steps,
                                                    "emulation": EMULATION.seconds_per_sample,
                                                    "overhead_s": EMULATION.overhead_s},
                                       "round_s": args.round, "results": results}, indent=1))
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
