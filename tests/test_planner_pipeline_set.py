"""Independent pipelines (issue 50): the plan format and the machine model, checked against
``simulate_plan`` where the two must agree and against a hand-built ring where they differ."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.errors import InputError
from heteroplan.perf.sailor_network import load_network
from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner import SearchOptions, plan_job, simulate_plan
from heteroplan.planner.model.comm import allreduce_s
from heteroplan.planner.model.microbatches import class_microbatches
from heteroplan.planner.model.pipeline_set import simulate_pipeline_set
from heteroplan.planner.model.sim_config import as_platforms
from heteroplan.planner.model.simulator import SHIPPED_PLATFORMS, gpu_catalog
from heteroplan.planner.pipeline_set import PipelineSet
from heteroplan.planner.plan import OptimizerSharding, Plan, ReplicaGroup, Stage
from heteroplan.planner.request import PlanRequest
from heteroplan.planner.search.brute_force import brute_force_pipeline_set

A, V, Z, ZB = "A100-40", "V100-16", "us-central1-a", "us-central1-b"
OPT = load_model_profile("OPT-350")
CATALOG = gpu_catalog()
L = OPT.num_layers


def _pipe(gbs, mbs, cuts, groups, micro=None):
    bounds = (0, *cuts, L)
    return Plan("OPT-350", gbs, mbs, tuple(Stage(a, b, g) for a, b, g in zip(bounds[:-1], bounds[1:], groups, strict=True)),
                micro)


def test_one_pipeline_is_simulate_plan():
    plan = _pipe(256, 2, (9, 17), [(ReplicaGroup(V, Z, 2, 4),)] * 2 + [(ReplicaGroup(A, Z, 1, 4),)])
    est, ref = simulate_pipeline_set(PipelineSet((plan,))), simulate_plan(plan)
    assert est.iteration_time_s == pytest.approx(ref.iteration_time_s, rel=1e-12)
    assert est.cost_per_iteration_usd == pytest.approx(ref.cost_per_iteration_usd, rel=1e-12)
    assert est.sync_time_s == pytest.approx(ref.sync_time_s, rel=1e-12)


@pytest.mark.parametrize("zone_b", [Z, ZB])
def test_pipelines_that_share_their_split_are_one_plan_with_both_replicas(zone_b):
    """Same split: every range is a stage, and the set is the plan whose stages hold the replicas
    of both pipelines (each with its own microbatch count), priced by ``simulate_plan``; across
    zones the ring's egress too."""
    cuts = (13,)
    a = _pipe(640, 2, cuts, [(ReplicaGroup(A, Z, 1, 4),)] * 2, (80, 80, 80, 80))
    v = _pipe(384, 2, cuts, [(ReplicaGroup(V, zone_b, 2, 3),)] * 2, (64, 64, 64))
    merged = Plan("OPT-350", 1024, 2, tuple(Stage(sa.first_layer, sa.last_layer, sa.replicas + sv.replicas)
                                            for sa, sv in zip(a.stages, v.stages, strict=True)), (80,) * 4 + (64,) * 3)
    est, ref = simulate_pipeline_set(PipelineSet((a, v))), simulate_plan(merged)
    assert est.iteration_time_s == pytest.approx(ref.iteration_time_s, rel=1e-12)
    assert est.cost_per_iteration_usd == pytest.approx(ref.cost_per_iteration_usd, rel=1e-12)
    assert est.pipeline_time_s == pytest.approx(ref.pipeline_time_s, rel=1e-12)


def test_different_splits_all_reduce_each_layer_range_over_every_replica():
    """A100 in one stage, V100 in two (cut at 9): ranges [0, 9) and [9, 26), each a ring over all
    6 replicas at the smaller TP; the V100 stages sync their own range, the A100 stage both."""
    a = _pipe(512, 2, (), [(ReplicaGroup(A, Z, 1, 4),)], (64,) * 4)
    v = _pipe(512, 2, (9,), [(ReplicaGroup(V, Z, 2, 2),)] * 2, (128, 128))
    pset = PipelineSet((a, v))
    assert pset.segments() == ((0, 9), (9, L)) and pset.replicas == 6 and pset.global_batch_size == 1024
    est = simulate_pipeline_set(pset)
    cfg, net = as_platforms(SHIPPED_PLATFORMS), load_network()
    ring = {((A, Z), (A, Z)), ((A, Z), (V, Z)), ((V, Z), (V, Z)), ((V, Z), (A, Z))}
    want = [float(allreduce_s(net, ring, 1, 6, cfg.for_gpu(A).grad_bytes_per_param * OPT.stage_sizes(1, x, y)[0],
                              max((cfg.for_gpu(A), cfg.for_gpu(V)), key=lambda c: c.allreduce_latency_s)))
            for x, y in ((0, 9), (9, L))]
    assert est.segment_allreduce_s == pytest.approx(tuple(want), rel=1e-12)
    ua = simulate_plan(a).stage_times.optimizer_update.max(axis=1)
    uv = simulate_plan(v).stage_times.optimizer_update.max(axis=1)
    sync = max(want[0] + want[1] + ua[0], want[0] + uv[0], want[1] + uv[1])
    pipe = max(simulate_plan(a).pipeline_time_s, simulate_plan(v).pipeline_time_s)
    assert est.iteration_time_s == pytest.approx(pipe + sync, rel=1e-12)
    assert est.fits and est.peak_memory_gb == max(simulate_plan(a).peak_memory_gb, simulate_plan(v).peak_memory_gb)
    usd_per_s = (4 * CATALOG[A].price_per_hour + 8 * CATALOG[V].price_per_hour) / 3600  # 4 A100; 2 stages x 2 x TP 2 V100
    assert est.egress_usd == 0 and est.cost_per_iteration_usd == pytest.approx(usd_per_s * est.iteration_time_s, rel=1e-12)


def test_files_round_trip_and_bad_sets_name_the_field(tmp_path):
    a = _pipe(512, 2, (), [(ReplicaGroup(A, Z, 1, 4),)], (64,) * 4)
    v = _pipe(512, 2, (9,), [(ReplicaGroup(V, Z, 2, 2),)] * 2, (128, 128))
    pset = PipelineSet((a, v))
    pset.to_json(tmp_path / "set.json")
    assert PipelineSet.from_json(tmp_path / "set.json") == pset
    with pytest.raises(InputError, match="pipeline_set.pipelines"):
        PipelineSet(())
    other = Plan("GPT-Neo-2.7", 64, 2, (Stage(0, 34, (ReplicaGroup(A, Z, 1, 1),)),))
    with pytest.raises(InputError, match=r"pipelines\[1\].model"):
        PipelineSet((a, other))
    zero = replace(a, stages=(replace(a.stages[0], optimizer_sharding=OptimizerSharding.ZERO1),))
    with pytest.raises(InputError, match="optimizer_sharding"):
        PipelineSet((zero,))
    with pytest.raises(InputError, match="pipeline_set.typo"):
        PipelineSet.from_dict({"pipelines": [a.to_dict()], "typo": 1})
    # a bad pipeline of the file is named by its index, not as a lone "plan"
    with pytest.raises(InputError, match=r"^pipeline_set\.pipelines\[1\]\.stages\[0\]\.replicas\[0\]\.tp"):
        PipelineSet.from_dict({"pipelines": [a.to_dict(), _with_tp(a.to_dict(), 0)]})
    with pytest.raises(InputError, match=r"^pipeline_set\.pipelines\[0\]='int': must be a JSON object"):
        PipelineSet.from_dict({"pipelines": [3]})


def _with_tp(plan: dict, tp: object) -> dict:
    stage = dict(plan["stages"][0])
    stage["replicas"] = [dict(stage["replicas"][0], tp=tp), *stage["replicas"][1:]]
    return dict(plan, stages=[stage, *plan["stages"][1:]])


def test_load_run_reads_every_plan_format_and_sets_as_their_own_loaders_do(tmp_path) -> None:
    """``heteroplan run --plan`` (``load_run``): a set, a plan, ``plan --json``'s wrapper and a
    Sailor file each read once and as ``PipelineSet.from_json`` / ``load_plan`` read them."""
    pytest.importorskip("torch", reason="load_run is heteroplan.runtime's, which needs torch: pip install torch==2.13.0")
    from heteroplan.runtime.layout import load_plan, load_run

    a = _pipe(32, 2, [], [(ReplicaGroup(A, Z, 1, 2),)])
    pset = PipelineSet((a, _pipe(32, 2, [], [(ReplicaGroup(V, Z, 1, 2),)])))
    pset.to_json(tmp_path / "set.json")
    a.to_json(tmp_path / "plan.json")
    (tmp_path / "wrapped.json").write_text(json.dumps({"plan": a.to_dict(), "iteration_time_s": 1.0}))
    replica = [[[A, 1, Z]], 1]
    sailor = {"pipeline_list": [{"layers_per_stage": [list(range(L))], "tmp_per_stage": [[replica, replica]],
                                 "dp": [2]}], "mbs": 2, "gbs": 32, "model": "OPT-350"}
    (tmp_path / "sailor.json").write_text(json.dumps(sailor))
    assert load_run(tmp_path / "set.json") == pset == PipelineSet.from_json(tmp_path / "set.json")
    for name in ("plan.json", "wrapped.json", "sailor.json"):
        assert load_run(tmp_path / name) == load_plan(tmp_path / name)
    assert load_run(tmp_path / "wrapped.json") == a
    (tmp_path / "bad.json").write_text(json.dumps({"pipelines": [a.to_dict(), {"stages": 1}]}))
    with pytest.raises(InputError, match=r"bad\.json \(--plan\): pipeline_set\.pipelines\[1\]"):
        load_run(tmp_path / "bad.json")


def test_search_reports_the_best_set_of_single_type_pipelines_and_shares_the_batch_optimally():
    """OPT-350 on 8 A100 + 8 V100: the search prices a set of one A100 and one V100 pipeline
    (reported beside the chosen plan, which the runtime can execute); its batch share is the best
    of every share under ``simulate_pipeline_set`` (each pipeline's microbatches spread evenly)."""
    pool = {(A, Z): 8, (V, Z): 8}
    res = plan_job("OPT-350", 1024, pool)
    best = res.independent_pipelines
    assert best is not None
    pset = best.pipelines
    assert pset.global_batch_size == 1024 and len(pset.pipelines) == 2
    assert sorted({g.gpu_type for p in pset.pipelines for s in p.stages for g in s.replicas}) == [A, V]
    assert all(n <= pool[k] for k, n in pset.gpus_by_type_zone().items())
    again = simulate_pipeline_set(pset)
    assert again.fits and again.iteration_time_s == pytest.approx(best.iteration_time_s, rel=1e-12)
    p1, p2 = pset.pipelines
    times = []
    for n1 in range(p1.dp, 1024 // p1.microbatch_size + 1):
        rest = 1024 - n1 * p1.microbatch_size
        if rest % p2.microbatch_size or rest // p2.microbatch_size < p2.dp:
            continue
        n2 = rest // p2.microbatch_size
        trial = PipelineSet((replace(p1, global_batch_size=n1 * p1.microbatch_size,
                                     microbatches_per_replica=class_microbatches((p1.dp,), (n1,))),
                             replace(p2, global_batch_size=rest, microbatches_per_replica=class_microbatches((p2.dp,), (n2,)))))
        times.append(simulate_pipeline_set(trial).iteration_time_s)
    assert best.iteration_time_s == pytest.approx(min(times), rel=1e-12)
    assert "best independent pipelines: " in res.describe()
    out = res.to_dict()["independent_pipelines"]
    assert out["iteration_time_s"] == best.iteration_time_s and PipelineSet.from_dict(out["pipeline_set"]) == pset


def test_single_type_pools_report_no_set():
    res = plan_job("OPT-350", 256, {(A, Z): 8})
    assert res.independent_pipelines is None and res.to_dict()["independent_pipelines"] is None


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(1, L - 1), max_size=2, unique=True).map(lambda c: tuple(sorted(c))),
    kinds=st.tuples(st.sampled_from([(A, 1), (A, 2), (V, 2), (V, 4)]), st.sampled_from([(A, 1), (V, 2), (V, 4)])),
    dps=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    per=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    zone_b=st.sampled_from([Z, ZB]),
)
def test_sets_sharing_a_split_are_priced_as_the_merged_plan(cuts, kinds, dps, per, zone_b):
    """Random pipelines sharing a split (GPU types, TP, replicas, microbatches, zones): the set's
    time, cost and pipeline time are ``simulate_plan``'s of the merged plan."""
    (ta, pa), (tb, pb) = kinds
    (da, db), (ma, mb) = dps, per
    pa_ = _pipe(2 * da * ma, 2, cuts, [(ReplicaGroup(ta, Z, pa, da),)] * (len(cuts) + 1), (ma,) * da)
    pb_ = _pipe(2 * db * mb, 2, cuts, [(ReplicaGroup(tb, zone_b, pb, db),)] * (len(cuts) + 1), (mb,) * db)
    merged = Plan("OPT-350", pa_.global_batch_size + pb_.global_batch_size, 2,
                  tuple(Stage(x.first_layer, x.last_layer, x.replicas + y.replicas) for x, y in zip(pa_.stages, pb_.stages, strict=True)),
                  (ma,) * da + (mb,) * db)
    est, ref = simulate_pipeline_set(PipelineSet((pa_, pb_))), simulate_plan(merged)
    assert est.iteration_time_s == pytest.approx(ref.iteration_time_s, rel=1e-12)
    assert est.cost_per_iteration_usd == pytest.approx(ref.cost_per_iteration_usd, rel=1e-12)
    assert est.pipeline_time_s == pytest.approx(ref.pipeline_time_s, rel=1e-12)
    assert est.fits == ref.fits


@pytest.mark.parametrize("pool,mbs,max_pp", [
    ({(A, Z): 1, (V, Z): 4}, (2,), 2),
    ({(A, Z): 2, (V, Z): 4}, (1, 2), 1),
])
def test_set_search_reaches_the_oracle_on_tiny_pools(pool, mbs, max_pp):
    """The oracle prices every set of two one-block pipelines (types, TP, depth, split, dp,
    microbatch size, batch share) with ``simulate_pipeline_set``; on these pools the search's
    heuristic (each type's best plan, the share re-optimized) reaches its optimum."""
    options = SearchOptions(max_pp=max_pp, microbatch_sizes=mbs)
    _, oracle = brute_force_pipeline_set(PlanRequest.build("OPT-350", 16, pool, options=options))
    res = plan_job("OPT-350", 16, pool, options=options)
    assert res.independent_pipelines is not None
    assert res.independent_pipelines.iteration_time_s == pytest.approx(oracle.iteration_time_s, rel=1e-12)


def test_a_set_file_given_where_one_plan_is_read_says_so_and_where_it_goes(tmp_path, cli_error) -> None:
    """``plan --evaluate set.json`` (and every single-plan reader): the set's ``pipelines`` key was
    reported as an unknown key of a plan; now the message says it is a set and what reads one
    (``load_plan``, the runtime's reader, reads through ``Plan.from_json``)."""
    a = _pipe(32, 2, [], [(ReplicaGroup(A, Z, 1, 2),)])
    PipelineSet((a, _pipe(32, 2, [], [(ReplicaGroup(V, Z, 1, 2),)]))).to_json(tmp_path / "set.json")
    want = r"plan\.pipelines='<list of 2 entries>': a file of independent pipelines \(a PipelineSet\), not one plan"
    with pytest.raises(InputError, match=want):
        Plan.from_json(tmp_path / "set.json")
    err = cli_error(["plan", "--evaluate", str(tmp_path / "set.json")])
    assert "heteroplan run --plan" in err and "simulate_pipeline_set" in err


def test_a_bad_set_file_is_named_with_its_field(tmp_path) -> None:
    """``PipelineSet.from_json`` named the field (``pipeline_set.pipelines[0]``) but not the file,
    as ``Plan.from_json`` and ``load_run`` do."""
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"pipelines": [None]}))
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: pipeline_set\.pipelines\[0\]='NoneType'"):
        PipelineSet.from_json(path)
