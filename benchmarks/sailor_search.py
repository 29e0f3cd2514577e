"""Sailor planner search: time and plan found on the paper's scenarios, and baselines.

Global batch: each model's in Sailor's training configs (OPT-350 1024, GPT-Neo-2.7 2048).
Scenarios: OPT-350 / GPT-Neo-2.7 on 128 A100 in one zone; on 5 zones x 256 A100;
GPT-Neo-2.7 on A100+V100 32-96, 80-240, 128-384 (one zone); the two published constrained
plans (min $/iteration with >= 0.2 iter/s, max throughput with <= 1.2 $/iteration) on the
sailor-gcp pool (5 x 256 A100 + 256 V100) and on the pool of Sailor's constrained experiments
(2 zones x (128 A100 + 128 V100)); the min-cost case once more at GBS 2048 for comparison.
Search time is the median of ``--repeats`` runs.

    python benchmarks/sailor_search.py [--repeats 3] [--no-baselines]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from _common import median_time, print_table, write_json  # noqa: E402

from heteroplan.cluster import SAILOR_ZONES, preset  # noqa: E402
from heteroplan.errors import InfeasibleError  # noqa: E402
from heteroplan.planner import SearchOptions, plan_job  # noqa: E402
from heteroplan.planner.baselines import homogeneous_plan, uniform_split_plan  # noqa: E402

A, V, Z = "A100-40", "V100-16", "us-central1-a"
FIVE_ZONES = {(A, z): 256 for z in SAILOR_ZONES}
GCP = preset("sailor-gcp")
# Sailor's artifact, configs/gpu_trace_2zones_2gpus.csv: the pool of its cost/budget experiments
TWO_ZONES = {(t, z): 128 for t in (A, V) for z in ("us-central1-a", "us-central1-b")}
# Sailor's artifact, configs/training_config_*.json: global batch per model
GBS = {"OPT-350": 1024, "GPT-Neo-2.7": 2048}

SCENARIOS = [
    # name, model, pool, kwargs, published search time (s) or None, baselines?  (kwargs may set "gbs")
    ("OPT-350 128xA100", "OPT-350", {(A, Z): 128}, {}, None, False),
    ("GPT-Neo-2.7 128xA100", "GPT-Neo-2.7", {(A, Z): 128}, {}, None, False),
    ("OPT-350 5 zones x 256 A100", "OPT-350", FIVE_ZONES, {}, 1.5, False),
    ("GPT-Neo-2.7 5 zones x 256 A100", "GPT-Neo-2.7", FIVE_ZONES, {}, 1.5, False),
    ("GPT-Neo-2.7 A100+V100 32-96", "GPT-Neo-2.7", {(A, Z): 32, (V, Z): 96}, {}, 1.6, True),
    ("GPT-Neo-2.7 A100+V100 80-240", "GPT-Neo-2.7", {(A, Z): 80, (V, Z): 240}, {}, 7.7, True),
    ("GPT-Neo-2.7 A100+V100 128-384", "GPT-Neo-2.7", {(A, Z): 128, (V, Z): 384}, {}, 17.4, True),
    ("OPT-350 min cost, >= 0.2 iter/s", "OPT-350", GCP, {"objective": "cost", "min_throughput": 0.2}, None, False),
    ("OPT-350 max thr, <= 1.2 $/iter", "OPT-350", GCP, {"budget": 1.2}, None, False),
    ("OPT-350 min cost, >= 0.2 iter/s, 2 zones", "OPT-350", TWO_ZONES, {"objective": "cost", "min_throughput": 0.2}, None, False),
    ("OPT-350 max thr, <= 1.2 $/iter, 2 zones", "OPT-350", TWO_ZONES, {"budget": 1.2}, None, False),
    ("OPT-350 min cost, >= 0.2 iter/s, GBS 2048", "OPT-350", GCP, {"objective": "cost", "min_throughput": 0.2, "gbs": 2048}, None, False),
    ("GPT-Neo-2.7 max thr, <= 1.2 $/iter", "GPT-Neo-2.7", GCP, {"budget": 1.2}, None, False),
    ("GPT-Neo-2.7 min cost, >= 0.1 iter/s", "GPT-Neo-2.7", GCP, {"objective": "cost", "min_throughput": 0.1}, None, False),
]


def shape(res) -> str:
    parts = []
    for s in res.plan.stages:
        g = s.replicas[0]
        parts.append(f"{g.gpu_type}@{g.zone[-4:]} L{s.first_layer}-{s.last_layer - 1} TP{g.tp}")
    zones = len({z for _, z in res.plan.gpus_by_type_zone()})
    return f"PP{res.plan.pp} x DP{res.plan.dp}, mbs {res.plan.microbatch_size}, {res.plan.num_gpus} GPUs, {zones} zone(s): " + "; ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-baselines", action="store_true")
    args = ap.parse_args()
    rows = []
    for name, model, pool, kw, published, baselines in SCENARIOS:
        kw = dict(kw)
        gbs = kw.pop("gbs", GBS[model])
        row = {"scenario": name, "gbs": gbs}
        for label, opts in (("", SearchOptions()), ("milp_", SearchOptions(narrow_with_milp=True))):
            try:
                t, res = median_time(lambda opts=opts, model=model, pool=pool, kw=kw, gbs=gbs: plan_job(model, gbs, pool, options=opts, **kw), args.repeats)
            except InfeasibleError as exc:
                row[f"{label}result"] = str(exc)
                continue
            row |= {
                f"{label}search_s": t,
                f"{label}iter_s": res.throughput,
                f"{label}usd_iter": res.cost_per_iteration,
            }
            if not label:
                row |= {"mem_GB": res.peak_memory_gb, "plan": shape(res), "layouts": res.evaluated}
        if published is not None:
            row["published_s"] = published
        if baselines and not args.no_baselines:
            for bl, fn in (("homog", homogeneous_plan), ("uniform", uniform_split_plan)):
                t, res = median_time(lambda fn=fn, model=model, pool=pool, kw=kw, gbs=gbs: fn(model, gbs, pool, **kw), 1)
                row |= {f"{bl}_iter_s": res.throughput, f"{bl}_search_s": t, f"{bl}_plan": shape(res)}
        rows.append(row)
        print(f"{name}: {row.get('search_s', float('nan')):.3g} s  {row.get('iter_s', float('nan')):.4g} iter/s  "
              f"${row.get('usd_iter', float('nan')):.4g}/iter  {row.get('plan', row.get('result'))}", flush=True)
    print()
    print_table(rows, ["scenario", "gbs", "search_s", "published_s", "milp_search_s", "iter_s", "milp_iter_s", "usd_iter", "mem_GB", "layouts"])
    if not args.no_baselines:
        print()
        print_table([r for r in rows if "homog_iter_s" in r], ["scenario", "iter_s", "homog_iter_s", "uniform_iter_s", "uniform_search_s"])
    write_json("sailor_search", rows)


if __name__ == "__main__":
    main()
