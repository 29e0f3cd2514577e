"""``heteroplan profile``: profile a model's layers and this machine's network for the planner."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from heteroplan.argtypes import MAX_TOKENS, integer, nonempty
from heteroplan.commands.jsonout import print_json
from heteroplan.errors import InputError
from heteroplan.inputs import check_process_count, enum_values
from heteroplan.names import printable
from heteroplan.planner.plan import Precision
from heteroplan.run_options import CommBackend, LayerTiming, Optimizer

DEMO_NAME = "demo-mlp"
TINY_GPT_NAME = "tiny-gpt"


def demo_model(vocab: int = 256, width: int = 128, blocks: int = 4, seq: int = 64) -> tuple[Any, Callable[[int], Any]]:
    """A small language-model-shaped Sequential (embedding, ``blocks`` MLP blocks, head) and its input maker.

    Input: token ids of shape ``(mbs, seq)``; output: logits ``(mbs, seq, vocab)``.
    """
    import torch
    from torch import nn

    def block() -> nn.Module:
        return nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    model = nn.Sequential(nn.Embedding(vocab, width), *(block() for _ in range(blocks)), nn.Linear(width, vocab))
    return model, lambda mbs: torch.randint(0, vocab, (mbs, seq))


def builtin_model(seq: int = 64) -> tuple[str, Any, Callable[[int], Any]]:
    """``(name, model, make_input)``: the runtime's tiny GPT when available, else :func:`demo_model`."""
    try:
        import torch

        from heteroplan.runtime.models import tiny_gpt  # type: ignore[import-not-found]

        model = tiny_gpt()
        emb = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding))
        # longest input the positional embedding takes (tokens)
        length = next((int(m.positions.shape[0]) for m in model.modules() if isinstance(getattr(m, "positions", None), torch.Tensor)), seq)

        def make_input(mbs: int) -> Any:
            return torch.randint(0, emb.num_embeddings, (mbs, min(seq, length)))

        with torch.no_grad():
            model(make_input(1))
        return TINY_GPT_NAME, model, make_input
    except Exception:  # a missing or changed tiny GPT falls back to the demo model
        model, make_input = demo_model(seq=seq)
        return DEMO_NAME, model, make_input


def user_model(spec: str) -> tuple[str, Any, Callable[[int], Any], Callable[[Any], Any]]:
    """``(name, model, make_input, loss_fn)`` of the task ``"package.module:factory"`` names
    (:func:`heteroplan.runtime.models.load_task`): its model, the inputs of iteration 0's first
    samples, and its loss against their targets; the name is the factory's."""
    from heteroplan.runtime.models import load_task

    task = load_task(spec)
    model = task.build_model()
    sample = {}

    def make_input(mbs: int) -> Any:
        inputs, sample["target"] = task.batch(0, 0, mbs)
        return inputs

    def loss_fn(output: Any) -> Any:
        return task.loss(output, sample["target"][: output.shape[0]].to(output.device))

    return spec.split(":")[1], model, make_input, loss_fn


def _sizes(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError("--mbs", text, "expected comma-separated integers, e.g. 1,2,4") from None
    if not out:
        raise InputError("--mbs", text, "no microbatch size given")
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="profile a model's layers and the local network into a planner data directory")
    p.add_argument("--out", type=nonempty("a path"), required=True, help="data directory to write (llm_info.json, profiles/, network files)")
    p.add_argument("--gpu-type", type=nonempty("a name"), default="cpu", help="name of this device type in the plans (default: cpu)")
    p.add_argument("--zone", type=nonempty("a name"), default="local", help="zone name of this machine (default: local)")
    p.add_argument("--model", type=nonempty("PACKAGE.MODULE:FACTORY"), default=None, metavar="PACKAGE.MODULE:FACTORY",
                   help="profile your model: a callable returning a TrainTask (its build_model() layers, its batch() inputs "
                        "and loss); default: the built-in tiny GPT")
    p.add_argument("--model-name", type=nonempty("a name"), help=f"name of the profiled model (default: {TINY_GPT_NAME} or {DEMO_NAME})")
    p.add_argument("--device", type=nonempty("cpu, cuda or cuda:<i>"), default="cpu", help="cpu, cuda or cuda:<i>")
    p.add_argument("--mbs", default="1,2,4", help="microbatch sizes, comma-separated (default: 1,2,4)")
    p.add_argument("--seq", type=integer(1, MAX_TOKENS), default=64, help="sequence length of the built-in model's input (tokens)")
    p.add_argument("--warmup", type=integer(0, 1000), default=2, help="untimed runs per measurement")
    p.add_argument("--repeats", type=integer(1, 1000), default=5, help="timed runs per measurement (median kept)")
    p.add_argument("--sweeps", type=integer(1, 1000), default=None,
                   help="interleaved passes over all sizes and layers, the fastest kept (default: 9 with --calibrate, "
                        "else 1; more on a machine whose speed drifts)")
    p.add_argument("--optimizer", choices=enum_values(Optimizer), default=Optimizer.SGD.value, help="optimizer whose step is timed")
    p.add_argument("--timing", choices=enum_values(LayerTiming), default=LayerTiming.PREFIX.value,
                   help="time whole prefixes of the model so the layers add up to a measured whole forward and "
                        "backward (default; H100: within 1%% of the step at microbatch 1-8), or each layer alone "
                        "(L instead of L(L+1)/2 runs; +23-38%% at microbatch 1) (docs/runtime.md)")
    p.add_argument("--time-recomputed", action="store_true",
                   help="also time the layers recomputed (torch.utils.checkpoint), so recomputing plans are "
                        "priced from measurement")
    p.add_argument("--precision", choices=enum_values(Precision), default=Precision.FP32.value,
                   help="profile the arithmetic a plan of this precision runs (bf16: autocast)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="CUDA: time each microbatch replayed as one CUDA graph, as `heteroplan run --cuda-graphs` "
                        "runs one-stage plans (the profile to predict such runs; a bf16 step is launch-bound without)")
    p.add_argument("--compile", action="store_true",
                   help="time every layer compiled with torch.compile, as `heteroplan run --compile` runs them "
                        "(the profile to predict compiled runs)")
    p.add_argument("--no-network", action="store_true", help="skip the network measurement")
    p.add_argument("--world-size", type=integer(2), default=2, help="processes for the network measurement")
    p.add_argument("--backend", choices=enum_values(CommBackend), default=CommBackend.GLOO.value, help="torch.distributed backend")
    p.add_argument("--calibrate", action="store_true",
                   help="then run calibration plans of the built-in tiny GPT with the runtime and fit the simulator "
                        "to them (writes sim_config.json)")
    p.add_argument("--rounds", type=integer(1, 100_000), default=None,
                   help="with --calibrate: visits of every calibration plan (default 30; plans take turns)")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of tables")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        from heteroplan.runtime.profiler import profile_layers
    except ImportError as exc:  # no torch: named as `heteroplan run` names it, not a traceback
        raise InputError("runtime", "torch", str(exc)) from None

    if args.seq < 1:
        raise InputError("--seq", args.seq, "must be >= 1")
    if not args.no_network:  # before any profiling: 500 processes on a workstation is a typo
        if args.world_size < 2:
            raise InputError("--world-size", args.world_size, "must be >= 2 (the network needs two processes)")
        check_process_count("--world-size", args.world_size)
    loss_fn = None
    if args.model:
        name, model, make_input, loss_fn = user_model(args.model)
    else:
        name, model, make_input = builtin_model(args.seq)
    if args.calibrate and (name != TINY_GPT_NAME or args.device != "cpu" or args.no_network):
        raise InputError("--calibrate", True, "calibrates the built-in tiny GPT on CPU, with the network measured")
    name = args.model_name or name
    prof = profile_layers(
        model, make_input, _sizes(args.mbs), device=args.device, warmup=args.warmup, repeats=args.repeats,
        optimizer=args.optimizer, sweeps=(9 if args.calibrate else 1) if args.sweeps is None else args.sweeps,
        loss_fn=loss_fn, timing=args.timing, precision=args.precision, time_recomputed=args.time_recomputed,
        cuda_graphs=args.cuda_graphs, compile=args.compile,
    )
    path = prof.write(args.out, name, args.gpu_type)
    summary: dict[str, Any] = {
        "model": name,
        "gpu_type": args.gpu_type,
        "layers": prof.num_layers,
        "microbatch_sizes": list(prof.microbatch_sizes),
        "cuda_graphs": prof.cuda_graphs,
        "compiled": prof.compiled,
        "forward_flops_per_sample": sum(prof.forward_flops),
        "profile": str(path),
    }
    net = None
    if not args.no_network:
        from heteroplan.runtime.netbench import measure_network

        net = measure_network(args.world_size, backend=args.backend)
        net.write(args.out, args.gpu_type, args.zone)
        summary["zone"] = args.zone
        summary["network"] = {"coeffs": list(net.coeffs), "cap_bytes_per_s": net.cap_bytes_per_s}
    calibration = None
    if args.calibrate:
        from heteroplan.runtime.calibrate import calibrate
        from heteroplan.runtime.models import TinyGPTTask

        calibration = calibrate(
            TinyGPTTask(seq_len=make_input(1).shape[1]), args.out, name, gpu_type=args.gpu_type, zone=args.zone,
            processes=args.world_size, rounds=args.rounds, progress=None if args.json else print,
        )
        summary["calibration"] = calibration.to_dict()
    if args.json:
        print_json(summary)
        return 0
    print(printable(f"{name} on {args.gpu_type} ({prof.device}), seconds per microbatch, sizes per sample:"))
    print(printable(prof.table(), keep="\n"))
    if net is not None:
        print(f"\nnetwork ({args.backend}, {args.world_size} processes), zone {args.zone}:")
        print(net.table())
    if calibration is not None:
        print("\ncalibration (simulated vs measured seconds per iteration):")
        print(calibration.describe())
    print(f"\nwrote {Path(args.out)}; plan with:")
    print(
        f"  plan_job({name!r}, gbs, {{({args.gpu_type!r}, {args.zone!r}): N}}, "
        f"gpu_types=(GPUType({args.gpu_type!r}, MEMORY_GB, PER_NODE),), data_dir={str(args.out)!r})"
    )
    return 0
