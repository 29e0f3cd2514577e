"""Simulator: accuracy against real runs, Sailor plan reading, cost and memory accounting."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from heteroplan.errors import InputError
from heteroplan.perf.sailor_network import load_network
from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner import Plan, ReplicaGroup, Stage, simulate_plan
from heteroplan.planner.model.simulator import DEFAULT_CONFIG, SHIPPED_PLATFORMS

DATA = Path(__file__).parent / "data" / "sailor"
RUNS = sorted(DATA.glob("plan_config_*.json"))
MIT_RUNS = sorted((DATA / "mit").glob("plan_config_*.json"))


def _errors() -> np.ndarray:
    rows = []
    for path in RUNS:
        real = json.loads(path.read_text())
        sim = simulate_plan(Plan.from_json(path))
        rows.append((sim.iteration_time_s / real["real"] - 1, sim.peak_memory_gb / (real["max_mem"] / 1e9) - 1))
    return np.array(rows)


def test_validation_runs_are_all_there():
    assert len(RUNS) == 15


def test_mean_error_against_real_runs_within_target():
    err = np.abs(_errors())
    mean_time, mean_mem = err.mean(axis=0)
    # Sailor reports 4.5-6% (time) and 5.6% (memory); we reach 5.8% and 0.9% on these runs.
    assert mean_time <= 0.06, mean_time
    assert mean_mem <= 0.02, mean_mem
    # no run is wildly off on memory; time outliers are the mbs=1 runs (profile noise)
    assert err[:, 1].max() < 0.05


def test_mit_runs_load_with_the_shipped_catalogue_and_pipelines_are_no_longer_overpredicted():
    """OPT-350 on RTX-3090 / RTX-2080 / Titan-RTX nodes (TP 2 and 8, mixed types in a stage):
    every TP rank sending the whole activation through the shared NIC predicted TP 8 pipelines
    up to 7.7x too slow; an activation that crosses once is within 30% on every run (13% on
    average: docs/sailor.md discusses what is left)."""
    assert len(MIT_RUNS) == 4
    errors = []
    for path in MIT_RUNS:
        real = json.loads(path.read_text())
        plan = Plan.from_json(path)
        sim = simulate_plan(plan)
        assert sim.uncalibrated == ()
        errors.append(sim.iteration_time_s / real["real"] - 1)
        replicated = simulate_plan(plan, config=replace(SHIPPED_PLATFORMS.for_gpu("RTX-2080"), replicated_tp_sends=1.0))
        if any(r.tp == 8 for s in plan.stages for r in s.replicas) and plan.pp > 1:
            assert replicated.iteration_time_s > 2 * real["real"]  # the old transfer model, TP 8 pipelines
    assert max(np.abs(errors)) < 0.3 and np.abs(errors).mean() < 0.15, errors


def test_uncalibrated_simulator_is_worse_on_memory():
    """The memory constants matter: without framework overhead the error is large."""
    raw = replace(DEFAULT_CONFIG, overhead_gb=0.0, working_layers=0.0)
    real = json.loads(RUNS[0].read_text())
    sim = simulate_plan(Plan.from_json(RUNS[0]), config=raw)
    assert sim.peak_memory_gb < 0.85 * real["max_mem"] / 1e9


def test_reads_sailor_plan_config():
    plan = Plan.from_json(DATA / "plan_config_N16_D4.json")
    assert plan.pp == 4 and plan.dp == 4 and plan.microbatch_size == 8 and plan.global_batch_size == 1024
    assert [(s.first_layer, s.last_layer) for s in plan.stages] == [(0, 5), (5, 12), (12, 19), (19, 26)]
    assert plan.stages[0].replicas == (ReplicaGroup("GH-96", "us-central1-a", 4, 4),)
    assert plan.num_gpus == 64
    # round trip through our own JSON
    assert Plan.from_dict(json.loads(plan.to_json())) == plan


def test_malformed_sailor_plan_is_a_clear_error(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"pipeline_list": [{"layers_per_stage": [[0, 1]]}], "mbs": 1}))
    with pytest.raises(InputError, match="plan"):
        Plan.from_json(bad)


def _plan(stages, mbs=4, gbs=64):
    return Plan("OPT-350", gbs, mbs, tuple(stages))


def test_single_gpu_time_is_sum_of_profiled_layers():
    prof = load_model_profile("OPT-350")
    plan = _plan([Stage(0, 26, (ReplicaGroup("A100-40", "us-central1-a", 1, 1),))], mbs=4, gbs=16)
    sim = simulate_plan(plan, config=DEFAULT_CONFIG)
    f, b, _ = prof.stage_compute("A100-40", 4, 1, 0, 26)
    # DEFAULT_CONFIG (GH200's row) prices the fused optimizer step by memory bandwidth: 28 bytes
    # per parameter over the A100-40's 1555 GB/s
    u = 28 * prof.stage_sizes(1, 0, 26)[0] / 1555e9
    expected = 4 * (DEFAULT_CONFIG.compute_scale * (f + b) + DEFAULT_CONFIG.microbatch_overhead_s) + u  # 4 microbatches, no sync, no comm
    assert sim.iteration_time_s == pytest.approx(expected, rel=1e-12)
    assert sim.cost_per_iteration_usd == pytest.approx(3.673 / 3600 * expected, rel=1e-12)


def test_pipeline_time_follows_1f1b_formula():
    prof = load_model_profile("OPT-350")
    net = load_network()
    z = "us-central1-a"
    plan = _plan([Stage(0, 10, (ReplicaGroup("A100-40", z, 1, 1),)), Stage(10, 26, (ReplicaGroup("A100-40", z, 1, 1),))])
    sim = simulate_plan(plan, config=DEFAULT_CONFIG)
    M = 16
    cfg = DEFAULT_CONFIG
    fb = [
        cfg.compute_scale * sum(prof.stage_compute("A100-40", 4, 1, a, b)[:2]) + cfg.microbatch_overhead_s
        for a, b in ((0, 10), (10, 26))
    ]
    nbytes = 4 * prof.act_out[1][9] * 4
    c = nbytes / 1e9 / net.per_gpu_bandwidth(("A100-40", z), ("A100-40", z), 1, nbytes)
    upd = max(28 * prof.stage_sizes(1, a, b)[0] / 1555e9 for a, b in ((0, 10), (10, 26)))  # fused step
    expected = (M - 1) * (max(fb) + 2 * c) + sum(fb) + 2 * c + upd
    assert sim.iteration_time_s == pytest.approx(expected, rel=1e-12)


def test_more_stages_hold_more_inflight_activations_on_first_stage():
    z = "us-central1-a"
    one = _plan([Stage(0, 26, (ReplicaGroup("A100-40", z, 1, 1),))])
    two = _plan([Stage(0, 13, (ReplicaGroup("A100-40", z, 1, 1),)), Stage(13, 26, (ReplicaGroup("A100-40", z, 1, 1),))])
    m1, m2 = simulate_plan(one).memory_per_stage_gb, simulate_plan(two).memory_per_stage_gb
    assert m2[0] < m1[0]  # half the layers...
    assert m2[0] > m2[1] - 1.0  # ...but two microbatches in flight on stage 0


def test_cross_zone_pipeline_pays_egress_and_is_slower():
    same = _plan([Stage(0, 13, (ReplicaGroup("A100-40", "us-central1-a", 1, 2),)), Stage(13, 26, (ReplicaGroup("A100-40", "us-central1-a", 1, 2),))])
    cross = _plan([Stage(0, 13, (ReplicaGroup("A100-40", "us-central1-a", 1, 2),)), Stage(13, 26, (ReplicaGroup("A100-40", "us-west1-b", 1, 2),))])
    s, c = simulate_plan(same), simulate_plan(cross)
    assert s.egress_gb == 0.0 and c.egress_gb > 0
    prof = load_model_profile("OPT-350")
    # 2 directions x 8 microbatches x 2 pipelines x activation bytes
    assert c.egress_gb == pytest.approx(2 * 8 * 2 * 4 * prof.act_out[1][12] * 4 / 1e9)
    gpu_cost = 4 * 3.673 / 3600 * c.iteration_time_s
    assert c.cost_per_iteration_usd == pytest.approx(gpu_cost + c.egress_gb * 0.02)
    assert c.iteration_time_s > s.iteration_time_s


def test_straggler_replica_sets_the_pace():
    z = "us-central1-a"
    fast = _plan([Stage(0, 26, (ReplicaGroup("A100-40", z, 4, 2),))])
    mixed = _plan([Stage(0, 26, (ReplicaGroup("A100-40", z, 4, 1), ReplicaGroup("V100-16", z, 4, 1)))])
    slow = _plan([Stage(0, 26, (ReplicaGroup("V100-16", z, 4, 2),))])
    tf, tm, ts = (simulate_plan(p).iteration_time_s for p in (fast, mixed, slow))
    assert tf < tm <= ts * 1.001


def test_unprofiled_choice_is_a_clear_error():
    plan = _plan([Stage(0, 26, (ReplicaGroup("A100-40", "us-central1-a", 8, 1),))])
    with pytest.raises(InputError, match="profile"):
        simulate_plan(plan)
    plan = _plan([Stage(0, 26, (ReplicaGroup("H100", "us-central1-a", 1, 1),))])
    with pytest.raises(InputError, match="gpu_type"):
        simulate_plan(plan)


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_every_sailor_plan_reads_consistently(path):
    raw = json.loads(path.read_text())
    plan = Plan.from_json(path)
    pipe = raw["pipeline_list"][0]
    assert plan.num_gpus == 4 * raw["N"]  # N GH200 nodes of 4 GPUs
    assert plan.pp == pipe["num_stages"] and plan.dp == pipe["dp"][0]
    assert [list(range(s.first_layer, s.last_layer)) for s in plan.stages] == pipe["layers_per_stage"]
    assert sum(plan.microbatches()) * plan.microbatch_size == raw["gbs"]


def _gpt_neo_on_v100(tp: int, pp: int, dp: int) -> Plan:
    L = load_model_profile("GPT-Neo-2.7").num_layers
    bounds = [round(i * L / pp) for i in range(pp + 1)]
    return Plan("GPT-Neo-2.7", 2048, 1, tuple(Stage(a, b, (ReplicaGroup("V100-16", "us-central1-a", tp, dp),))
                                             for a, b in zip(bounds, bounds[1:], strict=False)))


def test_a_plan_that_does_not_fit_says_so_by_how_much_and_where():
    """GPT-Neo-2.7 on 8 V100-16 without TP (the issue's example): 70 GB on a 16 GB GPU."""
    sim = simulate_plan(_gpt_neo_on_v100(tp=1, pp=1, dp=8))
    fit = sim.memory_fit
    assert not sim.fits and not fit.fits
    assert (fit.stage, fit.gpu_type, fit.capacity_gb) == (0, "V100-16", 16.0)
    assert fit.need_gb == pytest.approx(sim.peak_memory_gb)
    assert fit.over_gb == pytest.approx(sim.peak_memory_gb - 16.0) and fit.over_gb > 50
    assert "DOES NOT FIT" in sim.describe() and "stage 0" in sim.describe()


def test_memory_fit_names_the_tightest_stage_and_agrees_with_the_per_replica_memory():
    for tp, pp, dp in ((1, 2, 4), (4, 4, 2), (4, 8, 1), (2, 17, 1)):
        sim = simulate_plan(_gpt_neo_on_v100(tp, pp, dp))
        mem, cap = sim.stage_memory.total, sim.stage_memory.capacity
        assert sim.fits == bool((mem <= cap).all())
        assert sim.memory_fit.stage == int(np.argmax((mem - cap).max(axis=1)))
        assert sim.memory_fit.headroom_gb == pytest.approx(float((cap - mem).min()))
