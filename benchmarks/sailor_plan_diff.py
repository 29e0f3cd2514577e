"""heteroplan's plan against a Sailor-style plan, term by term (issue 31).

GPT-Neo-2.7 on 80 A100-40 + 240 V100-16 (one zone, GBS 2048). Sailor's planner puts the V100s at
TP 4 in a 13-stage pipeline; its exact layer split and replica counts are not in this repository,
so the Sailor-style plan is the best, under our model, of a small family of that shape: 13 stages,
even layer split, 1-4 V100 TP4 replicas per stage and optionally 2-6 A100 TP1 replicas, microbatch
1 or 2, fitting memory. Prints the family, the diff of heteroplan's plan against its best member and
against the V100-only member, and writes JSON to benchmarks/results/.

    python benchmarks/sailor_plan_diff.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from _common import print_table, write_json  # noqa: E402

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner import Plan, ReplicaGroup, Stage, plan_job  # noqa: E402

A, V, Z = "A100-40", "V100-16", "us-central1-a"
MODEL, GBS, PP = "GPT-Neo-2.7", 2048, 13


def family(res) -> list[tuple[tuple[int, int, int], Plan, object]]:
    L = res.request.profile.num_layers
    bounds = [round(i * L / PP) for i in range(PP + 1)]
    out = []
    for v in (1, 2, 3, 4):
        for a in (0, 2, 4, 6):
            for mbs in (1, 2):
                if PP * 4 * v > 240 or PP * a > 80:
                    continue
                groups = (ReplicaGroup(V, Z, 4, v),) + ((ReplicaGroup(A, Z, 1, a),) if a else ())
                try:
                    plan = Plan(MODEL, GBS, mbs, tuple(Stage(x, y, groups) for x, y in zip(bounds, bounds[1:], strict=False)))
                    out.append(((v, a, mbs), plan, res.simulate(plan)))
                except InputError:
                    continue
    return out


def main() -> None:
    res = plan_job(MODEL, GBS, {(A, Z): 80, (V, Z): 240})
    members = family(res)
    rows = [{"V100_TP4_replicas": v, "A100_TP1_replicas": a, "mbs": m, "iter_s": est.iteration_time_s,
             "usd_iter": est.cost_per_iteration_usd, "fits": est.fits} for (v, a, m), _, est in members]
    print_table(sorted(rows, key=lambda r: r["iter_s"]), ["V100_TP4_replicas", "A100_TP1_replicas", "mbs", "iter_s", "usd_iter", "fits"])
    fitting = [m for m in members if m[2].fits]
    best = min(fitting, key=lambda m: m[2].iteration_time_s)
    v100_only = min((m for m in fitting if m[0][1] == 0), key=lambda m: m[2].iteration_time_s)
    out = {"heteroplan": res.to_dict(), "family": rows}
    for label, (_, plan, _) in (("Sailor-style", best), ("Sailor-style V100 only", v100_only)):
        d = res.diff(plan, ("heteroplan", label))
        print()
        print(plan.describe())
        print(d.describe())
        out[label] = {"plan": plan.to_dict(), "terms": [{"kind": r.kind, "term": r.term, "unit": r.unit, "heteroplan": r.a,
                                                         "other": r.b} for r in d.rows]}
    write_json("sailor_plan_diff", out)


if __name__ == "__main__":
    main()
