"""Accuracy and speed of the Pollux/Sia goodput model on the Sia traces.

Accuracy (per application and GPU type, median relative error of the step time):
* in-sample: fit on all placements, predict them;
* hold-out: fit on the 1-GPU rows plus 70% of the multi-GPU configurations, predict the other
  30% (whole configurations held out, seed 0, and the median over seeds 0-4);
* projection: the type's own 1-GPU profile plus another type's full fit (Sia bootstrapping),
  sync scaled by the 1-GPU step-time ratio (and unscaled), predicting every multi-GPU row;
* learning curve: a BootstrappedModel knowing the other types fully observes 1, 2, 4, 8
  configurations of the type (one random local batch each).

Speed: goodput of 1000 jobs x 50 configurations (cold grid and cached grid), a full fit, and
a warm-started refit after one new observation.

    python benchmarks/goodput_fit.py [--traces DIR] [--repeats 5]

Prints markdown tables and writes ``benchmarks/results/goodput_fit.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from heteroplan.perf.applications import APPLICATIONS, SIA_TYPE_NAMES, get_app
from heteroplan.perf.evaluate import (
    holdout_split,
    learning_curve,
    projection_params,
    relative_errors,
)
from heteroplan.perf.fit import fit_throughput_params
from heteroplan.perf.sia_data import bootstrap_model, load_app_measurements, true_model

ROOT = Path(__file__).resolve().parent.parent
LEARN_STEPS = (1, 2, 4, 8)


def accuracy(traces: Path, seeds: int) -> list[dict]:
    rows = []
    for app in APPLICATIONS:
        data = {t: load_app_measurements(traces, app, t, scalability=False) for t in SIA_TYPE_NAMES}
        full = {t: fit_throughput_params(m) for t, m in data.items()}
        for gpu_type, meas in data.items():
            holdout = []
            for seed in range(seeds):
                train, test = holdout_split(meas, 0.3, seed)
                p = fit_throughput_params(meas.select(train))
                holdout.append(float(np.median(relative_errors(p, meas.select(test)))))
            multi = meas.select(meas.num_gpus > 1)
            proj = {}
            for ref in SIA_TYPE_NAMES:
                if ref == gpu_type:
                    continue
                for scaled in (True, False):
                    pp = projection_params(meas, full[ref], scale_sync=scaled)
                    key = f"{ref}{'' if scaled else ' unscaled'}"
                    proj[key] = float(np.median(relative_errors(pp, multi)))
            rows.append({
                "app": app, "gpu_type": gpu_type, "rows": len(meas),
                "in_sample": float(np.median(relative_errors(full[gpu_type], meas))),
                "holdout_seed0": holdout[0],
                "holdout_median": float(np.median(holdout)),
                "holdout_max": float(np.max(holdout)),
                "projection": proj,
            })
    return rows


def learning(traces: Path) -> list[dict]:
    rows = []
    for app in APPLICATIONS:
        data = {t: load_app_measurements(traces, app, t, scalability=False) for t in SIA_TYPE_NAMES}
        for target in SIA_TYPE_NAMES:
            errs = learning_curve(get_app(app), data, target, LEARN_STEPS)
            rows.append({"app": app, "gpu_type": target, "errors": errs})
    return rows


def _median_time(fn, repeats: int, cpu: list | None = None) -> float:
    """Median wall time of ``fn`` (s); its median CPU time is appended to ``cpu`` if given.

    CPU time (``time.process_time``) excludes time spent waiting for a core, so it is the
    steadier number on a shared machine.
    """
    times, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    if cpu is not None:
        cpu.append(float(np.median(cpus)))
    return float(np.median(times))


def speed(traces: Path, repeats: int) -> dict:
    apps = list(APPLICATIONS)
    per_node = {"aws": 4, "rtx": 8, "dgx-ext": 8}
    types = np.array(["aws"] * 17 + ["rtx"] * 17 + ["dgx-ext"] * 16)
    gpus = np.concatenate([np.arange(1, 18), np.arange(1, 18), np.arange(1, 17)]).astype(float)
    nodes = np.ceil(gpus / np.array([per_node[t] for t in types]))

    def cold() -> None:
        for i in range(1000):
            models[i].set_params("aws", models[i].params["aws"])  # drops the cached grid
            models[i].goodput(types, nodes, gpus, 0.1)

    def warm() -> None:
        for m in models:
            m.goodput(types, nodes, gpus, 0.5)

    models = [true_model(apps[i % len(apps)]) for i in range(1000)]
    cpu: list[float] = []
    t_cold = _median_time(cold, repeats, cpu)
    t_warm = _median_time(warm, repeats, cpu)

    fit_times, refit_times = [], []
    for app in apps:
        for gpu_type in SIA_TYPE_NAMES:
            meas = load_app_measurements(traces, app, gpu_type, scalability=False)
            fit_times.append(_median_time(lambda meas=meas: fit_throughput_params(meas), 3))
        model = bootstrap_model(app)
        meas = load_app_measurements(traces, app, "aws", scalability=False)
        multi = np.nonzero(meas.num_gpus > 1)[0]
        order = np.random.default_rng(0).permutation(multi)[:60]
        for i in order:
            model.observe_many("aws", meas.select(np.array([i])))
            t0 = time.perf_counter()
            model.goodput("aws", 1, 1)  # triggers the lazy refit
            refit_times.append(time.perf_counter() - t0)
    return {
        "goodput_1000x50_cold_s": t_cold,
        "goodput_1000x50_cached_s": t_warm,
        "goodput_1000x50_cold_cpu_s": cpu[0],
        "goodput_1000x50_cached_cpu_s": cpu[1],
        "fit_all_placements_median_s": float(np.median(fit_times)),
        "fit_all_placements_max_s": float(np.max(fit_times)),
        "refit_after_one_observation_median_s": float(np.median(refit_times)),
        "refit_after_one_observation_p90_s": float(np.quantile(refit_times, 0.9)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(ROOT / "tests" / "data" / "sia"),
                        help="Sia traces directory (default: the test fixtures)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    traces = Path(args.traces)

    acc = accuracy(traces, args.seeds)
    print("| app | type | rows | in-sample | hold-out (seed 0) | hold-out (median/max of "
          f"{args.seeds} seeds) | projected from (scaled / unscaled sync) |")
    print("|---|---|---|---|---|---|---|")
    for r in acc:
        refs = [t for t in SIA_TYPE_NAMES if t != r["gpu_type"]]
        proj = ", ".join(
            f"{t}: {r['projection'][t]:.1%} / {r['projection'][t + ' unscaled']:.1%}" for t in refs)
        print(f"| {r['app']} | {r['gpu_type']} | {r['rows']} | {r['in_sample']:.1%} | "
              f"{r['holdout_seed0']:.1%} | {r['holdout_median']:.1%} / {r['holdout_max']:.1%} | "
              f"{proj} |")

    learn = learning(traces)
    print()
    print("| app | type | projected | " + " | ".join(f"{n} config(s)" for n in LEARN_STEPS) + " |")
    print("|---|---|" + "---|" * (1 + len(LEARN_STEPS)))
    for r in learn:
        print(f"| {r['app']} | {r['gpu_type']} | " + " | ".join(f"{e:.1%}" for e in r["errors"])
              + " |")
    errs = np.array([r["errors"] for r in learn])
    print("| **median** | | " + " | ".join(f"**{e:.1%}**" for e in np.median(errs, axis=0)) + " |")

    spd = speed(traces, args.repeats)
    print()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| measurement | time |")
    print("|---|---|")
    for key, value in spd.items():
        print(f"| {key} | {value * 1e3:.1f} ms |")

    out = ROOT / "benchmarks" / "results" / "goodput_fit.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": platform.platform(), "python": platform.python_version(),
        "load_average": list(os.getloadavg()), "cpus": os.cpu_count(),
        "traces": str(traces), "accuracy": acc, "learning_curve": learn, "speed": spd,
    }, indent=1) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
