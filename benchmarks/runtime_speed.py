"""Runtime speed on one device: heteroplan's variants against plain PyTorch loops, with MFU.

For each model (the bundled 320M and 1.3B GPTs on a GPU; a tiny GPT with ``--tiny``), at one
global batch, microbatch size and precision, one after the other in one process:

- ``plain eager``: a plain PyTorch loop (the model as one ``nn.Sequential``, fused Adam, gradient
  accumulation over the microbatches, bf16 autocast where asked);
- ``plain compile``: the same loop over ``torch.compile(model)`` (whole model, default mode);
- heteroplan ``eager``, ``graphs`` (``RunConfig.cuda_graphs``), ``compiled`` (``RunConfig.compile``)
  and ``compiled+graphs``: each profiled under its own options (``profile_layers(cuda_graphs=...,
  compile=...)``), predicted by the planner's ``simulate_plan``, then run by ``run_plan`` (one-stage
  plan, one process) with its peak memory measured (``RunConfig.memory_step``).

Every row: median iteration seconds (iterations after the first), model TFLOP/s and MFU
(:mod:`heteroplan.planner.model.flops`: 3 x counted forward FLOPs per sample x samples, against
the GPU type table's dense peak in the precision, found by the device's name; ``--peak-tflops``
declares one), peak memory (CUDA: ``max_memory_reserved``; CPU: the runtime's profiler-based
measurement, none for the plain loops), and for heteroplan's rows the closed-loop errors
(predicted - measured) / measured of time and memory. Then the ratio of heteroplan's best to the
plain ``torch.compile`` loop (> 1: heteroplan is faster). Writes JSON as it goes.

GPU: ``bash benchmarks/runtime_speed.sh`` (docs/runtime.md, "Speed: MFU and torch.compile").
CPU (what the test runs): ``python benchmarks/runtime_speed.py --device cpu --tiny``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from heteroplan.cluster import SAILOR_GPU_TYPES, GPUType
from heteroplan.errors import InputError, RankFailure
from heteroplan.planner import simulate_plan
from heteroplan.planner.model.flops import Utilization, utilization
from heteroplan.planner.model.sim_config import PROFILED_CONFIG
from heteroplan.planner.plan import Plan, Precision, ReplicaGroup, Stage
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan
from heteroplan.runtime.compiled import compile_unavailable
from heteroplan.runtime.config import make_optimizer
from heteroplan.runtime.dimensions import compute_context, set_matmul_precision
from heteroplan.runtime.flops import run_peak_tflops, task_forward_flops_per_sample
from heteroplan.runtime.models import GPT_1_3B, GPT_320M
from heteroplan.runtime.profiler import profile_layers

try:
    from benchmarks._common import print_table
except ImportError:  # run as a script from benchmarks/
    from _common import print_table

MODELS = {"320m": GPT_320M, "1.3b": GPT_1_3B}
TINY = TinyGPTTask(vocab=64, seq_len=16, d_model=32, n_layers=2, n_heads=2)
VARIANTS = {"eager": (False, False), "graphs": (True, False), "compiled": (False, True), "compiled+graphs": (True, True)}
"""heteroplan variant -> (cuda_graphs, compile)."""


def gpu_type_here(device: str, peak: float | None) -> GPUType:
    """The GPU type table's entry of this CUDA device (by its name), else a stand-in ``"local"``
    type (with the declared ``peak`` in every precision, if any)."""
    if device == "cuda":
        name = torch.cuda.get_device_name()
        for gpu in SAILOR_GPU_TYPES:
            if gpu.model and gpu.model in name and peak is None:
                return gpu
    p = peak or 0.0
    return GPUType("local", 1e4, 1, 0.0, "", 0.0, p, p, p, "declared (--peak-tflops)" if peak else "")


def plain_loop(task: TinyGPTTask, plan: Plan, device: str, steps: int, compiled: bool) -> tuple[list[float], float | None]:
    """A plain PyTorch training loop of ``task`` under ``plan``'s batch and precision: seconds per
    iteration, and the peak reserved bytes of the last iteration (CUDA; ``None`` on CPU)."""
    dev = torch.device(device)
    model = task.build_model().to(dev)
    run = torch.compile(model) if compiled else model
    optimizer = make_optimizer(list(model.parameters()), RunConfig(optimizer="adam", lr=1e-4))
    set_matmul_precision(plan.precision)
    mbs, gbs = plan.microbatch_size, plan.global_batch_size
    times, peak = [], None
    for step in range(steps):
        if device == "cuda":
            torch.cuda.synchronize()
            if step == steps - 1:
                torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        for start in range(0, gbs, mbs):
            x, y = (t.to(dev, non_blocking=True) for t in task.batch(step, start, mbs))
            with compute_context(plan.precision, dev.type):
                loss = task.loss(run(x), y) * (mbs / gbs)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        if device == "cuda":
            torch.cuda.synchronize()
            peak = int(torch.cuda.max_memory_reserved())
        times.append(time.perf_counter() - t0)
    del run, model, optimizer
    release_memory(device)
    return times, peak


def release_memory(device: str) -> None:
    """Drop compiled graphs (they hold the model's tensors) and, on CUDA, the cached blocks."""
    import gc

    import torch._dynamo

    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def median_after_first(times: list[float]) -> float:
    return statistics.median(times[1:] or times)


def row_of(model: str, variant: str, seconds: float, usage: Utilization | None, memory: float | None,
           predicted_s: float | None = None, predicted_bytes: float | None = None) -> dict[str, Any]:
    mfu = usage.mfu if usage is not None else None
    row: dict[str, Any] = {
        "model": model, "variant": variant, "iteration s": seconds,
        "TFLOP/s": usage.achieved_tflops if usage is not None else None,
        "MFU": f"{100 * mfu:.1f}%" if mfu is not None else "n/a",
        "peak GB": memory / 1e9 if memory is not None else None,
        "time error": f"{(predicted_s - seconds) / seconds:+.1%}" if predicted_s is not None else "",
        "memory error": f"{(predicted_bytes - memory) / memory:+.1%}" if predicted_bytes and memory else "",
    }
    return row


def heteroplan_row(name: str, task: TinyGPTTask, plan: Plan, variant: str, args: argparse.Namespace, gpu: GPUType,
                   data_dir: str, usage_of: Callable[[float], Utilization | None]) -> dict[str, Any]:
    graphs, compile = VARIANTS[variant]
    target = {}

    def make_input(m: int) -> torch.Tensor:
        inputs, targets = task.batch(0, 0, m)
        target["y"] = targets.to(args.device)  # on the device: no host copy inside a captured graph
        return inputs

    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        return task.loss(out, target["y"][: out.shape[0]])

    model_name = f"{name}-{variant}"
    t0 = time.perf_counter()
    prof = profile_layers(task.build_model(), make_input, (plan.microbatch_size,), loss_fn, device=args.device,
                          warmup=args.warmup, repeats=args.repeats, sweeps=args.sweeps, optimizer="adam",
                          precision=plan.precision, cuda_graphs=graphs, compile=compile)
    prof.write(data_dir, model_name, gpu.name)
    profiled_s = time.perf_counter() - t0
    release_memory(args.device)  # the rank's process needs the GPU's memory
    sim = simulate_plan(dataclasses.replace(plan, model=model_name), data_dir=data_dir, gpu_types={gpu.name: gpu},
                   config=PROFILED_CONFIG)
    config = RunConfig(steps=args.steps, optimizer="adam", lr=1e-4, device=args.device, memory_step=args.steps - 1,
                       timeout_s=600, startup_timeout_s=900, cuda_graphs=graphs, compile=compile,
                       peak_tflops=args.peak_tflops)
    result = run_plan(plan, task, config)
    seconds = median_after_first(result.iteration_times)
    memory = float(result.steps[-1].peak_reserved_bytes[0])
    row = row_of(name, f"heteroplan {variant}", seconds, usage_of(seconds), memory, sim.iteration_time_s,
                 sim.memory_per_stage_gb[0] * 1e9)
    row["predicted s"] = sim.iteration_time_s
    row["profiled in s"] = profiled_s
    row["predicted MFU"] = sim.utilization.mfu if sim.utilization is not None else None
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--tiny", action="store_true", help="a tiny GPT instead (2 blocks, width 32): the CPU test")
    parser.add_argument("--precision", choices=[p.value for p in Precision], default="bf16")
    parser.add_argument("--gbs", type=int, default=32, help="global batch (samples of 512 tokens for the GPTs)")
    parser.add_argument("--mbs", type=int, default=8, help="microbatch size")
    parser.add_argument("--steps", type=int, default=6, help="iterations per row (the median skips the first)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS),
                        help="heteroplan's variants (graphs: CUDA only)")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain PyTorch loops")
    parser.add_argument("--repeats", type=int, default=4, help="profiler: timed runs per measurement")
    parser.add_argument("--sweeps", type=int, default=1, help="profiler: passes")
    parser.add_argument("--warmup", type=int, default=1,
                        help="profiler: untimed runs per measurement (>= 1: the first compiles the compiled variants)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="declared dense peak TFLOP/s of the device (default: the GPU type table's, by name)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "runtime_speed.json"))
    args = parser.parse_args(argv)
    if args.warmup < 1:
        parser.error("--warmup must be >= 1 (a compiled layer's first run compiles it)")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device visible (use --device cpu --tiny)")
    if args.device == "cpu":
        torch.set_num_threads(1)  # as each rank of the runtime (RunConfig.threads_per_rank)
    variants = [v for v in args.variants if args.device == "cuda" or not VARIANTS[v][0]]  # graphs need CUDA
    if compile_unavailable(args.device):
        print(f"torch.compile unavailable: {compile_unavailable(args.device)}; compiled rows skipped", file=sys.stderr)
        variants = [v for v in variants if not VARIANTS[v][1]]
    gpu = gpu_type_here(args.device, args.peak_tflops)
    header = {"device": args.device, "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "torch": torch.__version__, "cuda": torch.version.cuda, "gpu_type": dataclasses.asdict(gpu),
              "precision": args.precision, "gbs": args.gbs, "mbs": args.mbs, "steps": args.steps}
    rows: list[dict[str, Any]] = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        out.write_text(json.dumps({**header, "rows": rows}, indent=2, default=str))

    tasks = {"tiny": TINY} if args.tiny else {m: MODELS[m] for m in args.models}
    with tempfile.TemporaryDirectory() as data_dir:
        for name, task in tasks.items():
            plan = Plan(name, args.gbs, args.mbs, (Stage(0, task.num_layers, (ReplicaGroup(gpu.name, "local"),)),),
                        precision=args.precision)
            flops = task_forward_flops_per_sample(task)
            peak, note = run_peak_tflops(plan, args.device, args.peak_tflops, 1)

            def usage_of(seconds: float, flops: float | None = flops, peak: float = peak, note: str = note) -> Utilization | None:
                return utilization(flops, args.gbs, seconds, peak, note) if flops else None

            first = len(rows)
            if not args.no_plain:
                for compiled in ([False, True] if not compile_unavailable(args.device) else [False]):
                    label = "plain compile" if compiled else "plain eager"
                    print(f"{name}: {label} ...", file=sys.stderr, flush=True)
                    times, memory = plain_loop(task, plan, args.device, args.steps, compiled)
                    seconds = median_after_first(times)
                    rows.append(row_of(name, label, seconds, usage_of(seconds), memory))
                    save()
            for variant in variants:
                print(f"{name}: heteroplan {variant} ...", file=sys.stderr, flush=True)
                try:
                    rows.append(heteroplan_row(name, task, plan, variant, args, gpu, data_dir, usage_of))
                except (RankFailure, InputError, RuntimeError) as exc:  # keep the other rows
                    rows.append({"model": name, "variant": f"heteroplan {variant}", "error": str(exc)[-1500:]})
                save()
            mine = [r for r in rows[first:] if r["variant"].startswith("heteroplan") and "iteration s" in r]
            plain = [r for r in rows[first:] if r["variant"] == "plain compile"]
            if mine and plain:
                best = min(mine, key=lambda r: r["iteration s"])
                header.setdefault("ratios", {})[name] = {
                    "best": best["variant"], "plain_compile_over_best": plain[0]["iteration s"] / best["iteration s"]}
                print(f"{name}: {best['variant']} is {plain[0]['iteration s'] / best['iteration s']:.3f}x the speed of "
                      "the plain torch.compile loop", flush=True)
            save()
    columns = ["model", "variant", "iteration s", "TFLOP/s", "MFU", "peak GB", "predicted s", "time error",
               "memory error"]
    print()
    print_table([r for r in rows if "iteration s" in r], columns)
    for r in rows:
        if "error" in r:
            print(f"{r['model']} {r['variant']} failed: {r['error'][-300:]}")
    for name, ratio in header.get("ratios", {}).items():
        print(f"{name}: heteroplan's best ({ratio['best']}) / plain torch.compile speed = "
              f"{ratio['plain_compile_over_best']:.3f}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
