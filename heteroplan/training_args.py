"""Command-line flags of a training run, shared by ``heteroplan run`` and the torchrun entry
(``python -m heteroplan.runtime.worker``) so both accept the same flags. Torch-free, so the
CLI can list its commands without the ``[runtime]`` extra, and outside both ``commands`` and
``runtime`` so the runtime never imports the command layer."""

from __future__ import annotations

import argparse
from typing import Any

from heteroplan.argtypes import MAX_TOKENS, integer, nonempty, number
from heteroplan.inputs import MAX_WAIT_S, enum_values
from heteroplan.run_options import Device, Optimizer, PipelineEngine, PipelineSchedule

__all__ = ["add_training_arguments", "run_config_kwargs", "model_kwargs"]


def add_training_arguments(p: argparse.ArgumentParser, *, steps: int, optimizer: str, lr: float) -> None:
    """Add the flags that map to :class:`heteroplan.runtime.RunConfig` (defaults per caller)."""
    p.add_argument("--model", type=nonempty("PACKAGE.MODULE:FACTORY"), default=None, metavar="PACKAGE.MODULE:FACTORY",
                   help="your model: a callable returning a TrainTask (default: the built-in GPT-2-style model)")
    p.add_argument("--layers", type=integer(1, 1024), default=None, help="tiny GPT blocks (>= 1; default: plan layers - 2; 4 for a generated plan)")
    p.add_argument("--width", type=integer(1, 65_536), default=None, help="hidden size d_model (default 32)")
    p.add_argument("--heads", type=integer(1, 1024), default=None,
                   help="attention heads (default: the least common multiple of 2 and the plan's TP degrees)")
    p.add_argument("--seq-len", type=integer(1, MAX_TOKENS), default=16, help="sequence length (tokens, default 16)")
    p.add_argument("--steps", type=integer(1), default=steps, help=f"iterations to train (default {steps})")
    p.add_argument("--optimizer", default=optimizer, choices=enum_values(Optimizer), help=f"optimizer (default {optimizer})")
    p.add_argument("--lr", type=number(0), default=lr, help=f"learning rate (default {lr})")
    p.add_argument("--schedule", default=PipelineSchedule.ONE_F_ONE_B.value, choices=enum_values(PipelineSchedule),
                   help="pipeline schedule")
    p.add_argument("--pipeline", default=PipelineEngine.AUTO.value, choices=enum_values(PipelineEngine),
                   help="pipeline engine: torch.distributed.pipelining where it can run the plan (auto), or force one")
    p.add_argument("--checkpoint-dir", type=nonempty("a path"), default=None, help="write (and resume from) checkpoints here")
    p.add_argument("--checkpoint-every", type=integer(0), default=0, help="iterations between checkpoints (0: at the end)")
    p.add_argument("--device", default=Device.CPU.value, choices=enum_values(Device),
                   help="where the ranks compute: cpu (gloo; default) or cuda (one GPU per rank, NCCL)")
    p.add_argument("--timeout", type=number(0, high=MAX_WAIT_S), default=120.0, help="seconds a rank may wait on a peer")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="replay each microbatch as a CUDA graph (--device cuda; one-stage plans, TP 1, no ZeRO; "
                        "profile with `heteroplan profile --cuda-graphs` to predict it)")
    p.add_argument("--compile", action="store_true",
                   help="compile every plan layer with torch.compile (alone or with --cuda-graphs; TP 1; profile with "
                        "`heteroplan profile --compile` to predict it)")
    p.add_argument("--peak-tflops", type=number(0), default=None,
                   help="declared dense peak TFLOP/s of one device in the plan's precision, for the MFU "
                        "(default: the GPU type table's on CUDA, none on CPU)")


def run_config_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``RunConfig(**run_config_kwargs(args))`` for flags added by :func:`add_training_arguments`."""
    return {
        "steps": args.steps, "optimizer": args.optimizer, "lr": args.lr, "schedule": args.schedule,
        "pipeline": args.pipeline,
        "checkpoint_dir": args.checkpoint_dir, "checkpoint_every": args.checkpoint_every,
        "device": args.device, "timeout_s": args.timeout, "cuda_graphs": args.cuda_graphs,
        "compile": args.compile, "peak_tflops": args.peak_tflops,
    }


def model_kwargs(args: argparse.Namespace, num_layers: int, tp_degrees: list[int]) -> dict[str, Any]:
    """``TinyGPTTask(**model_kwargs(...))``: the GPT-2-style model a plan of ``num_layers`` layers runs.

    Heads default to a multiple of every TP degree (each TP rank holds ``heads / tp`` of them);
    the width to 32, or 8 per head when 32 is not a multiple of the heads.
    """
    import math

    heads = args.heads or math.lcm(2, *tp_degrees)
    width = args.width or (32 if 32 % heads == 0 else 8 * heads)
    return {"n_layers": args.layers or num_layers - 2, "d_model": width, "n_heads": heads, "seq_len": args.seq_len}
