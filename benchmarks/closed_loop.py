"""The closed loop: profile -> simulate -> run -> measured vs predicted iteration time and peak memory.

For each plan (PP, DP, TP, heterogeneous microbatch counts, activation recomputation, bf16 mixed
precision, ZeRO-1 sharded optimizer state) of a GPT-2-style model:

1. **profile** the model's layers with ``profile_layers`` in the plan's precision (fp32 and bf16
   profiles; a TP-2 profile with ``profile_tensor_parallel`` for the TP plan) into a data directory;
2. **predict** the iteration time with the planner's ``simulate`` (uncalibrated,
   ``PROFILED_CONFIG``). The planner cannot price recomputation or sharding yet, so this script
   applies the formulas proposed in docs/runtime.md ("Machine-model terms for the new
   dimensions") to the *profile* (recomputation: every layer's backward + its forward; ZeRO-1:
   update time / d plus the parameter broadcast) and says so in the ``prediction`` column.
   Peak memory per rank is predicted by the memory formula of the same section, from the profile's
   sizes — the planner's memory term (``stage_memory_gb``) is printed alongside where it applies;
3. **run** the plan with the runtime (``run_plan``; CPU: gloo, one process per rank; ``--device
   cuda``: NCCL, one GPU per rank) and measure the median iteration time (iterations 2..n-1) and,
   on the last iteration, every rank's peak memory (CPU: torch's profiler's allocation record on
   top of the bytes alive at the start; CUDA: ``max_memory_reserved``, with
   ``max_memory_allocated`` alongside).

Prints a table and writes ``benchmarks/results/closed_loop.json``. On a shared 2-core CPU the
time column is noisy (load from other processes); the memory column is exact bookkeeping.

    python benchmarks/closed_loop.py [--device cpu|cuda] [--steps 8] [--width 64] [--layers 4] [--only NAME ...]

``--mbs 1 2 4 8`` replaces the plan set by one-GPU plans at each microbatch size x precision
(``--precisions``) x recomputation (``--recompute``), the matrix of the issue's GPU measurement
(24 blocks, width 1024, 16 heads, sequence 512, vocab 8192, global batch 32)::

    python benchmarks/closed_loop.py --device cuda --layers 24 --width 1024 --heads 16 --seq 512 \
        --vocab 8192 --gbs 32 --mbs 1 2 4 8 --steps 6
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass

import torch

from heteroplan.cluster import GPUType
from heteroplan.planner import simulate
from heteroplan.planner.model.sim_config import PROFILED_CONFIG
from heteroplan.planner.plan import (
    OptimizerSharding,
    Plan,
    Precision,
    Recomputation,
    ReplicaGroup,
    Stage,
)
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan
from heteroplan.runtime.netbench import measure_network
from heteroplan.runtime.profile_tp import profile_tensor_parallel
from heteroplan.runtime.profiler import LayerProfile, profile_layers

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


# ------------------------------------------------------------------ the proposed machine-model terms
RNG_STATE_BYTES = 5056  # torch.get_rng_state() on CPU: what each checkpointed region keeps (+16 per CUDA device)


def derived_profile(prof: LayerProfile, recompute: Recomputation) -> LayerProfile:
    """The profile a stage with ``recompute`` runs: FULL adds each layer's forward to its backward
    (t_b' = t_b + t_f) and keeps only its input (+ the RNG state per region) for backward."""
    if recompute is Recomputation.NONE:
        return prof
    smallest = min(prof.microbatch_sizes)
    compute = {m: tuple((f, b + f, u) for f, b, u in rows) for m, rows in prof.compute.items()}
    kept = tuple(i + -(-RNG_STATE_BYTES // smallest) for i in prof.act_input_bytes)
    return dataclasses.replace(prof, compute=compute, act_mem_bytes=kept)


@dataclass(frozen=True)
class MemoryTerms:
    """Bytes per rank of one stage replica at its peak (the proposed memory model)."""

    weights: float
    gradients: float
    optimizer_state: float
    bf16_weight_copies: float
    activations_kept: float
    working: float
    sync_buffer: float

    @property
    def total(self) -> float:
        """Weights, gradients and state, plus the larger of the backward's and the all-reduce's
        transient memory (activations are freed before the gradients are all-reduced)."""
        backward = self.bf16_weight_copies + self.activations_kept + self.working
        return self.weights + self.gradients + self.optimizer_state + max(backward, self.sync_buffer)


def memory_terms(prof: LayerProfile, first: int, last: int, mbs: int, inflight: int, dp: int, tp: int,
                 precision: Precision, recompute: Recomputation, sharding: OptimizerSharding,
                 optimizer: str, is_last: bool) -> MemoryTerms:
    """Peak bytes of a rank of layers ``[first, last)`` (``prof`` measured in ``precision``; for TP
    the rank's shard sizes).

    weights 4P, gradients 4P, optimizer state (Adam 8P + 4 per tensor; SGD without momentum 0),
    divided by ``dp`` under ZeRO-1; bf16: 2P_matmul per microbatch in flight (autocast's weight
    casts, saved for backward; counted in the profile's saved bytes at its smallest microbatch,
    so removed from the activations there); activations kept: ``inflight * mbs * sum(act_mem)``
    (recompute: layer inputs + RNG state per layer); working set: one layer's full activations
    when recomputing (the layer being recomputed), plus on the last stage two logits-sized buffers
    (the logits' gradient and the loss's softmax); data-parallel all-reduce: the flat gradient
    buffer 4P, after the activations are freed.
    """
    params = sum(prof.params_floats[first:last])
    state = {"adam": 8.0 * params, "sgd": 0.0}[optimizer]
    if sharding is OptimizerSharding.ZERO1:
        state /= dp
    smallest = min(prof.microbatch_sizes)
    copies = 0.0
    act = [float(a) for a in prof.act_mem_bytes[first:last]]
    if precision is Precision.BF16:
        copies = 2.0 * params * inflight
        # the profile's saved bytes at its smallest microbatch include the weight casts of each layer
        act = [max(a - 2.0 * p / smallest, 0.0) for a, p in zip(act, prof.params_floats[first:last], strict=True)]
    if recompute is Recomputation.FULL:
        kept = inflight * (mbs * sum(prof.act_input_bytes[first:last]) + RNG_STATE_BYTES * (last - first))
        working = mbs * max(act)
    else:
        kept = inflight * mbs * sum(act)
        working = 0.0
    if is_last:
        working += 2.0 * mbs * prof.act_output_floats[last - 1] * 4.0
    sync = 4.0 * params if dp > 1 else 0.0  # the flat gradient buffer of the data-parallel all-reduce
    return MemoryTerms(4.0 * params, 4.0 * params, state, copies, kept, working, sync)


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
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--mbs", type=int, nargs="*", help="one-GPU plans at these microbatch sizes (the matrix)")
    parser.add_argument("--precisions", nargs="*", default=["fp32", "bf16"], help="matrix precisions")
    parser.add_argument("--recompute", nargs="*", default=["none", "full"], help="matrix recomputation")
    parser.add_argument("--profile-dir", help="keep the profiles (and network table) in this folder")
    parser.add_argument("--out", default="closed_loop", help="results name: benchmarks/results/<out>.json")
    args = parser.parse_args()
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
    header = {"device": device, "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "torch": torch.__version__, "model": dataclasses.asdict(task), "optimizer": args.optimizer,
              "timing": args.timing}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.profile_dir or tmp
        os.makedirs(data_dir, exist_ok=True)
        def make_input(m: int) -> torch.Tensor:
            return task.batch(0, 0, m)[0]

        profiles = {pr: profile_layers(task.build_model(), make_input, sizes, mean_ce_loss, device=device, repeats=args.repeats,
                                       optimizer=args.optimizer, precision=pr, sweeps=args.sweeps, warmup=args.warmup,
                                       timing=args.timing)
                    for pr in {Precision.BF16 if p.precision is Precision.BF16 else Precision.FP32
                               for p in chosen.values()}}
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
            prof = profiles[plan.precision if plan.precision is Precision.BF16 else Precision.FP32]
            recompute = plan.stages[0].recompute
            sharding = plan.stages[0].optimizer_sharding
            model_name = f"bench-{plan.precision.value}-{recompute.value}"
            derived_profile(prof, recompute).write(data_dir, model_name, "cpu")
            if tp_prof is not None:
                derived_profile(tp_prof, recompute).write(data_dir, model_name, "cpu", tp=2)
            sim = simulate(dataclasses.replace(plan, model=model_name), data_dir=data_dir, gpu_types={"cpu": cpu},
                           config=PROFILED_CONFIG)
            predicted_s = sim.iteration_time
            notes = ["simulate"]
            if recompute is Recomputation.FULL:
                notes.append("recompute: profile t_b += t_f (docs formula)")
            if sharding is OptimizerSharding.ZERO1:
                notes.append("zero1: state / d in memory (docs formula)")
            # memory per rank, predicted
            micro = plan.microbatches()
            pred_mem = []
            for s, stage in enumerate(plan.stages):
                tp = stage.replicas[0].tp
                sp = tp_prof if tp > 1 and tp_prof is not None else prof
                for d in range(plan.dp):
                    inflight = min(plan.pp - s, micro[d])
                    terms = memory_terms(sp, stage.first_layer, stage.last_layer, plan.microbatch_size, inflight,
                                         plan.dp, tp, plan.precision, stage.recompute, stage.optimizer_sharding,
                                         args.optimizer, s == plan.pp - 1)
                    pred_mem.extend([terms] * tp)
            config = RunConfig(steps=args.steps, optimizer=args.optimizer, lr=1e-3, device=device,
                               memory_step=args.steps - 1, threads_per_rank=1, timeout_s=300)
            print(f"running {name} ...", file=sys.stderr, flush=True)
            result = run_plan(plan, task, config)
            times = result.iteration_times[1:-1] or result.iteration_times
            measured_s = statistics.median(times)
            extra = result.steps[-1].extra
            measured = extra["peak_reserved_bytes"]
            allocated = extra["peak_allocated_bytes"]
            worst = max(range(len(measured)), key=lambda r: abs(pred_mem[r].total - measured[r]) / measured[r])
            row = {
                "plan": name, "prediction": "; ".join(notes),
                "predicted s": predicted_s, "measured s": measured_s,
                "time error": f"{(predicted_s - measured_s) / measured_s:+.0%}",
                "predicted MB (worst rank)": pred_mem[worst].total / 1e6, "measured MB": measured[worst] / 1e6,
                "allocated MB": allocated[worst] / 1e6,
                "memory error": f"{(pred_mem[worst].total - measured[worst]) / measured[worst]:+.1%}",
            }
            rows.append(row)
            results.append({**row, "plan_dict": plan.to_dict(), "iteration_times": result.iteration_times,
                            "peak_reserved_bytes": measured, "peak_allocated_bytes": allocated,
                            "predicted_memory_terms": [dataclasses.asdict(t) for t in pred_mem],
                            "simulated_memory_gb": list(sim.memory_per_stage)})
            print_table(rows[-1:], list(row))
            write_json(args.out, {**header, "load_average": os.getloadavg(), "rows": results})  # as it goes
    print()
    print_table(rows, list(rows[0]) if rows else [])
    path = write_json(args.out, {**header, "load_average": os.getloadavg(), "rows": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
