"""``heteroplan demo``: the main demo on the data shipped in the package."""

from __future__ import annotations

import argparse
import time

import numpy as np

from heteroplan.cluster import preset
from heteroplan.formulations.model import Model
from heteroplan.solvers import solve


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the main demo on the bundled data")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cluster = preset("sia-64")
    print(cluster.summary())
    rng = np.random.default_rng(args.seed)
    types = cluster.type_names
    counts = np.array([1, 2, 4, 8])
    n_jobs = 40
    # Configs: (type, count); value: a toy concave speed-up per job and type.
    cfg_type = np.repeat(np.arange(len(types)), len(counts))
    cfg_gpus = np.tile(counts, len(types))
    speed = rng.uniform(0.5, 2.0, (n_jobs, len(types)))[:, cfg_type] * cfg_gpus**0.7
    t0 = time.perf_counter()
    m = Model("demo-allocation")
    x = m.binary("x", (n_jobs, len(cfg_type)))
    m.add_constraints(x.sum(axis=1) <= 1, "one_config_per_job")
    gpus = (np.arange(len(types))[:, None] == cfg_type[None, :]) * cfg_gpus
    m.add_constraints(gpus @ x.sum(axis=0) <= np.array([cluster.capacity()[t] for t in types]), "capacity")
    m.maximize((x * speed).sum())
    sol = solve(m, time_limit=10)
    print(f"\nAllocation of {n_jobs} jobs over {len(cfg_type)} configurations ({time.perf_counter() - t0:.3f} s)")
    print(sol.summary())
    used = gpus @ sol["x"].sum(axis=0)
    for t, u in zip(types, used, strict=True):
        print(f"  {t:<8} {int(u):>3} / {cluster.capacity()[t]} GPUs used")
    return 0
