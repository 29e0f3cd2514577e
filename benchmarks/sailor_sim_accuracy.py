"""Simulator accuracy on real runs of two platforms, leaving one platform (and one run) out.

Sets (Sailor's artifact, ``tests/data/sailor/``): 15 OPT-350 runs on GH200 nodes (clariden,
``plan_config_*.json``), 4 OPT-350 runs on the MIT cluster of RTX-3090 / RTX-2080 / Titan-RTX
nodes (``mit/``); GPT-Neo-2.7 on GH200 when runs are there (``gpt-neo/``; none are public yet).
For each set, the mean absolute relative error of iteration time and peak memory with the
platform constants

- ``uncalibrated``: :data:`UNCALIBRATED_CONFIG` (no fitted constant),
- ``shipped table``: ``platforms.json`` as shipped, i.e. what a user gets (for runs added to
  ``--data`` since the table was written, a prediction on data it never saw),
- ``other platform``: fitted on the other platform's runs only (but for :data:`STACK_MEMORY`),
- ``this platform``: fitted on all runs of the set (in sample),
- ``leave one run out``: fitted on the set without the run, then the run predicted,

beside Sailor's own simulator on the same files. A run file that cannot be read, has no measured
time or memory, or names a GPU type, microbatch or TP the shipped profiles lack is left out and
named; a platform with fewer runs than constants is predicted with the shipped table only. The
constants fitted on all runs of each platform are written to
``heteroplan/data/sailor/platforms.json`` with ``--write`` (the shipped table). Fitted per platform: ``compute_scale`` on time, ``overhead_gb`` on memory (:data:`TIME`,
:data:`MEMORY`). ``working_layers`` (backward's transient buffers) is a property of the software
stack, which both platforms share: it is fitted with the overhead on the platform with the most
runs (:data:`STACK_HOME`) and used as is by the other (:data:`STACK_MEMORY`). The stack's other
properties (:data:`RUNTIME`) are not fitted.

    python benchmarks/sailor_sim_accuracy.py [--write] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from _common import print_table, write_json  # noqa: E402

from heteroplan.atomic_json import write_json_atomic  # noqa: E402
from heteroplan.errors import InputError  # noqa: E402
from heteroplan.perf.sailor_profiles import DATA_DIR as SHIPPED  # noqa: E402
from heteroplan.planner import Plan, simulate_plan  # noqa: E402
from heteroplan.planner.model.calibration import fit_sim_config  # noqa: E402
from heteroplan.planner.model.sim_config import PLATFORMS_FILE, UNCALIBRATED_CONFIG, SimConfig  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "sailor"
# name: (globs under the data directory, model, GPU types of the platform, Sailor's time / memory
# MAE %). The globs take this repository's layout (tests/data/sailor: GH200 runs at the top,
# mit/, gpt-neo/) and Sailor's (validation/: clariden/OPT-350/N*/, clariden/GPT-NEO/N*/, mit/N*/),
# so `--data` can point at either; a run found by two globs counts once.
SETS = {
    "GH200 OPT-350": (("plan_config_*.json", "clariden/OPT-350/**/plan_config_*.json"), "OPT-350", ("GH-96",),
                      "8.9 / 5.9 (hand-tuned profile), 16.0 time (raw)"),
    "GH200 GPT-Neo-2.7": (("gpt-neo/**/plan_config_*.json", "clariden/[Gg][Pp][Tt]-[Nn][Ee][Oo]*/**/plan_config_*.json"),
                          "GPT-Neo-2.7", ("GH-96",), "18.5 / 16.5"),
    "MIT OPT-350": (("mit/**/plan_config_*.json",), "OPT-350", ("RTX-2080", "RTX-3090", "Titan-RTX"), "10.3 / 76.0"),
}
PLATFORM_OF = {"GH200 OPT-350": "GH200", "GH200 GPT-Neo-2.7": "GH200", "MIT OPT-350": "MIT"}
# One time constant: with the transfers' physics in place a per-microbatch term only bent to the
# runs (leave-one-run-out 7.0% GH200 / 6.9% MIT with it, 5.9% / 6.1% without; on MIT it ran to
# the end of its range).
TIME = ("compute_scale",)
MEMORY = ("overhead_gb",)
# Both platforms ran one software stack (Sailor's DeepSpeed fork, fp32, the same model code), so
# the backward's transient buffers take the same share of a layer's activations on both. Fitted on
# the 15 GH200 runs; on MIT's 4 (one out of reach) it could only stop at an end of its range (0
# with the unreachable N2_D1 in the fit, 8 without it).
STACK_MEMORY = ("working_layers",)
STACK_HOME = "GH200"
# Properties of the software stack, not fitted: both platforms ran Sailor's DeepSpeed engine over
# NCCL, whose pre-posted buffers (NCCL_BUFFSIZE, 4 MiB by default) take a send without its receiver,
# and whose optimizer ("AdamW" in its ds_config) is DeepSpeed's FusedAdam on fp32 weights: one
# memory-bound pass reading weight, gradient and two moments and writing three (28 bytes/parameter).
STACK = {"eager_send_bytes": 4 * 2**20, "update_bytes_per_param": 28.0}
RUNTIME = {"GH200": STACK, "MIT": STACK}


def load_runs(data_dir: Path, patterns: tuple[str, ...], model: str) -> tuple[list[tuple[str, Plan, dict]], list[str]]:
    """``(run name, plan, measured)`` of every run file under ``data_dir`` matching ``patterns``, and
    one line per file left out: unreadable, no measured time or memory, or a plan the shipped
    profiles cannot simulate (GPU type, microbatch or TP without a profile row)."""
    paths = sorted({p.resolve() for pattern in patterns for p in data_dir.glob(pattern)}, key=lambda p: p.stem)
    out, skipped = [], []
    for p in paths:
        try:
            data = json.loads(p.read_text())
            plan = Plan.from_sailor(data, model)
            for key in ("real", "max_mem"):
                if not isinstance(data.get(key), int | float) or data[key] <= 0:
                    raise InputError(key, data.get(key), "a measured run needs a positive number here")
            simulate_plan(plan, config=UNCALIBRATED_CONFIG)
        except (OSError, ValueError) as exc:  # InputError and json's errors are ValueErrors
            skipped.append(f"{p}: {exc}")
            continue
        out.append((p.stem.removeprefix("plan_config_"), plan, data))
    return out, skipped


def errors(runs, cfg: SimConfig | None) -> np.ndarray:
    """(runs, 2) relative errors of time and memory; ``cfg`` None: the shipped table."""
    out = []
    for _, plan, real in runs:
        sim = simulate_plan(plan, config=cfg)
        out.append((sim.iteration_time_s / real["real"] - 1, sim.peak_memory_gb / (real["max_mem"] / 1e9) - 1))
    return np.array(out).reshape(-1, 2)


def fit(runs, platform: str, stack: SimConfig | None = None) -> tuple[SimConfig, tuple[str, ...], tuple[str, ...]]:
    """Constants of ``platform`` fitted on ``runs`` (over its :data:`RUNTIME` properties): time,
    then memory; those that stopped at a bound; and the runs no constants in their plausible
    ranges reach (one note per run and quantity). ``stack``: the :data:`STACK_HOME` platform's
    constants, whose :data:`STACK_MEMORY` are taken as they are (None: fit them here too)."""
    plans = {f"{plan.model} {name}": plan for name, plan, _ in runs}  # names repeat across models
    shared = {} if stack is None else {c: getattr(stack, c) for c in STACK_MEMORY}
    base = replace(UNCALIBRATED_CONFIG, **RUNTIME[platform], **shared)
    timed = fit_sim_config(plans, [real["real"] for _, _, real in runs], constants=TIME, base=base)
    memory = fit_sim_config(plans, [real["max_mem"] / 1e9 for _, _, real in runs],
                            constants=MEMORY + (() if shared else STACK_MEMORY), quantity="peak_memory_gb",
                            base=timed.config)
    return memory.config, timed.at_bound + memory.at_bound, tuple(timed.reach_notes() + memory.reach_notes())


def enough_to_fit(n_runs: int, platform: str, stack: SimConfig | None) -> bool:
    """Whether ``n_runs`` runs can fit ``platform``'s constants: each fit needs as many runs as it
    fits constants (:data:`STACK_MEMORY` come from ``stack`` when given, off the home platform)."""
    shared = stack is not None and platform != STACK_HOME
    return n_runs >= max(len(TIME), len(MEMORY) + (0 if shared else len(STACK_MEMORY)))


def mae(err: np.ndarray) -> tuple[float, float]:
    return tuple(float(v) for v in 100 * np.abs(err).mean(axis=0)) if len(err) else (float("nan"),) * 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true", help=f"write the fitted constants to the shipped {PLATFORMS_FILE}")
    ap.add_argument("--data", type=Path, default=DATA,
                    help="directory of measured runs: this repository's tests/data/sailor (default) or Sailor's "
                         "validation/ layout (clariden/OPT-350/N*/, clariden/GPT-NEO/N*/, mit/N*/)")
    args = ap.parse_args()
    if not args.data.is_dir():
        ap.error(f"--data: {args.data} is not a directory")
    if args.write and args.data.resolve() != DATA.resolve():
        ap.error("--write fits the shipped table on this repository's runs only (copy new runs into tests/data/sailor)")
    sets, skipped = {}, []
    for name, (globs, model, _, _) in SETS.items():
        sets[name], left_out = load_runs(args.data, globs, model)
        skipped += left_out
    for line in skipped:
        print(f"left out: {line}")
    by_platform: dict[str, list] = {}
    for name, runs in sets.items():
        by_platform.setdefault(PLATFORM_OF[name], []).extend(runs)
    home_runs = by_platform.get(STACK_HOME, [])
    fitted = {STACK_HOME: fit(home_runs, STACK_HOME)} if enough_to_fit(len(home_runs), STACK_HOME, None) else {}
    stack = fitted[STACK_HOME][0] if fitted else None
    fitted |= {p: fit(runs, p, stack) for p, runs in by_platform.items()
               if p != STACK_HOME and enough_to_fit(len(runs), p, stack)}

    def own_fit(some_runs, platform: str) -> SimConfig:
        """``platform``'s constants fitted on ``some_runs`` (the stack's from the home fit elsewhere)."""
        return fit(some_runs, platform, None if platform == STACK_HOME else stack)[0]

    summary, per_run = [], []
    for name, runs in sets.items():
        if not runs:
            summary.append({"set": name, "runs": 0, "constants": f"no runs in {args.data}", "Sailor % (time / mem)": SETS[name][3]})
            continue
        own = PLATFORM_OF[name]
        others = [p for p in fitted if p != own]
        platform_runs = by_platform[own]  # this set's runs and the platform's other models'
        other_models = [r for r in platform_runs if all(r is not x for x in runs)]
        own_stack = None if own == STACK_HOME else stack
        # leave one run out: fitted on every other run of the platform (other models' included)
        loo = np.array([errors([run], own_fit([r for r in platform_runs if r is not run], own))[0] for run in runs]) \
            if enough_to_fit(len(platform_runs) - 1, own, own_stack) else np.empty((0, 2))
        in_sample = {"this platform (in sample)": errors(runs, fitted[own][0])} if own in fitted \
            else {f"too few runs of {own} to fit ({len(platform_runs)})": np.empty((0, 2))}
        rows = {
            "uncalibrated": errors(runs, UNCALIBRATED_CONFIG),
            "shipped table (platforms.json)": errors(runs, None),
            **{f"other platform ({p})": errors(runs, fitted[p][0]) for p in others},
            **({f"this platform, other models only ({own})": errors(runs, own_fit(other_models, own))}
               if enough_to_fit(len(other_models), own, own_stack) else {}),
            **in_sample,
            "leave one run out": loo,
        }
        for label, err in rows.items():
            t, m = mae(err)
            summary.append({"set": name, "runs": len(runs), "constants": label, "time MAE %": t, "memory MAE %": m,
                            "Sailor % (time / mem)": SETS[name][3] if label == "leave one run out" else ""})
        cfg = fitted[own][0] if own in fitted else None  # the shipped table when this platform can't be fitted
        for (run, plan, real), lo in zip(runs, loo if len(loo) else [(np.nan,) * 2] * len(runs), strict=True):
            sim = simulate_plan(plan, config=cfg)
            per_run.append({
                "set": name, "run": run, "PPxDPxTP": f"{plan.pp}x{plan.dp}x{plan.stages[0].replicas[0].tp}",
                "mbs": plan.microbatch_size, "gbs": plan.global_batch_size,
                "time_real_s": real["real"], "time_pred_s": sim.iteration_time_s,
                "time_err_%": 100 * (sim.iteration_time_s / real["real"] - 1), "time_loo_err_%": 100 * lo[0],
                "mem_real_GB": real["max_mem"] / 1e9, "mem_pred_GB": sim.peak_memory_gb,
                "mem_err_%": 100 * (sim.peak_memory_gb / (real["max_mem"] / 1e9) - 1), "mem_loo_err_%": 100 * lo[1],
            })
    if per_run:
        print_table(per_run, list(per_run[0]))
        print()
    print_table(summary, ["set", "runs", "constants", "time MAE %", "memory MAE %", "Sailor % (time / mem)"])
    print()
    constants = {}
    for platform, (cfg, at_bound, out_of_reach) in fitted.items():
        values = {c: getattr(cfg, c) for c in TIME + MEMORY + STACK_MEMORY + tuple(RUNTIME[platform])}
        constants[platform] = {"constants": values, "at_bound": list(at_bound), "out_of_reach": list(out_of_reach)}
        print(f"{platform}: " + ", ".join(f"{c} = {v:.4g}" for c, v in values.items())
              + (f"  (at the end of the plausible range: {', '.join(at_bound)})" if at_bound else ""))
        for note in out_of_reach:
            print(f"  out of reach of every constant in its plausible range: {note}")
    write_json("sailor_sim_accuracy", {"runs": per_run, "summary": summary, "constants": constants, "left_out": skipped})
    if args.write:
        rows, notes = {}, {}
        for name, (_, _, types, _) in SETS.items():
            platform = PLATFORM_OF[name]
            if platform not in fitted:
                continue
            for t in types:
                rows[t] = {c: getattr(fitted[platform][0], c)
                           for c in TIME + MEMORY + STACK_MEMORY + tuple(RUNTIME[platform])}
                notes[t] = (f"{platform}: {len(by_platform[platform])} real runs of Sailor's artifact"
                            + ("" if platform == STACK_HOME else f"; {', '.join(STACK_MEMORY)} from {STACK_HOME} "
                               "(same software stack)") + " (benchmarks/sailor_sim_accuracy.py --write)")
        write_json_atomic(SHIPPED / PLATFORMS_FILE, {"platforms": rows, "fitted_on": notes})
        print(f"wrote {SHIPPED / PLATFORMS_FILE}")


if __name__ == "__main__":
    main()
