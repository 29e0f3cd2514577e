"""Build and solve time of a Sia-shaped assignment problem through four front-ends.

J jobs x C configurations (binary x[j, c]), at most one configuration per job, one
capacity row per GPU type. Front-ends: heteroplan's Model (+ hand-off to HiGHS), raw
highspy ``passModel`` on hand-built arrays, pulp, cvxpy. Prints a table and writes
``benchmarks/results/model_build.json``.

Usage: ``python benchmarks/model_build.py [--full]`` (``--full`` also builds 5000x100 with pulp, ~2 min).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import highspy
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median_time, paired_times, print_table, write_json  # noqa: E402

from heteroplan.milp import Model  # noqa: E402
from heteroplan.solvers import solve, to_cvxpy, to_pulp  # noqa: E402
from heteroplan.solvers.highs import build_highs  # noqa: E402

TYPES = 3


def instance(J: int, C: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    cfg_type = np.arange(C) % TYPES
    cfg_gpus = 2 ** (np.arange(C) // TYPES % 4)
    value = rng.random((J, C)) * cfg_gpus**0.8
    capacity = np.full(TYPES, J * 1.5 / TYPES)
    return value, cfg_type, cfg_gpus, capacity


def build_model(value, cfg_type, cfg_gpus, capacity) -> Model:
    J, C = value.shape
    m = Model("sia-shaped")
    x = m.binary("x", (J, C))
    m.add_constraints(x.sum(axis=1) <= 1, "one_config")
    gpus = (np.arange(TYPES)[:, None] == cfg_type[None, :]) * cfg_gpus
    m.add_constraints(gpus @ x.sum(axis=0) <= capacity, "capacity")
    m.maximize((x * value).sum())
    return m


def model_and_handoff(value, cfg_type, cfg_gpus, capacity) -> highspy.Highs:
    return build_highs(build_model(value, cfg_type, cfg_gpus, capacity).to_standard_form())


def raw_passmodel(value, cfg_type, cfg_gpus, capacity) -> highspy.Highs:
    J, C = value.shape
    n = J * C
    col = np.arange(n)
    # Column (j, c): row j (one config) with 1, row J + type(c) with gpus(c).
    start = (2 * np.arange(n + 1)).astype(np.int32)
    index = np.empty(2 * n, dtype=np.int32)
    index[0::2] = col // C
    index[1::2] = J + cfg_type[col % C]
    data = np.empty(2 * n)
    data[0::2] = 1.0
    data[1::2] = cfg_gpus[col % C]
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.passModel(
        n, J + TYPES, 2 * n, int(highspy.MatrixFormat.kColwise), int(highspy.ObjSense.kMaximize), 0.0,
        value.ravel().astype(float), np.zeros(n), np.ones(n),
        np.full(J + TYPES, -np.inf), np.concatenate([np.ones(J), capacity]).astype(float),
        start, index, data, np.ones(n, dtype=np.int32),
    )
    return h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="also run pulp at 5000x100 (slow)")
    parser.add_argument("--repeats", type=int, default=15, help="paired Model/raw runs per size")
    args = parser.parse_args()
    rows = []
    for J, C in ((1000, 50), (5000, 100)):
        inst = instance(J, C)
        t_model, t_raw, ratio = paired_times(
            lambda inst=inst: model_and_handoff(*inst), lambda inst=inst: raw_passmodel(*inst), args.repeats
        )
        t_cvx, _ = median_time(lambda inst=inst: to_cvxpy(build_model(*inst))[0].get_problem_data("HIGHS"), 1)
        if J <= 1000 or args.full:
            t_pulp, _ = median_time(lambda inst=inst: to_pulp(build_model(*inst)), 1)
        else:
            t_pulp = float("nan")
        model = build_model(*inst)
        t0 = time.perf_counter()
        lp = solve(model, relax=True, time_limit=60, algorithm="ipm")  # simplex: > 100 s at 5000x100
        t_lp = time.perf_counter() - t0
        mip = solve(model, mip_gap=1e-2, time_limit=60)
        rows.append(
            {
                "size": f"{J}x{C}",
                "binaries": J * C,
                "model+handoff_s": t_model,
                "raw_passModel_s": t_raw,
                "ratio_vs_raw": ratio,
                "cvxpy_s": t_cvx,
                "pulp_s": t_pulp,
                "speedup_vs_pulp": t_pulp / t_model,
                "lp_solve_s": lp.solve_time,
                "mip_solve_s(gap1%)": mip.solve_time,
                "mip_status": mip.status.value,
                "mip_gap_to_lp": (lp.objective - mip.objective) / lp.objective,
                "_lp_total_s": t_lp,
            }
        )
    cols = ["size", "binaries", "model+handoff_s", "raw_passModel_s", "ratio_vs_raw", "cvxpy_s", "pulp_s",
            "speedup_vs_pulp", "lp_solve_s", "mip_solve_s(gap1%)", "mip_gap_to_lp"]
    print_table(rows, cols)
    print("\nTargets: ratio_vs_raw <= 1.2 (median of paired runs), speedup_vs_pulp >= 50.")
    print("wrote", write_json("model_build", rows))


if __name__ == "__main__":
    main()
