"""``heteroplan run``: train the built-in tiny GPT (or your model, ``--model``) under a plan on local processes."""

from __future__ import annotations

import argparse
import sys

from heteroplan.argtypes import int_list, integer, nonempty
from heteroplan.commands.jsonout import print_json
from heteroplan.errors import InputError, LossNotFinite
from heteroplan.inputs import check_process_count, enum_values
from heteroplan.names import printable
from heteroplan.planner.plan import OptimizerSharding, Precision, Recomputation
from heteroplan.training_args import add_training_arguments, model_kwargs, run_config_kwargs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute a plan for real: train a tiny GPT on local processes (needs [runtime])")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--plan", type=nonempty("a path"), help="plan JSON: `heteroplan plan --out` / --json output, Plan.to_json, a Sailor "
                     "plan_config file, or independent pipelines (PipelineSet.to_json); one process per planned GPU")
    src.add_argument("--pp", type=integer(1), default=2, help="pipeline stages of a generated plan (default 2)")
    p.add_argument("--dp", type=integer(1), default=2, help="data-parallel replicas of a generated plan (default 2)")
    p.add_argument("--microbatches", type=int_list(1), default=None,
                   help="microbatches per replica of a generated plan, e.g. 3,1 (heterogeneous DP)")
    p.add_argument("--mbs", type=integer(1), default=4, help="microbatch size of a generated plan (samples)")
    p.add_argument("--precision", choices=enum_values(Precision), default=Precision.FP32.value,
                   help="arithmetic of a generated plan (bf16: autocast with fp32 master weights)")
    p.add_argument("--recompute", choices=enum_values(Recomputation), default=Recomputation.NONE.value,
                   help="activation recomputation on every stage of a generated plan")
    p.add_argument("--optimizer-sharding", choices=enum_values(OptimizerSharding), default=OptimizerSharding.NONE.value,
                   help="optimizer state of a generated plan's stages sharded over their replicas (zero1)")
    p.add_argument("--json", action="store_true", help="print the run's summary as JSON (steps on stderr)")
    add_training_arguments(p, steps=20, optimizer="adam", lr=0.003)
    p.set_defaults(func=run)


def generated_plan(args: argparse.Namespace, num_layers: int):
    from heteroplan.planner.plan import Plan, ReplicaGroup, Stage

    if args.pp < 1 or args.pp > num_layers:
        raise InputError("--pp", args.pp, f"must be between 1 and the model's {num_layers} layers")
    if args.dp < 1:
        raise InputError("--dp", args.dp, "must be >= 1")
    check_process_count("--pp x --dp", args.pp * args.dp)  # before building a plan of 100,000 replicas
    micro = tuple(args.microbatches) if args.microbatches else None
    per = micro or (2,) * args.dp
    bounds = [round(i * num_layers / args.pp) for i in range(args.pp + 1)]
    stages = tuple(Stage(a, b, (ReplicaGroup("cpu", "local", 1, args.dp),), args.recompute, args.optimizer_sharding)
                   for a, b in zip(bounds, bounds[1:], strict=False))
    return Plan(args.model or "tiny-gpt", sum(per) * args.mbs, args.mbs, stages, micro, args.precision)


def run(args: argparse.Namespace) -> int:
    try:
        from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan
        from heteroplan.runtime.layout import load_run, run_world_size, tp_degrees
        from heteroplan.runtime.worker import run_pipeline_choice
    except ImportError as exc:
        raise InputError("runtime", "torch", str(exc)) from None

    user_task = None
    if args.model:
        from heteroplan.runtime.models import load_task

        user_task = load_task(args.model)
    if args.plan:
        plan = load_run(args.plan)
        check_process_count("--plan", run_world_size(plan))  # one process per planned GPU
    elif user_task is not None:
        plan = generated_plan(args, getattr(user_task, "num_layers", None) or len(user_task.build_model()))
    else:
        plan = generated_plan(args, (args.layers if args.layers is not None else 4) + 2)
    if user_task is not None:
        task = user_task
    else:
        model = model_kwargs(args, plan.num_layers, tp_degrees(plan))
        if model["n_layers"] < 1:
            raise InputError("--layers", model["n_layers"], "the tiny GPT needs at least 1 block (plans of >= 3 layers)")
        task = TinyGPTTask(**model)
    config = RunConfig(**run_config_kwargs(args))
    log = sys.stderr if args.json else sys.stdout
    print(printable(plan.describe(), keep="\n"), file=log)
    what = (f"{args.model}" if args.model else f"GPT-2-style decoder, {task.n_layers} blocks, width {task.d_model}, "
            f"{task.n_heads} heads, sequence {task.seq_len}")
    print(f"model: {what}; {run_world_size(plan)} processes on this machine (one per planned GPU)", file=log)
    print(f"pipeline: {run_pipeline_choice(plan, config).describe()}", file=log)
    print(f"{'step':>6} {'loss':>8} {'ms/iter':>9} {'sync ms':>8}", file=log)
    try:
        result = run_plan(plan, task, config, progress=lambda m: print(
            f"{m.step:6d} {m.loss:8.4f} {m.iteration_time * 1e3:9.1f} {m.sync_time * 1e3:8.2f}", file=log, flush=True))
    except LossNotFinite as exc:  # the run stopped at that iteration; checkpoints before it are kept
        kept = (f"; the checkpoint at iteration {exc.checkpoint.step} ({exc.checkpoint.path}) is kept"
                if exc.checkpoint is not None else "")
        raise InputError("--lr", args.lr, exc.reason + kept) from None
    code = exit_code(result)
    usage = result.utilization() if result.steps else None
    if args.json:
        print_json({  # strict JSON: a diverged loss (NaN) or an n/a utilization is null
            "plan": plan.to_dict(), "processes": plan.num_gpus, "steps": result.final_step,
            "losses": [float(x) for x in result.losses],
            "median_iteration_s": result.median_iteration_time() if result.steps else None,
            "wall_s": result.wall_time,
            "checkpoint": str(result.checkpoint.path) if result.checkpoint is not None else None,
            "stopped_early": result.stopped_early,
            "pipeline": result.pipeline,
            "utilization": usage.to_dict() if usage is not None else None,
        })
        return code
    if result.steps:
        print(f"{plan.num_gpus} processes, median {result.median_iteration_time() * 1e3:.1f} ms/iteration, "
              f"loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}, wall {result.wall_time:.1f} s")
        print("utilization: " + (usage.describe() if usage is not None else "model FLOPs not counted (the model does not run on "
                                 "torch's meta device), MFU: n/a"))
    if result.stopped_early:
        print(f"stopped early at iteration {result.final_step} of {config.steps}")
    if result.checkpoint is not None:
        print(f"checkpoint: iteration {result.checkpoint.step} in {result.checkpoint.path}")
    return code


def exit_code(result) -> int:
    """0 when the run finished; 128 + the signal's number (130 SIGINT, 143 SIGTERM) when one stopped
    it; 130 when it stopped early otherwise (``max_seconds``)."""
    if not result.stopped_early:
        return 0
    return 128 + (result.signal or 2)
