"""Why min $/iteration with >= 0.2 iter/s picks what it picks (Sailor's published 64 A100, TP4 x DP16).

Prints, for OPT-350 on A100-40 in one zone, the simulator's iteration time, its parts
(compute per microbatch, pipeline, all-reduce + update), iter/s, $/iteration and GB per GPU of
the published plan and its neighbours (64 and 128 GPUs; PP 1, 2, 4; TP 1, 2, 4; every profiled
microbatch size that fits in 40 GB) at GBS 1024 (Sailor's OPT-350 training config) and 2048;
the compute-only bound on the throughput of 64 A100; the all-reduce factor at which the
published TP4 x DP16 would overtake our pick; and the search against exhaustive enumeration on
a 64-A100 pool. PP > 1 plans use the best layer split for PP 2 and an even split for PP 4.

    python benchmarks/sailor_mincost.py
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from _common import print_table, write_json  # noqa: E402

from heteroplan.errors import InfeasibleError  # noqa: E402
from heteroplan.perf.sailor_profiles import load_model_profile  # noqa: E402
from heteroplan.planner import plan_job, simulate_plan  # noqa: E402
from heteroplan.planner.model.simulator import DEFAULT_CONFIG, gpu_catalog  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.planner.search.brute_force import brute_force  # noqa: E402

MODEL, A, Z, FLOOR = "OPT-350", "A100-40", "us-central1-a", 0.2
SHAPES = [  # (pp, dp, tp): 64 GPUs, then 128
    (1, 16, 4), (1, 32, 2), (1, 64, 1), (2, 8, 4), (2, 16, 2), (4, 8, 2), (4, 4, 4),
    (1, 32, 4), (1, 64, 2), (1, 128, 1), (2, 16, 4), (2, 32, 2), (4, 16, 2),
]


def build(pp: int, dp: int, tp: int, mbs: int, gbs: int, bounds: tuple[int, ...]) -> Plan:
    stages = tuple(Stage(bounds[s], bounds[s + 1], (ReplicaGroup(A, Z, tp, dp),)) for s in range(pp))
    return Plan(MODEL, gbs, mbs, stages)


def best_of_shape(pp: int, dp: int, tp: int, mbs: int, gbs: int, L: int):
    """(plan, sim) with the cheapest layer split (all splits for PP <= 2, even split otherwise)."""
    if pp <= 2:
        splits = [(0, *c, L) for c in itertools.combinations(range(1, L), pp - 1)]
    else:
        splits = [tuple(round(i * L / pp) for i in range(pp + 1))]
    sims = [(simulate_plan(p), p) for p in (build(pp, dp, tp, mbs, gbs, b) for b in splits)]
    sim, plan = min(sims, key=lambda x: (x[0].peak_memory_gb > 40, x[0].cost_per_iteration_usd))
    return plan, sim


def candidates(gbs: int) -> list[dict]:
    prof = load_model_profile(MODEL)
    rows = []
    for pp, dp, tp in SHAPES:
        for mbs in prof.microbatch_sizes(A):
            if gbs % (mbs * dp) or not prof.has(A, mbs, tp):
                continue
            plan, sim = best_of_shape(pp, dp, tp, mbs, gbs, prof.num_layers)
            if sim.peak_memory_gb > 40:
                continue
            sync = sim.stage_times.sync
            rows.append(
                {
                    "gbs": gbs,
                    "GPUs": plan.num_gpus,
                    "PPxDPxTP": f"{pp}x{dp}x{tp}",
                    "mbs": mbs,
                    "M": plan.microbatches()[0],
                    "fb_ms": 1e3 * float(sim.stage_times.compute[:, 0].max()),
                    "pipe_s": sim.pipeline_time_s,
                    "sync_s": float(sync.max()),
                    "iter_s": sim.iteration_time_s,
                    "iter_per_s": sim.throughput_iter_s,
                    "usd_iter": sim.cost_per_iteration_usd,
                    "mem_GB": sim.peak_memory_gb,
                    "floor": "yes" if sim.throughput_iter_s >= FLOOR else "no",
                }
            )
    return rows


def compute_bound(gbs: int, gpus: int) -> float:
    """Most iter/s ``gpus`` A100s can reach on compute alone: best profiled GPU-seconds per sample, no bubble or sync."""
    prof = load_model_profile(MODEL)
    per_sample = min(
        gpu_s
        for mbs in prof.microbatch_sizes(A)
        for tp in prof.tp_degrees(A, mbs)
        for gpu_s in [tp * (DEFAULT_CONFIG.compute_scale * sum(prof.stage_compute(A, mbs, tp, 0, prof.num_layers)[:2])
                            + DEFAULT_CONFIG.microbatch_overhead_s) / mbs]
    )
    return gpus / (gbs * per_sample)


def main() -> None:
    rows = candidates(1024) + candidates(2048)
    print_table(rows, list(rows[0]))
    out: dict = {"candidates": rows}
    for gbs in (1024, 2048):
        b = compute_bound(gbs, 64)
        out[f"compute_bound_64_gbs{gbs}"] = b
        print(f"\nGBS {gbs}: 64 A100 reach at most {b:.3f} iter/s on profiled compute alone (no bubble, no sync)")

    # all-reduce factor at which TP4 x DP16 (mbs 8) overtakes TP2 x DP32 (mbs 4) at GBS 1024
    prof = load_model_profile(MODEL)
    parts = {}
    for key, (dp, tp, mbs) in {"TP4xDP16": (16, 4, 8), "TP2xDP32": (32, 2, 4)}.items():
        sim = simulate_plan(build(1, dp, tp, mbs, 1024, (0, prof.num_layers)))
        upd = prof.stage_compute(A, mbs, tp, 0, prof.num_layers)[2]
        parts[key] = (sim.pipeline_time_s, float(sim.stage_times.sync[0]) - upd, upd)
    (p4, a4, u4), (p2, a2, u2) = parts["TP4xDP16"], parts["TP2xDP32"]
    x = ((p4 + u4) - (p2 + u2)) / (a2 - a4)
    out["allreduce_break_even_factor"] = x
    print(f"\nGBS 1024: pipeline / all-reduce / update (s): TP4xDP16 {p4:.3f} / {a4:.3f} / {u4:.3f}, "
          f"TP2xDP32 {p2:.3f} / {a2:.3f} / {u2:.3f}; TP4xDP16 is cheaper once the all-reduce is x{x:.2f}")

    # the search vs exhaustive enumeration on a 64-A100 pool
    pool = {(A, Z): 64}
    types = gpu_catalog()
    for gbs in (1024, 2048):
        t0 = time.perf_counter()
        try:
            res = plan_job(MODEL, gbs, pool, "cost", min_throughput=FLOOR)
            got = f"{res.plan.pp}x{res.plan.dp}x{res.plan.stages[0].replicas[0].tp} mbs {res.plan.microbatch_size}: " \
                  f"{res.throughput_iter_s:.4f} iter/s, ${res.cost_per_iteration_usd:.4f}/iter"
        except InfeasibleError as exc:
            got = f"infeasible: {exc.reason}"
        t_search = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            plan, sim = brute_force(prof, gbs, pool, types, "cost", min_throughput=FLOOR, max_pp=2, max_blocks=1)
            bf = f"{plan.pp}x{plan.dp}x{plan.stages[0].replicas[0].tp} mbs {plan.microbatch_size}: " \
                 f"{sim.throughput_iter_s:.4f} iter/s, ${sim.cost_per_iteration_usd:.4f}/iter"
        except InfeasibleError:
            bf = "infeasible"
        t_bf = time.perf_counter() - t0
        out[f"pool64_gbs{gbs}"] = {"search": got, "search_s": t_search, "brute_force_pp<=2": bf, "brute_force_s": t_bf}
        print(f"\n64 A100, GBS {gbs}: search ({t_search:.2f} s) {got}\n                  enumeration PP<=2 ({t_bf:.1f} s) {bf}")
    write_json("sailor_mincost", out)


if __name__ == "__main__":
    main()
