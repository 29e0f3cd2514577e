"""Does a profiled pass cost what a training step's microbatch costs? One model, one process.

For each precision and microbatch size, seconds per microbatch (forward + loss + backward) of the
whole model measured three ways:

- ``isolated``: one microbatch between two synchronisations, the median of ``--repeats`` (what the
  profiler's longest prefix measures, and what prefix timing makes the layers add up to);
- ``back-to-back``: ``--microbatches`` microbatches in a row with gradients accumulating and one
  synchronisation at the end, the whole model under one ``compute_context`` (as a stage of the
  runtime runs them), median over ``--repeats`` such runs;
- ``per-layer autocast`` (bf16): the same back-to-back run with every layer under its own
  autocast region, as the profiler wraps them.

- ``synced loop``: back-to-back microbatches as the runtime ran them before session 17: each
  microbatch's inputs and targets built on the host and copied with ``.to(device)`` (from pageable
  memory: a stream synchronisation) and its loss read with ``float()`` (another);
- ``async loop``: the same loop as the runtime runs it now: pinned copies with ``non_blocking``
  and the losses added on the device, read once at the end;
- ``graphed`` (CUDA): back-to-back microbatches of the whole model's forward, loss and backward
  captured once as a CUDA graph and replayed, as ``RunConfig(cuda_graphs=True)`` runs them
  (``heteroplan.runtime.graphs.GraphedMicrobatch``): what a step costs without the host's launches. Where it is
  far below ``back-to-back`` the step is launch-bound, and graphs are what would make it both
  faster and predictable. ``nan`` (and the error in the JSON) where the capture fails.

If ``back-to-back`` differs from ``isolated`` the profile cannot predict a step whatever its
per-layer accounting; if ``per-layer autocast`` differs from ``back-to-back`` the profiler's
wrapping is the cause; ``synced loop`` against ``async loop`` is what the synchronisations cost. Prints a table and writes ``benchmarks/results/step_vs_profile.json``.

    python benchmarks/step_vs_profile.py --device cuda --layers 24 --width 1024 --heads 16 \\
        --seq 512 --vocab 8192 --mbs 1 8
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from heteroplan.planner.plan import Precision
from heteroplan.runtime import TinyGPTTask
from heteroplan.runtime.dimensions import compute_context, set_matmul_precision
from heteroplan.runtime.profiler import graphed_microbatch_seconds

try:
    from benchmarks._common import print_table, write_json
except ImportError:  # run as a script from benchmarks/
    from _common import print_table, write_json


def timed(fn: Callable[[], None], dev: torch.device) -> float:
    """Seconds of ``fn()`` between two synchronisations (wall clock: CPU launch time counts)."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--mbs", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="step_vs_profile")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dev = torch.device(args.device)
    task = TinyGPTTask(vocab=args.vocab, seq_len=args.seq, d_model=args.width, n_layers=args.layers, n_heads=args.heads)
    model = task.build_model().to(dev)
    layers = list(model)

    def loss(out: torch.Tensor) -> torch.Tensor:
        return out.float().logsumexp(-1).mean()

    rows = []
    for name in args.precisions:
        precision = Precision(name)
        set_matmul_precision(precision)
        for mbs in args.mbs:
            x = task.batch(0, 0, mbs)[0].to(dev)

            def whole(x: torch.Tensor = x, precision: Precision = precision) -> None:
                with compute_context(precision, dev.type):
                    h = x
                    for layer in layers:
                        h = layer(h)
                    value = loss(h)
                value.backward()

            def per_layer(x: torch.Tensor = x, precision: Precision = precision) -> None:
                h = x
                for layer in layers:
                    with compute_context(precision, dev.type):
                        h = layer(h)
                with compute_context(precision, dev.type):
                    value = loss(h)
                value.backward()

            def back_to_back(fn: Callable[[], None]) -> float:
                def run() -> None:
                    for _ in range(args.microbatches):
                        fn()
                times = []
                for _ in range(args.repeats + 1):
                    model.zero_grad(set_to_none=True)
                    times.append(timed(run, dev) / args.microbatches)
                return statistics.median(times[1:])

            def loop(synced: bool, precision: Precision = precision, mbs: int = mbs) -> None:
                total = torch.zeros((), dtype=torch.float64, device=dev)
                for i in range(args.microbatches):
                    inputs, target = task.batch(1, i * mbs, mbs)
                    if synced or dev.type != "cuda":
                        inputs, target = inputs.to(dev), target.to(dev)
                    else:
                        inputs = inputs.pin_memory().to(dev, non_blocking=True)
                        target = target.pin_memory().to(dev, non_blocking=True)
                    with compute_context(precision, dev.type):
                        h = inputs
                        for layer in layers:
                            h = layer(h)
                        value = task.loss(h, target) / args.microbatches
                    if synced:
                        float(value.detach())
                    else:
                        total += value.detach().double()
                    value.backward()
                float(total)

            def looped(synced: bool) -> float:
                times = []
                for _ in range(args.repeats + 1):
                    model.zero_grad(set_to_none=True)
                    times.append(timed(lambda: loop(synced), dev) / args.microbatches)
                return statistics.median(times[1:])

            isolated = []
            for _ in range(args.repeats + 1):
                model.zero_grad(set_to_none=True)
                isolated.append(timed(whole, dev))
            row = {"precision": name, "mbs": mbs, "isolated s": statistics.median(isolated[1:]),
                   "back-to-back s": back_to_back(whole)}
            row["per-layer autocast s"] = back_to_back(per_layer) if precision is Precision.BF16 else row["back-to-back s"]
            row["back-to-back / isolated"] = row["back-to-back s"] / row["isolated s"]
            row["synced loop s"], row["async loop s"] = looped(True), looped(False)
            row["synced / async"] = row["synced loop s"] / row["async loop s"]
            if dev.type == "cuda":
                try:
                    row["graphed s"], error = graphed_microbatch_seconds(model, x, precision, loss, args.repeats), ""
                except Exception as exc:  # noqa: BLE001 - a probe: report what failed, keep the other columns
                    row["graphed s"], error = float("nan"), f"{type(exc).__name__}: {exc}"[:300]
                row["back-to-back / graphed"] = row["back-to-back s"] / row["graphed s"]
                if error:
                    row["graphed error"] = error
            rows.append(row)
            print_table(rows[-1:], list(row))
    model.zero_grad(set_to_none=True)
    print()
    print_table(rows, list(rows[0]))
    header = {"device": args.device, "device_name": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
              "torch": torch.__version__, "model": vars(args)}
    print(f"wrote {write_json(args.out, {**header, 'rows': rows})}")


if __name__ == "__main__":
    main()
