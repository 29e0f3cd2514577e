"""Sailor planner search: time and plan found on the paper's scenarios, and baselines.

Global batch: each model's in Sailor's training configs (OPT-350 1024, GPT-Neo-2.7 2048).
Scenarios: OPT-350 / GPT-Neo-2.7 on 128 A100 in one zone; on 5 zones x 256 A100; OPT-350 on
A100+V100 8-8, 16-16, 32-96, 80-240, 128-384 in one zone (Sailor's heterogeneous comparison, issue 50);
GPT-Neo-2.7 on A100+V100 32-96, 80-240, 128-384 (one zone); the two published constrained
plans (min $/iteration with >= 0.2 iter/s, max throughput with <= 1.2 $/iteration) on the
sailor-gcp pool (5 x 256 A100 + 256 V100) and on the pool of Sailor's constrained experiments
(2 zones x (128 A100 + 128 V100)); the min-cost case once more at GBS 2048 for comparison.
Search time is the median of ``--repeats`` runs.

Reference plans: the plans Sailor publishes (docs/sailor.md, issue 19), scored under our
simulator at their best microbatch size (Sailor does not state it) with an even layer split:
ours must be at least as good (iter/s for throughput, $/iteration for cost) and never exceed a
zone's GPUs. ``sailor_cpp_s`` is Sailor's C++ planner's search time on the same pool (timed on
this machine, issue 19; its 5-8 s one-time precompute not counted).

``--scaling`` times the search alone over pools of growing GPUs, zones and GPU types: wall time
and the process's CPU time (on a shared machine the CPU seconds are what an idle core would take).

    python benchmarks/sailor_search.py [--repeats 3] [--no-baselines] [--scaling]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from _common import median_time, print_table, write_json  # noqa: E402

from heteroplan.cluster import SAILOR_ZONES, preset  # noqa: E402
from heteroplan.errors import InfeasibleError, InputError  # noqa: E402
from heteroplan.perf.sailor_profiles import load_model_profile  # noqa: E402
from heteroplan.planner import PlanRequest, SearchOptions, plan_job, simulate_plan  # noqa: E402
from heteroplan.planner.baselines import homogeneous_plan, uniform_split_plan  # noqa: E402
from heteroplan.planner.goal import Goal  # noqa: E402
from heteroplan.planner.model.simulator import gpu_catalog  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402

A, V, Z = "A100-40", "V100-16", "us-central1-a"
FIVE_ZONES = {(A, z): 256 for z in SAILOR_ZONES}
GCP = preset("sailor-gcp")
# Sailor's artifact, configs/gpu_trace_2zones_2gpus.csv: the pool of its cost/budget experiments
TWO_ZONES = {(t, z): 128 for t in (A, V) for z in ("us-central1-a", "us-central1-b")}
THREE_POOLS = {(A, "us-central1-a"): 32, (V, "us-central1-a"): 96, (A, "us-central1-b"): 32}
# the MIT cluster's three GPU types (the real runs' GBS 256; no prices: 0 $/h)
MIT = {(t, Z): 16 for t in ("RTX-3090", "Titan-RTX", "RTX-2080")}
# issue 50: the A100+V100 sizes of Sailor's heterogeneous comparison (one zone, 4 GPUs per node)
ISSUE50_SIZES = ((8, 8), (16, 16), (32, 96), (80, 240), (128, 384))
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
    # three (type, zone) blocks pay: 96 V100 and 32 A100 in one zone, 32 more A100 in another
    ("GPT-Neo-2.7 A100 32+32 (2 zones) + V100 96", "GPT-Neo-2.7", THREE_POOLS, {}, None, False),
    ("GPT-Neo-2.7 A100 32+32 (2 zones) + V100 96, 2 blocks", "GPT-Neo-2.7", THREE_POOLS, {"max_blocks": 2}, None, False),
    # platforms with buffered pipeline sends: the search splits those layouts on the 1F1B replay
    ("OPT-350 MIT 16 RTX-3090 + 16 Titan-RTX + 16 RTX-2080", "OPT-350", MIT, {"gbs": 256}, None, False),
    ("OPT-350 64 GH-96", "OPT-350", {("GH-96", Z): 64}, {}, None, False),
    # issue 50: Sailor's heterogeneous scenario, OPT-350 on A100+V100 in one zone (mixed-replica plans)
    *((f"OPT-350 A100+V100 {a}-{v}", "OPT-350", {(A, Z): a, (V, Z): v}, {}, None, False) for a, v in ISSUE50_SIZES),
]


# Sailor's published plans: (PP, [(type, zone, replicas), ...] per stage, TP)
SAILOR_PLANS = {
    "OPT-350 5 zones x 256 A100": (2, [(A, z, 32) for z in SAILOR_ZONES[:4]], 4),
    "OPT-350 max thr, <= 1.2 $/iter, 2 zones": (1, [(A, "us-central1-a", 32), (A, "us-central1-b", 32)], 4),
    "OPT-350 min cost, >= 0.2 iter/s": (1, [(A, Z, 16)], 4),
    "OPT-350 min cost, >= 0.2 iter/s, 2 zones": (1, [(A, Z, 16)], 4),
}
# Sailor's C++ planner, search alone, timed on this machine (issue 19)
SAILOR_CPP_S = {"OPT-350 128xA100": 0.044, "OPT-350 5 zones x 256 A100": 0.15}


# Sailor's C++ planner on the scaling pools it was timed on (issue 19): 1 zone x 128 A100 and
# 5 zones x 256-2048 A100 (0.15-0.24 s; the 512 and 1024 rows take the range's upper end)
SAILOR_CPP_SCALING = {"1 zone(s) x 128 A100": 0.044, "5 zone(s) x 256 A100": 0.15, "5 zone(s) x 512 A100": 0.24,
                      "5 zone(s) x 1024 A100": 0.24, "5 zone(s) x 2048 A100": 0.24}


def reference(name: str, model: str, gbs: int, kw: dict) -> dict:
    """Sailor's published plan for ``name`` under our simulator, at its best microbatch size."""
    pp, groups, tp = SAILOR_PLANS[name]
    profile, catalog = load_model_profile(model), gpu_catalog()
    L = profile.num_layers
    bounds = [round(i * L / pp) for i in range(pp + 1)]
    dp = sum(n for _, _, n in groups)
    best = None
    for mbs in profile.microbatch_sizes(A):
        if gbs % (mbs * dp):
            continue
        reps = tuple(ReplicaGroup(t, z, tp, n) for t, z, n in groups)
        plan = Plan(model, gbs, mbs, tuple(Stage(a, b, reps) for a, b in zip(bounds, bounds[1:], strict=False)))
        try:
            sim = simulate_plan(plan)
        except InputError:
            continue
        if max(sim.memory_per_stage_gb) > catalog[A].memory_gb:
            continue
        if kw.get("objective") == "cost":
            if sim.throughput_iter_s < kw.get("min_throughput", 0.0):
                continue
            key = sim.cost_per_iteration_usd
        else:
            if sim.cost_per_iteration_usd > kw.get("budget", float("inf")):
                continue
            key = sim.iteration_time_s
        if best is None or key < best[0]:
            best = (key, mbs, sim)
    if best is None:
        return {"ref_plan": "Sailor's plan does not fit / meet the constraint under our model"}
    _, mbs, sim = best
    return {"ref_iter_s": sim.throughput_iter_s, "ref_usd_iter": sim.cost_per_iteration_usd,
            "ref_plan": f"PP{pp} x DP{dp} x TP{tp}, mbs {mbs}, {pp * dp * tp} GPUs, {len(groups)} zone(s)"}


def at_least_as_good(row: dict, kw: dict) -> str:
    if "ref_iter_s" not in row or "iter_s" not in row:
        return ""
    if kw.get("objective") == "cost":
        return "yes" if row["usd_iter"] <= row["ref_usd_iter"] * (1 + 1e-9) else "NO"
    return "yes" if row["iter_s"] >= row["ref_iter_s"] * (1 - 1e-9) else "NO"


def scaling(repeats: int) -> list[dict]:
    """Search time over pools of growing GPUs, zones and GPU types (search alone, median)."""
    cases = []
    for zones in (1, 2, 5):
        for per_zone in (128, 256, 512, 1024, 2048):
            cases.append(("OPT-350", 1024, {(A, z): per_zone for z in SAILOR_ZONES[:zones]}, f"{zones} zone(s) x {per_zone} A100"))
    for total in (128, 512, 1024, 2048, 4096):
        cases.append(("GPT-Neo-2.7", 2048, {(A, Z): total // 4, (V, Z): 3 * total // 4}, f"A100+V100 {total // 4}-{3 * total // 4}"))
    for a, v in ISSUE50_SIZES:  # issue 50: where mixed-replica plans win
        cases.append(("OPT-350", 1024, {(A, Z): a, (V, Z): v}, f"A100+V100 {a}-{v}"))
    rows = []
    for model, gbs, pool, label in cases:
        times, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            res = plan_job(model, gbs, pool)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        row = {"model": model, "pool": label, "gpus": sum(pool.values()), "zones": len({z for _, z in pool}),
               "types": len({g for g, _ in pool}), "search_s": statistics.median(times),
               "spread_s": f"{min(times):.3f}-{max(times):.3f}", "cpu_s": statistics.median(cpu),
               "cpu_spread_s": f"{min(cpu):.3f}-{max(cpu):.3f}", "search_only_s": res.search_time_s,
               "layouts": res.evaluated, "iter_s": res.throughput_iter_s, "plan": shape(res),
               "sailor_cpp_s": SAILOR_CPP_SCALING.get(label), "max_GPUs_over_zone": over_capacity(res, pool)}
        rows.append(row)
        print(f"{label}: {row['search_s']:.3g} s ({row['spread_s']})  {res.evaluated} layouts  {row['plan']}", flush=True)
    return rows


def shape(res) -> str:
    parts = []
    for s in res.plan.stages:
        tps = {g.tp for g in s.replicas}
        where = "+".join(
            f"{g.gpu_type}@{g.zone[-4:]}" + (f"x{g.count}" if len(s.replicas) > 1 else "") + (f" TP{g.tp}" if len(tps) > 1 else "")
            for g in s.replicas
        )
        parts.append(f"{where} L{s.first_layer}-{s.last_layer - 1}" + (f" TP{s.replicas[0].tp}" if len(tps) == 1 else ""))
    zones = len({z for _, z in res.plan.gpus_by_type_zone()})
    micro = set(res.plan.microbatches())
    uneven = f" (microbatches per replica {min(micro)}-{max(micro)})" if len(micro) > 1 else ""
    return (f"PP{res.plan.pp} x DP{res.plan.dp}, mbs {res.plan.microbatch_size}, {res.plan.num_gpus} GPUs, {zones} zone(s)"
            f"{uneven}: " + "; ".join(parts))


def over_capacity(res, pool: dict) -> int:
    """Most GPUs the plan uses beyond a (type, zone)'s count (0: within capacity everywhere)."""
    return max(0, *(n - pool.get(key, 0) for key, n in res.plan.gpus_by_type_zone().items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--scaling", action="store_true", help="also time the search over growing pools")
    ap.add_argument("--only", default="", help="run only the scenarios whose name contains this text")
    args = ap.parse_args()
    scenarios = [sc for sc in SCENARIOS if args.only in sc[0]]
    if not scenarios:
        ap.error(f"--only: no scenario name contains {args.only!r}")
    rows = []
    for name, model, pool, kw, published, baselines in scenarios:
        kw = dict(kw)
        gbs = kw.pop("gbs", GBS[model])
        blocks = kw.pop("max_blocks", SearchOptions.max_blocks)
        row = {"scenario": name, "gbs": gbs}
        for label, opts in (("", SearchOptions(max_blocks=blocks)), ("milp_", SearchOptions(max_blocks=blocks, narrow_with_milp=True))):
            try:
                t, res = median_time(lambda opts=opts, model=model, pool=pool, kw=kw, gbs=gbs: plan_job(model, gbs, pool, options=opts, **kw), args.repeats)
            except InfeasibleError as exc:
                row[f"{label}result"] = str(exc)
                continue
            row |= {
                f"{label}search_s": t,
                f"{label}iter_s": res.throughput_iter_s,
                f"{label}usd_iter": res.cost_per_iteration_usd,
            }
            if not label:
                row |= {"mem_GB": res.peak_memory_gb, "plan": shape(res), "layouts": res.evaluated,
                        "max_GPUs_over_zone": over_capacity(res, dict(pool.capacity_by_zone()) if hasattr(pool, "capacity_by_zone") else pool)}
        if published is not None:
            row["published_s"] = published
        if name in SAILOR_CPP_S:
            row["sailor_cpp_s"] = SAILOR_CPP_S[name]
        if name in SAILOR_PLANS:
            row |= reference(name, model, gbs, kw)
            row["ours_ge_ref"] = at_least_as_good(row, kw)
        if baselines and not args.no_baselines:
            for bl, fn in (("homog", homogeneous_plan), ("uniform", uniform_split_plan)):
                t, res = median_time(lambda fn=fn, model=model, pool=pool, kw=kw, gbs=gbs: fn(PlanRequest.build(model, gbs, pool, Goal(**kw))), 1)
                row |= {f"{bl}_iter_s": res.throughput_iter_s, f"{bl}_search_s": t, f"{bl}_plan": shape(res)}
        rows.append(row)
        print(f"{name}: {row.get('search_s', float('nan')):.3g} s  {row.get('iter_s', float('nan')):.4g} iter/s  "
              f"${row.get('usd_iter', float('nan')):.4g}/iter  {row.get('plan', row.get('result'))}", flush=True)
    print()
    print_table(rows, ["scenario", "gbs", "search_s", "sailor_cpp_s", "published_s", "milp_search_s", "iter_s", "milp_iter_s",
                       "usd_iter", "mem_GB", "layouts", "max_GPUs_over_zone"])
    print()
    print_table([r for r in rows if "ref_plan" in r],
                ["scenario", "iter_s", "usd_iter", "ref_iter_s", "ref_usd_iter", "ours_ge_ref", "ref_plan"])
    if not args.no_baselines:
        print()
        print_table([r for r in rows if "homog_iter_s" in r], ["scenario", "iter_s", "homog_iter_s", "uniform_iter_s", "uniform_search_s"])
    write_json("sailor_search" if not args.only else "sailor_search_only", rows)  # a partial run keeps the full table
    if args.scaling:
        print()
        scale = scaling(args.repeats)
        print()
        print_table(scale, ["model", "pool", "gpus", "zones", "types", "search_s", "spread_s", "cpu_s", "cpu_spread_s",
                            "sailor_cpp_s", "layouts", "iter_s",
                            "max_GPUs_over_zone"])
        write_json("sailor_search_scaling", scale)


if __name__ == "__main__":
    main()
