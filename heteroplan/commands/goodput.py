"""``heteroplan goodput``: the Sia ground-truth goodput of an application per configuration."""

from __future__ import annotations

import argparse

import numpy as np

from heteroplan.argtypes import fraction, int_list, nonempty
from heteroplan.cluster import PRESETS, Cluster, preset
from heteroplan.commands.jsonout import print_json
from heteroplan.names import printable
from heteroplan.perf.applications import APPLICATIONS
from heteroplan.perf.sia_data import true_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("goodput", help="goodput of a Sia application per GPU type and count")
    p.add_argument("app", choices=sorted(APPLICATIONS), help="application")
    p.add_argument("--gpus", type=int_list(1), default=[1, 2, 4, 8, 16], help="comma-separated GPU counts (>= 1)")
    p.add_argument("--progress", type=fraction, default=0.0, help="fraction of training done, in [0, 1]")
    p.add_argument("--cluster", type=nonempty("a preset name or a path"), default="sia-64",
                   help="preset or cluster JSON giving GPUs per node (default sia-64)")
    p.add_argument("--json", action="store_true",
                   help="print the rows as one JSON document (goodput in M0-equivalent samples/s, step_time_s in s)")
    p.set_defaults(func=run)


def rows(app: str, gpus: list[int], progress: float, cluster: Cluster) -> list[dict]:
    """One row per (GPU type of ``cluster`` known to the model, GPU count)."""
    model = true_model(app)
    out = []
    for gpu_type in cluster.gpu_types:
        if gpu_type.name not in model.gpu_types:
            continue
        k = np.asarray(gpus, dtype=float)
        n = np.ceil(k / gpu_type.gpus_per_node)
        good, local, accum = model.optimize(gpu_type.name, n, k, progress)
        for i in range(len(k)):
            step = (float(model.step_time(gpu_type.name, n[i], k[i], local[i], accum[i]))
                    if good[i] > 0 else float("nan"))
            out.append({
                "gpu_type": gpu_type.name, "num_gpus": int(k[i]), "num_nodes": int(n[i]),
                "goodput": float(good[i]), "local_bsz": int(local[i]),
                "accum_steps": int(accum[i]), "batch_size": int(k[i] * local[i] * (accum[i] + 1)),
                "step_time_s": step,
            })
    return out


def run(args: argparse.Namespace) -> int:
    from heteroplan.errors import InputError
    from heteroplan.perf.applications import APPLICATIONS

    gpus = args.gpus
    limit = int(APPLICATIONS[args.app].max_batch_size)  # every GPU needs at least one sample per step
    if max(gpus) > limit:
        raise InputError("--gpus", max(gpus), f"{args.app} takes at most {limit} samples per step, so at most "
                         f"{limit} GPUs (one sample each)")
    cluster = preset(args.cluster) if args.cluster in PRESETS else Cluster.from_json(args.cluster)
    table = rows(args.app, gpus, args.progress, cluster)
    if args.json:
        print_json(table)
        return 0
    print(f"{args.app} at progress {args.progress:.2f} (goodput in M0-equivalent samples/s)")
    print(f"{'type':8s} {'GPUs':>4s} {'nodes':>5s} {'goodput':>12s} {'batch':>6s} "
          f"{'local':>6s} {'accum':>5s} {'step s':>8s}")
    for r in table:
        print(f"{printable(r['gpu_type']):8s} {r['num_gpus']:4d} {r['num_nodes']:5d} {r['goodput']:12.1f} "
              f"{r['batch_size']:6d} {r['local_bsz']:6d} {r['accum_steps']:5d} "
              f"{r['step_time_s']:8.4f}")
    return 0
