"""Both simulators side by side on Sailor's heterogeneous scenario (issue 50).

OPT-350, global batch 1024, A100-40 + V100-16 in one zone (us-central1-a), 4 GPUs per node:
8+8, 16+16, 32+96, 80+240, 128+384 GPUs. Per case the plans scored are heteroplan's chosen plan,
the best plan of the other layout family it priced (``PlanResult.best_of``), the best set of
independent pipelines it priced (ours only: see below), the published plans recorded here
(Sailor's 8+8 plan from the issue), and every plan of Sailor's planners' result files given with
``--planner-results`` (the ``<planner>_<model>.json`` lists that Sailor's
``sailor/Planner/simulations/simulator.py --planner X`` writes, e.g. FlashFlex, AMP, Metis,
SAILOR; a row is used where its ``num_gpus`` is one of the five pools).

Each plan is scored by heteroplan's simulator (iter/s, $/iteration, whether it fits our memory
model) and, where Sailor's tree is given (``--sailor-path`` or ``SAILOR_PATH``: a checkout of
eth-easl/sailor), by Sailor's own simulator, imported from that tree and run as it is
(``Simulator.simulate_iteration_time``, ``check_config_fits``; its profile file
``sailor/Planner/simulations/profiles_tmp.json`` unless ``--sailor-profiles``), with its two
terms that disagree with ours (pipeline sends, gradient sync; docs/sailor.md). Without the tree
it prints our side and says Sailor's was skipped (exit status 0). Sailor's simulator gives
every replica the same microbatch count (``ceil(GBS / (mbs * dp))``) and takes one pipeline
per microbatch size, so our plans with uneven microbatches per replica are scored there with
even ones (column ``even mb``) and our sets of independent pipelines (one microbatch size per
pipeline) are not scored there. A planner's plan of several pipelines (FlashFlex) is scored by
ours as a :class:`PipelineSet` with the microbatches spread evenly, as Sailor's has them.

    python benchmarks/sailor_side_by_side.py [--sailor-path DIR] [--planner-results FILE ...]
        (JSON: benchmarks/results/sailor_side_by_side.json)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from _common import print_table, write_json  # noqa: E402

from heteroplan.planner import Plan, plan_job, simulate_plan  # noqa: E402
from heteroplan.planner.explain import PlanStructure  # noqa: E402
from heteroplan.planner.model.pipeline_set import simulate_pipeline_set  # noqa: E402
from heteroplan.planner.pipeline_set import PipelineSet  # noqa: E402
from heteroplan.planner.plan import ReplicaGroup, Stage  # noqa: E402

A, V, Z = "A100-40", "V100-16", "us-central1-a"
MODEL, GBS, GPUS_PER_NODE = "OPT-350", 1024, 4
SIZES = ((8, 8), (16, 16), (32, 96), (80, 240), (128, 384))
# Published plans for these pools recorded in the issue (issue 50): Sailor's 8+8 plan, one stage of
# 8 A100 at TP 1 and 2 V100 at TP 4 as data-parallel replicas, microbatch 2 (512 microbatches: the
# A100 replicas run 52, the V100 ones 48 under our simulator; Sailor's runs 52 on each)
PUBLISHED = {
    (8, 8): [("Sailor (issue 50)", Plan(MODEL, GBS, 2, (Stage(0, 26, (ReplicaGroup(A, Z, 1, 8), ReplicaGroup(V, Z, 4, 2))),),
                                        microbatches_per_replica=(52,) * 8 + (48,) * 2))],
}


@dataclass(frozen=True)
class SailorScore:
    """One plan under Sailor's simulator: iter/s, whether it fits Sailor's memory model, and the
    seconds of its two terms that disagree with ours (pipeline sends along the critical path,
    gradient sync)."""

    iter_per_s: float
    fits: bool
    send_s: float
    sync_s: float


class SailorSimulator:
    """Sailor's simulator imported from a checkout of its tree (its code runs as it is)."""

    def __init__(self, root: Path, profiles: Path | None) -> None:
        root = root.resolve()
        planner = root / "sailor" / "Planner"
        if not (planner / "simulations" / "runtime_simulator.py").is_file():
            raise FileNotFoundError(f"{root} is not a checkout of eth-easl/sailor (no sailor/Planner/simulations)")
        # its simulator reads f"{sailor_path}/sailor/sailor/providers/...": a directory whose
        # "sailor" entry is the checkout
        self.root = root
        self._link_dir = tempfile.TemporaryDirectory()
        self.link_dir = self._link_dir.name
        (Path(self.link_dir) / "sailor").symlink_to(root, target_is_directory=True)
        sys.path.insert(0, str(root))
        from sailor.Planner.simulations import runtime_simulator as rs  # type: ignore[import-not-found]

        self._rs = rs
        config = json.loads((planner / "simulations" / "configs" / "training_config_opt_350.json").read_text())
        config["global_batch_size"] = GBS
        self._config = config
        llm_info = json.loads((planner / "llm_info.json").read_text())
        profile_data = json.loads((profiles or planner / "simulations" / "profiles_tmp.json").read_text())
        with contextlib.redirect_stdout(io.StringIO()):
            self._sim = rs.Simulator(self._link_dir.name, config, llm_info, False, profile_data, Z)

    def fits(self, plan_dict: dict) -> bool:
        """Whether ``plan_dict`` fits Sailor's memory model."""
        with contextlib.redirect_stdout(io.StringIO()):
            return bool(self._sim.check_config_fits(plan_dict))

    def score(self, plan_dict: dict) -> SailorScore:
        rs, sim = self._rs, self._sim
        with contextlib.redirect_stdout(io.StringIO()):
            t, _, _ = sim.simulate_iteration_time(plan_dict)
            fits = self.fits(plan_dict)
            sync = sim.estimate_sync_time(rs.convert_homogeneous(plan_dict, self._config))
            original = rs.estimate_p2p_pipeline_times
            rs.estimate_p2p_pipeline_times = lambda *a, **k: [0.0] * len(a[1].layers_per_stage)
            try:
                t_no_send, _, _ = sim.simulate_iteration_time(plan_dict)
            finally:
                rs.estimate_p2p_pipeline_times = original
        return SailorScore(1 / t, fits, t - t_no_send, sync)


# Sailor's ports of published planners that this benchmark can run (``--run-planners``): the class,
# its module in Sailor's tree and the profile path its harness (ae_scripts/planner/run_all_sim.py) passes
PLANNERS = {
    "AMP": ("sailor.Planner.baselines.AMP.amp_planner", "AMPPlanner", "sailor/Planner/baselines/AMP/profiles/OPT-350", ("throughput",)),
    "Metis": ("sailor.Planner.baselines.Metis.metis_planner", "MetisPlanner", "sailor/Planner/baselines/Metis/profiles/OPT-350",
              ("{training_config}",)),
    "FlashFlex": ("sailor.Planner.baselines.FlashFlex.flashflex_planner", "FlashFlexPlanner",
                  "sailor/Planner/baselines/FlashFlex/src/machine_amounts.json", ()),
}
_RUN_PLANNER = """
import contextlib, io, json, sys
root, module, cls, profile, extra, a, v = sys.argv[1:8]
sys.path.insert(0, root)
planner_class = getattr(__import__(module, fromlist=[cls]), cls)
training = json.load(open(root + "/sailor/Planner/simulations/configs/training_config_opt_350.json"))
training["global_batch_size"] = int(sys.argv[8])
basic = json.load(open(root + "/sailor/Planner/simulations/configs/basic_cluster_config.json"))
args = [a_.replace("{training_config}", root + "/sailor/Planner/simulations/configs/training_config_opt_350.json") for a_ in json.loads(extra)]
cluster = {t: {"num_nodes": n // basic[t]["gpus_per_node"], "gpus_per_node": basic[t]["gpus_per_node"],
               "mem_per_gpu": basic[t]["mem_per_gpu"]} for t, n in (("A100-40", int(a)), ("V100-16", int(v)))}
cluster["zone"] = basic["zone"]
with contextlib.redirect_stdout(io.StringIO()):
    planner = planner_class(root + "/" + profile, *args)
    plans = planner.get_sorted_plans(cluster_config=cluster, training_config=training)
print(json.dumps(plans[:200], default=str))
"""


def run_planner(sailor: SailorSimulator, name: str, pool: tuple[int, int], timeout_s: float) -> tuple[dict | None, str]:
    """The plan Sailor's harness would take from planner ``name`` on ``pool``: its first plan that
    fits Sailor's memory model; None and why where it fails, times out or finds none."""
    module, cls, profile, extra = PLANNERS[name]
    cmd = [sys.executable, "-c", _RUN_PLANNER, str(sailor.root), module, cls, profile, json.dumps(extra), str(pool[0]), str(pool[1]), str(GBS)]
    env = {**os.environ, "SAILOR_PATH": sailor.link_dir}
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        return None, f"no plan within {timeout_s:.0f} s"
    search_s = time.perf_counter() - t0
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or ["failed"])[-1][:100]
    for plan in json.loads(done.stdout.strip().splitlines()[-1]):
        if sailor.fits(plan):
            return plan, f"search {search_s:.1f} s wall"
    return None, "no plan fits Sailor's memory model"


def to_sailor(plan: Plan) -> dict:
    """``plan`` in the input format of Sailor's simulator (one pipeline; replicas in plan order)."""
    return {"mbs": plan.microbatch_size, "pipeline_list": [{
        "num_stages": plan.pp,
        "layers_per_stage": [list(range(s.first_layer, s.last_layer)) for s in plan.stages],
        "tmp_per_stage": [[[[(r.gpu_type, GPUS_PER_NODE, r.zone)], r.tp] for r in s.replica_list()] for s in plan.stages],
        "dp": [s.dp for s in plan.stages],
    }]}


def from_sailor_result(plan: dict) -> tuple[dict, Plan | PipelineSet]:
    """A plan of Sailor's result files (its ``Plan.to_dict``) or of a planner (the simulator's input
    format) as the simulator's input and as ours: a :class:`Plan` for one pipeline, a
    :class:`PipelineSet` for several (FlashFlex). The ``GBS / mbs`` microbatches are spread evenly
    over every replica of every pipeline (the remainder to the first ones), as Sailor's simulator
    runs ``ceil(GBS / (mbs dp P))`` on each."""
    if "pipeline_list" in plan:
        pipelines = [{k: p[k] for k in ("num_stages", "layers_per_stage", "tmp_per_stage", "dp")} for p in plan["pipeline_list"]]
    else:
        pipelines = [{"num_stages": p["num_stages"], "layers_per_stage": p["layers_per_stage"],
                      "tmp_per_stage": p["tmp_stages"], "dp": p["dp_degrees"]} for p in plan["pipelines"]]
    sailor_input = {"mbs": plan["mbs"], "pipeline_list": pipelines}
    mbs, dps = plan["mbs"], [max(p["dp"]) for p in pipelines]
    total, replicas = GBS // mbs, sum(dps)
    shares = [total // replicas + (1 if i < total % replicas else 0) for i in range(replicas)]
    ours, first = [], 0
    for p, dp in zip(pipelines, dps, strict=True):
        micro, first = tuple(shares[first:first + dp]), first + dp
        stages = tuple(Stage(min(layers), max(layers) + 1, _groups(replicas_))
                       for layers, replicas_ in zip(p["layers_per_stage"], p["tmp_per_stage"], strict=True))
        ours.append(Plan(MODEL, mbs * sum(micro), mbs, stages, None if len(set(micro)) == 1 else micro))
    return sailor_input, ours[0] if len(ours) == 1 else PipelineSet(tuple(ours))


def _groups(replicas: list) -> tuple[ReplicaGroup, ...]:
    """A stage's replicas (``[[vm, ...], tp]`` each) as replica groups, consecutive equal ones merged."""
    groups: list[ReplicaGroup] = []
    for vms, tp in replicas:
        gpu_type, _, zone = vms[0]
        if groups and (groups[-1].gpu_type, groups[-1].zone, groups[-1].tp) == (gpu_type, zone, tp):
            groups[-1] = ReplicaGroup(gpu_type, zone, tp, groups[-1].count + 1)
        else:
            groups.append(ReplicaGroup(gpu_type, zone, tp, 1))
    return tuple(groups)


def planner_plans(files: list[Path]) -> dict[tuple[int, int], list[tuple[str, dict, Plan | PipelineSet]]]:
    """Plans of Sailor's planners' result files by pool (A100s, V100s)."""
    out: dict[tuple[int, int], list[tuple[str, dict, Plan | PipelineSet]]] = {}
    for path in files:
        for row in json.loads(path.read_text()):
            if not isinstance(row.get("plan"), dict):
                continue
            counts = {k.split("_")[0]: v for k, v in row["num_gpus"].items()}
            pool = (counts.get(A, 0), counts.get(V, 0))
            if pool in SIZES:
                out.setdefault(pool, []).append((path.stem.split("_")[0], *from_sailor_result(row["plan"])))
    return out


def shape(plan: Plan | PipelineSet) -> str:
    if isinstance(plan, PipelineSet):
        return f"{len(plan.pipelines)} pipelines: " + " | ".join(shape(p) for p in plan.pipelines[:3])
    stages = "; ".join("+".join(f"{r.count} {r.gpu_type.split('-')[0]} TP{r.tp}" for r in s.replicas) for s in plan.stages)
    return f"PP{plan.pp} x DP{plan.dp}, mbs {plan.microbatch_size}: {stages}"[:110]


def row(pool, source: str, plan: Plan | PipelineSet | None, sailor_input: dict | None, sailor: SailorSimulator | None,
        ours_override: tuple[float, float, bool] | None = None, what: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"case": f"{pool[0]}+{pool[1]}", "plan of": source}
    if isinstance(plan, PipelineSet):
        est_set = simulate_pipeline_set(plan)
        ours_override = (1 / est_set.iteration_time_s, est_set.cost_per_iteration_usd, est_set.fits)
        what = what or shape(plan)
        plan = None
    if ours_override is not None:
        out["ours iter/s"], out["ours $/iter"], out["fits ours"] = ours_override
    elif plan is not None:
        est = simulate_plan(plan)
        out["ours iter/s"], out["ours $/iter"], out["fits ours"] = 1 / est.iteration_time_s, est.cost_per_iteration_usd, est.fits
        out["ours send s"] = est.time_terms.pipeline_send
        out["ours sync s"] = est.time_terms.allreduce
    if sailor is not None and sailor_input is not None:
        s = sailor.score(sailor_input)
        out.update({"Sailor iter/s": s.iter_per_s, "fits Sailor": s.fits, "Sailor send s": s.send_s, "Sailor sync s": s.sync_s})
    out["even mb"] = "no" if plan is not None and len(set(plan.microbatches())) > 1 else ""
    out["plan"] = what or (shape(plan) if plan is not None else "")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-path", type=Path, default=os.environ.get("SAILOR_PATH") or None,
                    help="checkout of eth-easl/sailor (default: $SAILOR_PATH); without it only our simulator scores")
    ap.add_argument("--sailor-profiles", type=Path, default=None, help="profile file for Sailor's simulator")
    ap.add_argument("--planner-results", type=Path, nargs="*", default=[],
                    help="result files of Sailor's planners (<planner>_OPT-350.json) whose plans are scored too")
    ap.add_argument("--run-planners", nargs="*", default=[], choices=sorted(PLANNERS),
                    help="run these planners of Sailor's tree on each pool (needs --sailor-path) and score their plans")
    ap.add_argument("--planner-timeout", type=float, default=300.0, help="seconds per planner and pool (default 300)")
    args = ap.parse_args()
    sailor = None
    if args.sailor_path is None:
        print("Sailor's simulator: skipped (no --sailor-path or SAILOR_PATH); heteroplan's side only.\n")
    else:
        sailor = SailorSimulator(args.sailor_path, args.sailor_profiles)
    others = planner_plans(args.planner_results)
    rows = []
    for a, v in SIZES:
        pool = (a, v)
        res = plan_job(MODEL, GBS, {(A, Z): a, (V, Z): v})
        rows.append(row(pool, f"heteroplan ({res.structure.value})", res.plan, to_sailor(res.plan), sailor))
        for structure in PlanStructure:
            runner = res.best_of(structure) if structure is not PlanStructure.INDEPENDENT_PIPELINES else None
            if runner is not None:
                rows.append(row(pool, f"heteroplan best {structure.value}", runner.plan, to_sailor(runner.plan), sailor))
        sets = res.independent_pipelines
        if sets is not None:
            est = sets.estimate
            rows.append(row(pool, "heteroplan best independent pipelines", None, None, sailor,
                            (1 / est.iteration_time_s, est.cost_per_iteration_usd, est.fits),
                            " | ".join(shape(p) for p in sets.pipelines.pipelines)))
        for name, plan in PUBLISHED.get(pool, []):
            rows.append(row(pool, name, plan, to_sailor(plan), sailor))
        for name in args.run_planners if sailor is not None else ():
            found, note = run_planner(sailor, name, pool, args.planner_timeout)
            if found is None:
                rows.append({"case": f"{a}+{v}", "plan of": name, "plan": note})
                continue
            sailor_input, plan = from_sailor_result(found)
            rows.append(row(pool, f"{name} ({note})", plan, sailor_input, sailor))
        for name, sailor_input, plan in others.get(pool, []):
            rows.append(row(pool, name, plan, sailor_input, sailor))
    columns = ["case", "plan of", "ours iter/s", "ours $/iter", "fits ours", "ours send s", "ours sync s"]
    if sailor is not None:
        columns += ["Sailor iter/s", "fits Sailor", "Sailor send s", "Sailor sync s"]
    print_table(rows, [*columns, "even mb", "plan"])
    print(f"\nwrote {write_json('sailor_side_by_side', {'sailor_path': str(args.sailor_path or ''), 'rows': rows})}")
    bad = [r for r in rows if isinstance(r.get("ours iter/s"), float) and math.isnan(r["ours iter/s"])]
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
