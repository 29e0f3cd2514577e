"""Which transfer model do the measured runs support: heteroplan's or Sailor's (issue 50)?

The two simulators differ by more than 10% on Sailor's heterogeneous A100+V100 plans in two
terms (docs/sailor.md, "The two simulators' disagreement"):

- **pipeline send of a TP group**: heteroplan sends one microbatch's activation of ``n`` bytes as
  one flow at the 1-GPU curve, ``n / bw_1(n)``; Sailor's simulator reads the curve of ``k =
  min(tp, GPUs per node)`` senders at the whole activation, ``n / bw_k(n)``.
- **gradient all-reduce**: heteroplan runs ``tp`` rings at once that share the ``tp``-GPU curve,
  read at the bucket size ``G``: ``2 (D-1) G/D / (bw_tp(G) / tp)``; Sailor runs one ring on the
  1-GPU curve read at a ring step's message ``G/D`` (500 MB buckets): ``2 (D-1) (G/D) / bw_1(G/D)``.

Both only differ where ``bw_k`` grows with ``k`` (one NIC per GPU): the GCP A100/V100 curves
and GH200's alike, so the 15 measured GH200 runs of Sailor's artifact decide them (the 4 MIT
runs share one NIC per node, ``bw_8 = bw_1``, and tell the variants apart only in the
all-reduce's message size). Each variant swaps one formula in the simulator and reports the
iteration-time error on the runs: with the shipped constants, and with the platform's constants
refitted on its runs under that variant (so that no variant loses by constants fitted to another). The bandwidths the
variants read on Sailor's A100/V100 plans are printed too.

    python benchmarks/sailor_model_evidence.py   (JSON: benchmarks/results/sailor_model_evidence.json)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from _common import print_table, write_json  # noqa: E402
from sailor_sim_accuracy import DATA, PLATFORM_OF, SETS, errors, fit, load_runs, mae  # noqa: E402

import heteroplan.planner.model.simulator as simulator_module  # noqa: E402
import heteroplan.planner.model.sync as sync_module  # noqa: E402
from heteroplan.perf.sailor_network import NetworkModel, load_network  # noqa: E402
from heteroplan.planner.model import comm  # noqa: E402
from heteroplan.planner.model.sim_config import SimConfig  # noqa: E402

# Sailor's simulator: DeepSpeed's all-reduce bucket (its MEMORY_BUCKET_DEEPSPEED_SIZE, bytes)
SAILOR_BUCKET_BYTES = 5e8
GPUS_PER_NODE = {"GH-96": 4, "A100-40": 4, "V100-16": 4, "RTX-2080": 8, "RTX-3090": 8, "Titan-RTX": 8}


def sailor_send_s(network: NetworkModel, src, dst, tp: int, nbytes, config: SimConfig) -> np.ndarray:
    """Sailor's pipeline send: the whole activation at the curve of min(tp, GPUs per node) senders."""
    n = np.asarray(nbytes, dtype=float)
    k = min(tp, GPUS_PER_NODE.get(src[0], tp))
    return config.transfer_latency_s + n / 1e9 / network.curve(src, dst, k).bandwidth(n)


def sailor_allreduce_s(network: NetworkModel, links, tp: int, replicas: int, grad_bytes, config: SimConfig) -> np.ndarray:
    """Sailor's all-reduce: one ring on the 1-GPU curve read at a step's message (bucket / D)."""
    return _ring(network, links, replicas, grad_bytes, config, k=1, share=1, step_message=True,
                 bucket=SAILOR_BUCKET_BYTES)


def ours_at_step_message_s(network: NetworkModel, links, tp: int, replicas: int, grad_bytes, config: SimConfig) -> np.ndarray:
    """heteroplan's all-reduce (tp rings sharing bw_tp) with the curve read at a step's message."""
    return _ring(network, links, replicas, grad_bytes, config, k=tp, share=tp, step_message=True,
                 bucket=config.allreduce_bucket_bytes)


def _ring(network, links, replicas, grad_bytes, config, *, k, share, step_message, bucket) -> np.ndarray:
    g = np.asarray(grad_bytes, dtype=float)
    if replicas <= 1:
        return np.zeros_like(g)
    buckets = np.maximum(np.ceil(g / bucket), 1.0) if bucket > 0 else np.ones_like(g)
    message = g / buckets
    read_at = message / replicas if step_message else message
    bw = np.min([network.curve(a, b, k).bandwidth(read_at) for a, b in sorted(links)], axis=0) / share
    return buckets * config.ring_allreduce_s(replicas, message / 1e9 / bw)


VARIANTS = {
    "heteroplan (shipped)": {},
    "send: Sailor's (n / bw_k(n))": {"send": sailor_send_s},
    "all-reduce: Sailor's (bw_1 at G/D)": {"allreduce": sailor_allreduce_s},
    "all-reduce: ours read at G/D": {"allreduce": ours_at_step_message_s},
    "both Sailor's": {"send": sailor_send_s, "allreduce": sailor_allreduce_s},
}


@contextlib.contextmanager
def variant(swaps: dict) -> Iterator[None]:
    """The simulator with the given formulas swapped in (restored on exit)."""
    saved = (simulator_module.pipeline_send_s, sync_module.allreduce_s)
    simulator_module.pipeline_send_s = swaps.get("send", comm.pipeline_send_s)
    sync_module.allreduce_s = swaps.get("allreduce", comm.allreduce_s)
    try:
        yield
    finally:
        simulator_module.pipeline_send_s, sync_module.allreduce_s = saved


def refitted(runs, platform: str) -> np.ndarray:
    """Errors with the platform's constants refitted on all its runs under the variant in force."""
    cfg, _, _ = fit(runs, platform)
    return errors(runs, cfg)


def curve_rows() -> list[dict]:
    """Bandwidths each variant reads on Sailor's scenario (A100-40 / V100-16 in us-central1-a)."""
    net, z, rows = load_network(), "us-central1-a", []
    act = 2 * 2048 * 1024 * 4  # OPT-350: one microbatch of 2 at the end of a layer, fp32 (bytes)
    for t in ("A100-40", "V100-16"):
        e = (t, z)
        b1, b4 = float(net.curve(e, e, 1).bandwidth(act)), float(net.curve(e, e, 4).bandwidth(act))
        rows.append({"what": f"{t}: send of {act / 1e6:.1f} MB (mbs 2)", "bw_1 (GB/s)": round(b1, 3),
                     "bw_4 (GB/s)": round(b4, 3), "ours (ms)": round(act / b1 / 1e6, 2), "Sailor (ms)": round(act / b4 / 1e6, 2)})
    return rows


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    rows = []
    for set_name, (patterns, model, _types, _sailor) in SETS.items():
        runs, _ = load_runs(DATA, patterns, model)
        if not runs:
            continue
        platform = PLATFORM_OF[set_name]
        first = next(iter(VARIANTS))
        base = errors(runs, None)
        for name, swaps in VARIANTS.items():
            with variant(swaps):
                err = errors(runs, None)
                refit = mae(refitted(runs, platform))[0]
            moved = 100 * np.abs((1 + err[:, 0]) / (1 + base[:, 0]) - 1).max() if name != first else 0.0
            rows.append({"runs": f"{set_name} ({len(runs)})", "variant": name,
                         "time MAE % (shipped constants)": round(mae(err)[0], 2), "time MAE % (constants refitted)": round(refit, 2),
                         "largest move of a run's time %": round(float(moved), 2)})
    print_table(rows, list(rows[0]))
    curves = curve_rows()
    print()
    print_table(curves, list(curves[0]))
    print(f"wrote {write_json('sailor_model_evidence', {'variants': rows, 'curves': curves})}")


if __name__ == "__main__":
    main()
