"""The machine model itemised: simulate_plan's terms add up to its totals, each term matches its
formula worked by hand, and the stage tables the search prices with agree with simulate term by term."""

from __future__ import annotations

import numpy as np
import pytest

from heteroplan.perf.sailor_network import load_network
from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner import Plan, ReplicaGroup, Stage, simulate_plan
from heteroplan.planner.model.sim_config import DEFAULT_CONFIG, SimConfig
from heteroplan.planner.model.simulator import gpu_catalog
from heteroplan.planner.model.stage_tables import build_stage_table
from heteroplan.planner.model.straggler import clark_max
from heteroplan.planner.model.terms import PARAMETER_STATE_SHARES

A, V, Z, W = "A100-40", "V100-16", "us-central1-a", "us-west1-b"


def _plan(stages, mbs=4, gbs=64, model="OPT-350"):
    return Plan(model, gbs, mbs, tuple(stages))


PLANS = {
    "one GPU": _plan([Stage(0, 26, (ReplicaGroup(A, Z, 1, 1),))]),
    "two stages, DP 2, two zones": _plan([Stage(0, 13, (ReplicaGroup(A, Z, 1, 2),)), Stage(13, 26, (ReplicaGroup(A, W, 1, 2),))]),
    "ring over two zones": _plan([Stage(0, 26, (ReplicaGroup(A, Z, 2, 1), ReplicaGroup(A, W, 2, 1)))]),
    "mixed types, three stages": _plan([Stage(0, 6, (ReplicaGroup(V, Z, 4, 2),)), Stage(6, 16, (ReplicaGroup(A, Z, 1, 1), ReplicaGroup(V, Z, 2, 1))),
                                        Stage(16, 26, (ReplicaGroup(A, Z, 2, 2),))]),
}


@pytest.mark.parametrize("name", sorted(PLANS))
@pytest.mark.parametrize("cv", [0.0, 0.1])
def test_terms_add_up_to_the_totals(name, cv):
    from dataclasses import replace

    est = simulate_plan(PLANS[name], config=replace(DEFAULT_CONFIG, straggler_cv=cv))
    assert est.time_terms.total == pytest.approx(est.iteration_time_s, rel=1e-12)
    assert est.cost_terms.total == pytest.approx(est.cost_per_iteration_usd, rel=1e-12)
    assert est.time_terms.allreduce + est.time_terms.optimizer_update == pytest.approx(est.sync_time_s, rel=1e-12)
    assert (est.time_terms.straggler > 0) == (cv > 0 and est.stage_times.pipeline.size > 1)
    mem = est.stage_memory
    parts = sum(getattr(mem, n) for n in ("weights", "gradients", "optimizer_state", "activations", "working_buffers",
                                         "runtime_overhead"))
    np.testing.assert_allclose(parts, mem.total, rtol=1e-12)
    np.testing.assert_allclose(mem.total, est.stage_memory.total, rtol=0)
    assert est.memory_per_stage_gb == tuple(mem.total.max(axis=1))


def test_terms_of_one_gpu_worked_by_hand():
    """One A100, 16 microbatches: compute is 16 x (scale x (f + b) + overhead); nothing is sent."""
    prof = load_model_profile("OPT-350")
    cfg = DEFAULT_CONFIG
    est = simulate_plan(PLANS["one GPU"], config=cfg)
    f, b, _ = prof.stage_compute(A, 4, 1, 0, 26)
    t = est.time_terms
    assert t.compute == pytest.approx(16 * (cfg.compute_scale * (f + b) + cfg.microbatch_overhead_s), rel=1e-12)
    assert (t.pipeline_send, t.schedule, t.straggler, t.allreduce) == (0.0, 0.0, 0.0, 0.0)
    assert t.optimizer_update == pytest.approx(28 * prof.stage_sizes(1, 0, 26)[0] / 1555e9, rel=1e-12)
    params, act = prof.stage_sizes(1, 0, 26)
    m = est.stage_memory.at(0, 0)
    assert m.weights == pytest.approx(cfg.bytes_per_param * params / 1e9 * PARAMETER_STATE_SHARES["weights"])
    assert m.optimizer_state == pytest.approx(6 * m.weights) and m.gradients == pytest.approx(m.weights)
    assert m.activations == pytest.approx(cfg.act_bytes_per_float * act * 4 * 1 / 1e9)  # one microbatch in flight
    assert m.runtime_overhead == cfg.overhead_gb
    assert est.cost_terms.rental == pytest.approx(3.673 / 3600 * est.iteration_time_s)


def test_egress_terms_by_hand():
    """Pipeline: 2 directions x 8 microbatches x 2 replicas x the activation; ring: 2 (D-1)/D x G x tp
    on each of its two cross-zone edges, at 0.02 $/GB."""
    prof = load_model_profile("OPT-350")
    cfg = DEFAULT_CONFIG
    pipe = simulate_plan(PLANS["two stages, DP 2, two zones"], config=cfg)
    act = cfg.act_comm_bytes_per_float * prof.act_out[1][12] * 4
    assert pipe.cost_terms.pipeline_egress == pytest.approx(2 * 8 * 2 * act / 1e9 * 0.02, rel=1e-12)
    assert pipe.cost_terms.allreduce_egress == 0.0
    ring = simulate_plan(PLANS["ring over two zones"], config=cfg)
    grad = cfg.grad_bytes_per_param * prof.stage_sizes(2, 0, 26)[0]
    assert ring.cost_terms.allreduce_egress == pytest.approx(2 * (2 * (2 - 1) / 2 * grad * 2) / 1e9 * 0.02, rel=1e-12)
    assert ring.egress_gb == pytest.approx(2 * grad * 2 / 1e9, rel=1e-12)


def test_critical_path_follows_the_closed_form():
    """Two stages: compute = (M-1) f_bottleneck + sum f, send = (M-1) 2 c + 2 c (one link)."""
    est = simulate_plan(PLANS["two stages, DP 2, two zones"], config=DEFAULT_CONFIG)
    st = est.stage_times
    fb, c = st.compute[:, 0], st.pipeline_send[1, 0]
    M = 8
    assert est.time_terms.compute == pytest.approx((M - 1) * fb.max() + fb.sum(), rel=1e-12)
    assert est.time_terms.pipeline_send == pytest.approx((M - 1) * 2 * c + 2 * c, rel=1e-12)
    assert float(clark_max(st.pipeline, np.zeros_like(st.pipeline))[0]) == pytest.approx(est.pipeline_time_s)


@pytest.mark.parametrize("gpu,tp,mbs", [(A, 1, 4), (V, 2, 2), (A, 4, 8)])
def test_stage_tables_price_every_layer_range_as_simulate_does(gpu, tp, mbs):
    """The search's tables (every range at once) against simulate_plan on one-stage plans."""
    prof, net, cat = load_model_profile("OPT-350"), load_network(), gpu_catalog()
    cfg = SimConfig(overhead_gb=3.0, working_layers=2.0, logits_factor=1.5, microbatch_overhead_s=1e-3,
                    compute_scale=1.1, update_bytes_per_param=28)
    tab = build_stage_table(prof, net, gpu, Z, tp, mbs, cfg, cat[gpu].memory_bandwidth_gbs)
    for a, b in ((0, 26), (3, 11), (25, 26)):
        bounds = sorted({0, a, b, 26})
        plan = _plan([Stage(x, y, (ReplicaGroup(gpu, Z, tp, 1),)) for x, y in zip(bounds, bounds[1:], strict=False)],
                     mbs=mbs, gbs=mbs)
        est = simulate_plan(plan, config=cfg)
        s = int(a > 0)
        assert est.stage_times.compute[s, 0] == pytest.approx(tab.fb[a, b], rel=1e-12)
        assert est.stage_times.optimizer_update[s, 0] == pytest.approx(tab.update[a, b], rel=1e-12)
        assert est.stage_memory.total[s, 0] == pytest.approx(float(tab.memory(1)[a, b]), rel=1e-12)


@pytest.mark.parametrize("gpu,tp", [(A, 1), (V, 4)])
def test_balanced_step_bound_is_below_every_two_stage_split(gpu, tp):
    """The search prunes with it: no split of a 2-stage pipeline has a slowest stage below it."""
    from heteroplan.planner.model.terms import balanced_step_lower_bound_s

    prof, net, cat = load_model_profile("OPT-350"), load_network(), gpu_catalog()
    tab = build_stage_table(prof, net, gpu, Z, tp, 4, DEFAULT_CONFIG, cat[gpu].memory_bandwidth_gbs)
    L = prof.num_layers
    bound = balanced_step_lower_bound_s([2], [float(tab.fb[0, L])])
    slowest = [max(tab.fb[0, b], tab.fb[b, L]) for b in range(1, L)]
    assert min(slowest) >= bound * (1 - 1e-12)
    assert min(slowest) <= 1.2 * bound  # and it is not far off: OPT-350's layers are even
