"""The closed loop: profile -> simulate -> run -> measured vs predicted iteration time and peak memory.

For each plan (PP, DP, TP, heterogeneous microbatch counts, activation recomputation, bf16 mixed
precision, ZeRO-1 sharded optimizer state) of a GPT-2-style model:

1. **profile** the model's layers with ``profile_layers`` in the plan's precision (fp32 and bf16
   profiles; a TP-2 profile with ``profile_tensor_parallel`` for the TP plan) into a data directory;
2. **predict** the iteration time and every rank's peak memory with the planner's ``simulate_plan``
   (uncalibrated, ``PROFILED_CONFIG``): its machine model prices recomputation, ZeRO-1 and the
   measured memory terms itself (docs/runtime.md, "Machine-model terms for the new dimensions");
3. **run** the plan with the runtime (``run_plan``; CPU: gloo, one process per rank; ``--device
   cuda``: NCCL, one GPU per rank) and measure the median iteration time (iterations 2..n-1) and,
   on the last iteration, every rank's peak memory (CPU: torch's profiler's allocation record on
   top of the bytes alive at the start; CUDA: ``max_memory_reserved``, with
   ``max_memory_allocated`` alongside).

Prints a table and writes ``benchmarks/results/closed_loop.json`` as it goes (a plan whose run
fails is recorded with its error, and the others still run). On a shared 2-core CPU the
time column is noisy (load from other processes); the memory column is exact bookkeeping.

    python benchmarks/closed_loop.py [--device cpu|cuda] [--steps 8] [--width 64] [--layers 4] [--only NAME ...]

``--mbs 1 2 4 8`` replaces the plan set by one-GPU plans at each microbatch size x precision
(``--precisions``) x recomputation (``--recompute``), the matrix of the issue's GPU measurement
(24 blocks, width 1024, 16 heads, sequence 512, vocab 8192, global batch 32)::

    python benchmarks/closed_loop.py --device cuda --layers 24 --width 1024 --heads 16 --seq 512 \
        --vocab 8192 --gbs 32 --mbs 1 2 4 8 --steps 6

``--cuda-graphs`` (with ``--mbs``, on CUDA) profiles with ``profile_layers(cuda_graphs=True)`` and
runs every plan with ``RunConfig(cuda_graphs=True)``: each microbatch replayed as one CUDA graph
(recomputing plans too: the model has no dropout).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from heteroplan.cluster import GPUType
from heteroplan.errors import RankFailure
from heteroplan.planner import simulate_plan
from heteroplan.planner.model.sim_config import PROFILED_CONFIG
from heteroplan.planner.plan import (
    Plan,
    Precision,
    ReplicaGroup,
    Stage,
)
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan
from heteroplan.runtime.netbench import measure_network
from heteroplan.runtime.profile_tp import profile_tensor_parallel
from heteroplan.runtime.profiler import profile_layers

try:
    from benchmarks._common import print_table, write_json
except ImportError:  # run as a script from benchmarks/
    from _common import print_table, write_json


def mean_ce_loss(out: torch.Tensor) -> torch.Tensor:
    """A scalar loss of the logits for profiling (module level: the TP profiler pickles it)."""
    return out.float().logsumexp(-1).mean()


def matrix_plans(layers: int, gbs: int, sizes: list[int], precisions: list[str], recomputes: list[str]) -> dict[str, Plan]:
    """One-GPU plans at each microbatch size x precision x recomputation."""
    one = ReplicaGroup("cpu", "local")
    return {f"1 GPU mbs {m} {pr} {rc}": Plan("bench", gbs, m, (Stage(0, layers, (one,), rc),), precision=pr)
            for pr in precisions for rc in recomputes for m in sizes}


def plans(layers: int, gbs: int, cores: int) -> dict[str, Plan]:
    one, two, tp2 = ReplicaGroup("cpu", "local"), ReplicaGroup("cpu", "local", 1, 2), ReplicaGroup("cpu", "local", 2, 1)
    half = layers // 2

    def single(mbs: int, **dims: object) -> Plan:
        rec, zero = dims.get("recompute", "none"), dims.get("zero", "none")
        return Plan("bench", gbs, mbs, (Stage(0, layers, (one,), rec, zero),), precision=dims.get("precision", "fp32"))

    out = {
        "1 GPU mbs 4 fp32": single(4),
        "1 GPU mbs 4 bf16": single(4, precision="bf16"),
        "1 GPU mbs 4 recompute": single(4, recompute="full"),
        "1 GPU mbs 4 bf16+recompute": single(4, precision="bf16", recompute="full"),
    }
    if cores >= 2:
        out |= {
            "PP 2 mbs 2": Plan("bench", gbs, 2, (Stage(0, half, (one,)), Stage(half, layers, (one,)))),
            "DP 2 mbs 4": Plan("bench", gbs, 4, (Stage(0, layers, (two,)),)),
            "DP 2 mbs 4 zero1": Plan("bench", gbs, 4, (Stage(0, layers, (two,), "none", "zero1"),)),
            "TP 2 mbs 4": Plan("bench", gbs, 4, (Stage(0, layers, (tp2,)),)),
            "PP 2 x DP 2 (3,1) bf16+recompute+zero1": Plan(
                "bench", gbs, 2, (Stage(0, half, (two,), "full", "zero1"), Stage(half, layers, (two,), "full", "zero1")),
                (3 * gbs // 8, gbs // 8), "bf16"),
        }
    return out


# ------------------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--steps", type=int, default=8, help="iterations per plan (the last one measures memory)")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks")
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--gbs", type=int, default=16)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="adam")
    parser.add_argument("--timing", choices=("layer", "prefix"), default="prefix",
                        help="profiler timing (prefix: layers add up to a measured whole pass)")
    parser.add_argument("--only", nargs="*", help="run only the plans whose names contain one of these")
    parser.add_argument("--repeats", type=int, default=5, help="profiler: timed runs per measurement")
    parser.add_argument("--sweeps", type=int, default=3, help="profiler: passes over sizes and layers")
    parser.add_argument("--warmup", type=int, default=2, help="profiler: untimed runs per measurement")
    parser.add_argument("--time-recomputed", action="store_true",
                        help="profiler: also time the layers checkpointed (recomputing plans priced from them)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--mbs", type=int, nargs="*", help="one-GPU plans at these microbatch sizes (the matrix)")
    parser.add_argument("--precisions", nargs="*", default=["fp32", "bf16"], help="matrix precisions")
    parser.add_argument("--recompute", nargs="*", default=["none", "full"], help="matrix recomputation")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="--device cuda --mbs ...: profile and run every microbatch as a CUDA graph "
                             "(RunConfig.cuda_graphs)")
    parser.add_argument("--profile-dir", help="keep the profiles (and network table) in this folder")
    parser.add_argument("--out", default="closed_loop",
                        help="results name: benchmarks/results/<out>.json, or a path ending in .json")
    args = parser.parse_args()
    if args.cuda_graphs and (args.device != "cuda" or not args.mbs):
        parser.error("--cuda-graphs needs --device cuda and the one-GPU matrix (--mbs)")
    torch.set_num_threads(1)
    task = TinyGPTTask(vocab=args.vocab, seq_len=args.seq, d_model=args.width, n_layers=args.layers, n_heads=args.heads)
    layers = task.num_layers
    if args.mbs:
        every = matrix_plans(layers, args.gbs, args.mbs, args.precisions, args.recompute)
    else:
        every = plans(layers, args.gbs, args.cores if args.device == "cpu" else torch.cuda.device_count())
    chosen = {n: p for n, p in every.items() if not args.only or any(o in n for o in args.only)}
    sizes = sorted({p.microbatch_size for p in chosen.values()})
    device = args.device
    cpu = GPUType("cpu", memory_gb=16, gpus_per_node=max(args.cores, 2), price_per_hour=0.1)
    rows, results = [], []
    def save(payload: dict) -> Path:
        if not args.out.endswith(".json"):
            return write_json(args.out, payload)
        out = Path(args.out)
        out.write_text(json.dumps(payload, indent=2, default=str))
        return out

    header = {"device": device, "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "torch": torch.__version__, "model": dataclasses.asdict(task), "optimizer": args.optimizer,
              "timing": args.timing, "cuda_graphs": args.cuda_graphs}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.profile_dir or tmp
        os.makedirs(data_dir, exist_ok=True)
        def make_input(m: int) -> torch.Tensor:
            return task.batch(0, 0, m)[0]

        profiles = {pr: profile_layers(task.build_model(), make_input, sizes, mean_ce_loss, device=device, repeats=args.repeats,
                                       optimizer=args.optimizer, precision=pr, sweeps=args.sweeps, warmup=args.warmup,
                                       time_recomputed=args.time_recomputed,
                                       timing=args.timing, cuda_graphs=args.cuda_graphs)
                    for pr in sorted({Precision.BF16 if p.precision is Precision.BF16 else Precision.FP32
                                      for p in chosen.values()}, key=lambda pr: pr.value)}
        print(f"profiled in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        for pr, prof in profiles.items():
            prof.write(data_dir, f"profile-{pr.value}", "cpu")
        if any(st.replicas[0].tp > 1 for p in chosen.values() for st in p.stages):
            tp_prof = profile_tensor_parallel(task, 2, sizes, mean_ce_loss, repeats=5, optimizer=args.optimizer,
                                              device=device)
        else:
            tp_prof = None
        nccl = device == "cuda" and torch.cuda.device_count() >= 2  # NCCL refuses two ranks on one GPU
        measure_network(world_size=2, backend="nccl" if nccl else "gloo").write(data_dir, "cpu", "local")
        for name, plan in chosen.items():
            model_name = f"profile-{plan.precision.value}"
            if any(st.replicas[0].tp > 1 for st in plan.stages) and tp_prof is not None:
                tp_prof.write(data_dir, model_name, "cpu", tp=2)
            sim = simulate_plan(dataclasses.replace(plan, model=model_name), data_dir=data_dir, gpu_types={"cpu": cpu},
                           config=PROFILED_CONFIG)
            predicted_s = sim.iteration_time_s
            notes = ["simulate"]
            pred_mem = [float(sim.stage_memory.total[s, d]) * 1e9 for s, stage in enumerate(plan.stages)
                        for d in range(plan.dp) for _ in range(stage.replica_list()[d].tp)]
            config = RunConfig(steps=args.steps, optimizer=args.optimizer, lr=1e-3, device=device,
                               memory_step=args.steps - 1, threads_per_rank=1, timeout_s=300,
                               cuda_graphs=args.cuda_graphs)
            print(f"running {name} ...", file=sys.stderr, flush=True)
            try:
                result = run_plan(plan, task, config)
            except RankFailure as exc:  # keep the other plans' rows (a capture that fails on one GPU, say)
                print(f"{name} failed: {exc}", file=sys.stderr, flush=True)
                results.append({"plan": name, "error": str(exc)[-2000:], "elapsed_s": time.perf_counter() - started})
                save({**header, "load_average": os.getloadavg(), "rows": results})
                continue
            times = result.iteration_times[1:-1] or result.iteration_times
            measured_s = statistics.median(times)
            measured = result.steps[-1].peak_reserved_bytes
            allocated = result.steps[-1].peak_allocated_bytes
            worst = max(range(len(measured)), key=lambda r: abs(pred_mem[r] - measured[r]) / measured[r])
            row = {
                "plan": name, "prediction": "; ".join(notes),
                "predicted s": predicted_s, "measured s": measured_s,
                "time error": f"{(predicted_s - measured_s) / measured_s:+.0%}",
                "predicted MB (worst rank)": pred_mem[worst] / 1e6, "measured MB": measured[worst] / 1e6,
                "allocated MB": allocated[worst] / 1e6,
                "memory error": f"{(pred_mem[worst] - measured[worst]) / measured[worst]:+.1%}",
            }
            rows.append(row)
            results.append({**row, "elapsed_s": time.perf_counter() - started, "plan_dict": plan.to_dict(), "iteration_times": result.iteration_times,
                            "peak_reserved_bytes": measured, "peak_allocated_bytes": allocated,
                            "predicted_memory_terms": [dataclasses.asdict(sim.stage_memory.at(s, d))
                                                       for s in range(plan.pp) for d in range(plan.dp)],
                            "simulated_memory_gb": list(sim.memory_per_stage_gb)})
            print_table(rows[-1:], list(row))
            save({**header, "load_average": os.getloadavg(), "rows": results})  # as it goes
    print()
    print_table(rows, list(rows[0]) if rows else [])
    path = save({**header, "load_average": os.getloadavg(), "rows": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
