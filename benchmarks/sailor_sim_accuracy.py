"""Simulator accuracy: predicted vs measured iteration time and peak memory on Sailor's real runs.

Runs: 15 OPT-350 plans on GH200 nodes (clariden), from Sailor's artifact
(``tests/data/sailor/plan_config_*.json``). Also reports leave-one-out errors: the five
calibration constants of :data:`heteroplan.planner.simulator.DEFAULT_CONFIG` refitted without
each run, then that run predicted.

    python benchmarks/sailor_sim_accuracy.py [--no-loo]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from _common import print_table, write_json  # noqa: E402

from heteroplan.planner import Plan, simulate  # noqa: E402
from heteroplan.planner.calibration import fit_sim_config  # noqa: E402
from heteroplan.planner.simulator import DEFAULT_CONFIG, SimConfig  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "sailor"


def load_runs() -> list[tuple[str, Plan, dict]]:
    return [(p.stem.removeprefix("plan_config_"), Plan.from_json(p), json.loads(p.read_text())) for p in sorted(DATA.glob("plan_config_*.json"))]


def errors(runs, cfg: SimConfig) -> np.ndarray:
    out = []
    for _, plan, real in runs:
        sim = simulate(plan, config=cfg)
        out.append((sim.iteration_time / real["real"] - 1, sim.peak_memory_gb / (real["max_mem"] / 1e9) - 1))
    return np.array(out)


def fit(runs) -> SimConfig:
    """Refit the calibration constants (same objective as the shipped ones): time, then memory."""
    plans = [plan for _, plan, _ in runs]
    timed = fit_sim_config(plans, [real["real"] for _, _, real in runs], constants=("compute_scale", "microbatch_overhead_s"),
                           base=DEFAULT_CONFIG)
    memory = fit_sim_config(plans, [real["max_mem"] / 1e9 for _, _, real in runs],
                            constants=("overhead_gb", "working_layers"), quantity="peak_memory_gb", base=timed.config)
    return memory.config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-out refits (slow)")
    args = ap.parse_args()
    runs = load_runs()
    rows = []
    for (name, plan, real), (et, em) in zip(runs, errors(runs, DEFAULT_CONFIG), strict=True):
        sim = simulate(plan)
        rows.append(
            {
                "run": name,
                "PPxDPxTP": f"{plan.pp}x{plan.dp}x{plan.stages[0].replicas[0].tp}",
                "mbs": plan.microbatch_size,
                "gbs": plan.global_batch_size,
                "time_real_s": real["real"],
                "time_pred_s": sim.iteration_time,
                "time_err_%": 100 * et,
                "mem_real_GB": real["max_mem"] / 1e9,
                "mem_pred_GB": sim.peak_memory_gb,
                "mem_err_%": 100 * em,
            }
        )
    print_table(rows, list(rows[0]))
    err = np.abs(errors(runs, DEFAULT_CONFIG))
    summary = {"mean_abs_time_err": float(err[:, 0].mean()), "mean_abs_mem_err": float(err[:, 1].mean())}
    raw = np.abs(errors(runs, SimConfig()))
    summary |= {"uncalibrated_time_err": float(raw[:, 0].mean()), "uncalibrated_mem_err": float(raw[:, 1].mean())}
    if not args.no_loo:
        loo = []
        for i in range(len(runs)):
            cfg = fit(runs[:i] + runs[i + 1 :])
            loo.append(np.abs(errors([runs[i]], cfg)[0]))
        loo = np.array(loo)
        summary |= {"loo_time_err": float(loo[:, 0].mean()), "loo_mem_err": float(loo[:, 1].mean())}
    print()
    for k, v in summary.items():
        print(f"{k:24s} {100 * v:6.2f} %")
    print("Sailor (published): time 4.5-6 %, memory 5.6 %")
    write_json("sailor_sim_accuracy", {"runs": rows, "summary": summary})


if __name__ == "__main__":
    main()
