"""Profile this machine, calibrate, plan, run for real, and compare simulated with measured iteration time.

Pipeline: ``profile_layers`` (tiny GPT, 1 thread per process, as the runtime runs, ``--sweeps``
interleaved passes keeping each time's fastest) and
``measure_network`` (gloo between local processes) write a data directory. The runtime then
times the default calibration plans (``heteroplan.runtime.calibrate.calibration_plans``: 1
process at mbs 1 and 8, DP 2 and PP 2 at mbs 8 and 1) and a set of *held-out* plans (other microbatch
sizes, heterogeneous microbatch counts, another pipeline split, tensor parallelism 2 with its own
TP-2 profile from ``profile_tensor_parallel``). Column ``engine``: which pipeline engine ran the
plan (``torch``: ``torch.distributed.pipelining``; ``heteroplan``: its own loop).

``--method interleaved`` (default): all plans live in one set of processes and take turns,
``--rounds`` (30) visits each in a random order per round, 1 untimed + 2 timed iterations per
visit; a plan's time is the median of its timed iterations
(``heteroplan.runtime.interleave.measure_interleaved``). ``--method runs``: every plan is
launched on its own ``--rounds`` (4) times, run by run interleaved, ``--steps`` iterations
each; a run counts the ``--quantile`` (0.25) of its iterations after 3 warm-up ones, a plan its
fastest run. The simulator's ``compute_scale``, ``microbatch_overhead_s``,
``transfer_latency_s`` and ``straggler_cv`` are fitted on the calibration plans only; the Sailor
planner then plans on the calibrated directory (``N`` = CPU cores "GPUs") and its pick is run too.

Every plan is compared twice: uncalibrated (the profile as measured, ``PROFILED_CONFIG``) and
calibrated. Target (issue): simulated within 15% of measured on CPU, judged on held-out plans.

    python benchmarks/runtime_vs_sim.py [--method interleaved|runs] [--rounds N] [--sweeps 9] [--gbs 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import torch

from heteroplan.cluster import GPUType
from heteroplan.planner import plan_job, simulate_plan
from heteroplan.planner.model.sim_config import PROFILED_CONFIG
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.runtime import RunConfig, TinyGPTTask
from heteroplan.runtime.calibrate import calibration_plans, fit_runs, measure_plans
from heteroplan.runtime.interleave import measure_interleaved
from heteroplan.runtime.netbench import measure_network
from heteroplan.runtime.profile_tp import profile_tensor_parallel
from heteroplan.runtime.profiler import profile_layers
from heteroplan.runtime.worker import pipeline_choice

try:
    from benchmarks._common import print_table, write_json
except ImportError:  # run as a script from benchmarks/
    from _common import print_table, write_json

MODEL = "tiny-gpt-bench"


def logsumexp_loss(out: torch.Tensor) -> torch.Tensor:
    """A scalar loss of the logits (module level: the TP profiler pickles it)."""
    return out.float().logsumexp(-1).mean()


MICROBATCH_SIZES = (1, 2, 4, 8)


def held_out_plans(gbs: int, layers: int, cores: int) -> dict[str, Plan]:
    """Plans not used for calibration: other microbatch sizes and counts, another pipeline split."""
    rep = ReplicaGroup("cpu", "local")
    two = ReplicaGroup("cpu", "local", 1, 2)
    tp2 = ReplicaGroup("cpu", "local", 2, 1)
    half = layers // 2
    plans = {
        "1 process, mbs 2": Plan(MODEL, gbs, 2, (Stage(0, layers, (rep,)),)),
        "1 process, mbs 4": Plan(MODEL, gbs, 4, (Stage(0, layers, (rep,)),)),
    }
    if cores >= 2:
        plans |= {
            "DP 2, mbs 2": Plan(MODEL, gbs, 2, (Stage(0, layers, (two,)),)),
            "DP 2, mbs 8, microbatches 3+1": Plan(MODEL, gbs, 8, (Stage(0, layers, (two,)),), (3, 1)),
            "PP 2, mbs 4": Plan(MODEL, gbs, 4, (Stage(0, half, (rep,)), Stage(half, layers, (rep,)))),
            "PP 2, mbs 2": Plan(MODEL, gbs, 2, (Stage(0, half, (rep,)), Stage(half, layers, (rep,)))),
            f"PP 2 split 2/{layers - 2}, mbs 4": Plan(MODEL, gbs, 4, (Stage(0, 2, (rep,)), Stage(2, layers, (rep,)))),
            "TP 2, mbs 2": Plan(MODEL, gbs, 2, (Stage(0, layers, (tp2,)),)),
            "TP 2, mbs 8": Plan(MODEL, gbs, 8, (Stage(0, layers, (tp2,)),)),
        }
    return plans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=("interleaved", "runs"), default="interleaved",
                        help="time all plans together in turns, or each in runs of its own")
    parser.add_argument("--steps", type=int, default=15, help="--method runs: iterations per run (the first 3 are warm-up)")
    parser.add_argument("--gbs", type=int, default=32, help="global batch (samples)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="processes at most")
    parser.add_argument("--rounds", type=int, help="visits (interleaved, default 30) or runs (default 4) of every plan")
    parser.add_argument("--quantile", type=float, default=0.25, help="--method runs: a run counts this quantile of its iterations")
    parser.add_argument("--sweeps", type=int, default=9, help="profiler passes (the fastest of each time is kept)")
    parser.add_argument("--pipeline", choices=("auto", "torch", "heteroplan"), default="auto",
                        help="pipeline engine of the measured runs (RunConfig.pipeline)")
    parser.add_argument("--data-dir", help="keep the profile, network and calibration here (default: a temporary directory)")
    args = parser.parse_args()
    interleaved = args.method == "interleaved"
    rounds = args.rounds if args.rounds is not None else (30 if interleaved else 4)
    statistic = statistics.median if interleaved else min
    run_config = RunConfig(optimizer="sgd", lr=0.01, threads_per_rank=1, pipeline=args.pipeline)

    def measure(plans: dict[str, Plan]) -> dict[str, list[float]]:
        if interleaved:  # progress on stderr: "round k/N" after every round
            return measure_interleaved(plans, task, rounds=rounds, config=run_config,
                                       progress=lambda line: show(line.split(":")[0]))
        return measure_plans(plans, task, rounds=rounds, steps=args.steps, quantile=args.quantile, progress=show,
                             config=run_config)

    def show(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    task = TinyGPTTask(vocab=256, seq_len=64, d_model=128, n_layers=4, n_heads=4)
    layers = task.num_layers
    torch.set_num_threads(1)
    cpu = GPUType("cpu", memory_gb=16, gpus_per_node=max(args.cores, 1), price_per_hour=0.1)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or tmp
        os.makedirs(data_dir, exist_ok=True)
        prof = profile_layers(task.build_model(), lambda m: task.batch(0, 0, m)[0], microbatch_sizes=MICROBATCH_SIZES,
                              loss_fn=logsumexp_loss, repeats=7,
                              sweeps=args.sweeps)
        prof.write(data_dir, MODEL, "cpu")
        if args.cores >= 2:  # one rank of a TP-2 group, both ranks timed in lock-step
            profile_tensor_parallel(task, 2, MICROBATCH_SIZES, logsumexp_loss, repeats=7,
                                    sweeps=args.sweeps).write(data_dir, MODEL, "cpu", tp=2)
            measure_network(world_size=2).write(data_dir, "cpu", zone="local")
        calib = calibration_plans(MODEL, layers, MICROBATCH_SIZES, args.gbs, min(args.cores, 2))
        held = held_out_plans(args.gbs, layers, args.cores)
        load_before = os.getloadavg()[0]
        measured = measure(calib | held)
        sim_kwargs = {"data_dir": data_dir, "gpu_types": {"cpu": cpu}}
        fit = fit_runs(calib, {n: measured[n] for n in calib}, data_dir, statistic=statistic)
        best = plan_job(MODEL, args.gbs, {("cpu", "local"): args.cores}, gpu_types=(cpu,), data_dir=data_dir).plan
        roles = {n: "calibration" for n in calib} | {n: "held out" for n in held}
        same = next((n for n, p in (calib | held).items() if p == best), None)
        name = f"planner: PP {best.pp} x DP {best.dp}, mbs {best.microbatch_size}"
        if same is None:
            measured[name] = measure({name: best})[name]
            roles[name] = "held out"
            plans = calib | held | {name: best}
        else:
            roles[same] += f" (= {name})"
            plans = calib | held
        rows = []
        for n, plan in plans.items():
            samples = measured[n]
            time = float(statistic(samples))
            q25, q75 = statistics.quantiles(samples, n=4)[::2] if len(samples) > 1 else (time, time)
            raw = simulate_plan(plan, config=PROFILED_CONFIG, **sim_kwargs).iteration_time_s
            cal = simulate_plan(plan, **sim_kwargs).iteration_time_s  # the directory's sim_config.json
            engine = pipeline_choice(plan, run_config).engine
            rows.append({"plan": n, "role": roles[n], "processes": plan.num_gpus, "engine": engine, "measured_s": time,
                         "q25_s": q25, "q75_s": q75,
                         "uncalibrated_s": raw, "uncal_error_pct": 100 * (raw / time - 1),
                         "calibrated_s": cal, "error_pct": 100 * (cal / time - 1), "samples_s": samples})
    print(f"method: {args.method}, {rounds} rounds; measured = the "
          + ("median of each plan's timed iterations" if interleaved else "fastest run of each plan"))
    print_table(rows, ["plan", "role", "processes", "engine", "measured_s", "q25_s", "q75_s", "uncalibrated_s",
                       "uncal_error_pct", "calibrated_s", "error_pct"])
    print(f"load average (1 min) before / after the runs: {load_before:.2f} / {os.getloadavg()[0]:.2f}")
    print("fitted on the calibration plans: " + ", ".join(f"{c} = {getattr(fit.config, c):.4g}" for c in fit.constants))
    summary = {}
    for key, label in (("uncal_error_pct", "uncalibrated"), ("error_pct", "calibrated")):
        errs = sorted(abs(r[key]) for r in rows if r["role"].startswith("held out"))
        summary[label] = {"median_abs_pct": statistics.median(errs), "max_abs_pct": errs[-1]}
        print(f"held-out plans, {label}: median |error| {summary[label]['median_abs_pct']:.1f}%, "
              f"max {errs[-1]:.1f}% (target: within 15%)")
    payload = {"rows": rows, "cores": args.cores, "gbs": args.gbs, "method": args.method, "rounds": rounds,
               "pipeline": args.pipeline,
               "summary": summary,
               "fitted": {c: getattr(fit.config, c) for c in fit.constants}}
    print(f"JSON: {write_json('runtime_vs_sim', payload)}")


if __name__ == "__main__":
    main()
