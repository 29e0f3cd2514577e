"""Transfers of the simulator against hand-computed cases, and constants per platform.

A toy network with constant bandwidth curves (``bw(n) = c`` GB/s at every message size) makes
every transfer time a division by hand: one GPU alone gets ``c1``; a node with one NIC per GPU
(``nic="per-gpu"``) gives ``k`` concurrent senders ``k c1`` in all, a node whose GPUs share one
NIC (``nic="shared"``) gives them ``c1`` in all; zone ``b`` is reached at ``cz``.
"""

from __future__ import annotations

import logging
import math

import pytest

from heteroplan.cluster import GPUType
from heteroplan.errors import InputError
from heteroplan.perf.sailor_network import NetworkModel
from heteroplan.planner import Plan, ReplicaGroup, Stage, plan_job, simulate_plan
from heteroplan.planner.model.comm import allreduce_s, pipeline_bytes, pipeline_send_s
from heteroplan.planner.model.sim_config import (
    SHIPPED_PLATFORMS,
    UNCALIBRATED_CONFIG,
    PlatformConfigs,
    SimConfig,
    as_platforms,
    load_platforms,
    write_platform,
)
from heteroplan.planner.model.simulator import stage_memory_gb
from heteroplan.planner.notes import NoteKind

C1, CZ = 2.0, 0.5  # GB/s
ONCE, REPLICATED = SimConfig(), SimConfig(replicated_tp_sends=1.0)


def _entry(gbs: float) -> list:
    return [[0.0, 0.0, gbs], 1e15]


def _network(nic: str) -> NetworkModel:
    ks = (1, 2, 4, 8)
    agg = {k: C1 * (k if nic == "per-gpu" else 1) for k in ks}
    homo = {"inter": {"T": {str(k): _entry(agg[k]) for k in ks}}}
    cross = {str(k): {"b": {"T": {str(k): _entry(CZ * (k if nic == "per-gpu" else 1))}}} for k in ks}
    multi = {"a": {"T": cross}, "b": {"T": {str(k): {"a": {"T": {str(k): _entry(CZ)}}} for k in ks}}}
    return NetworkModel(homo, multi, {"a": {"b": 0.01}, "b": {"a": 0.01}})


A, B = ("T", "a"), ("T", "b")
N = 8e6  # bytes of one activation


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("nic", ["per-gpu", "shared"])
def test_activation_crossing_once_is_one_flow_of_n_bytes(tp, nic) -> None:
    # Sailor's runtime: n bytes cross once as one flow, at one GPU's bandwidth, whatever tp
    assert float(pipeline_send_s(_network(nic), A, A, tp, N, ONCE)) == pytest.approx(N / 1e9 / C1)
    assert pipeline_bytes(N, tp, ONCE) == N


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_replicated_sends_cost_tp_copies_through_a_shared_nic(tp) -> None:
    # heteroplan's runtime: every TP rank sends the whole activation; tp flows of n bytes
    shared = float(pipeline_send_s(_network("shared"), A, A, tp, N, REPLICATED))
    per_gpu = float(pipeline_send_s(_network("per-gpu"), A, A, tp, N, REPLICATED))
    assert shared == pytest.approx(tp * N / 1e9 / C1)  # one NIC carries tp * n
    assert per_gpu == pytest.approx(N / 1e9 / C1)  # each rank its own NIC
    assert pipeline_bytes(N, tp, REPLICATED) == tp * N


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_transfer_across_zones_uses_the_zone_pair_link_and_its_latency(tp) -> None:
    cfg = SimConfig(transfer_latency_s=0.003)
    assert float(pipeline_send_s(_network("shared"), A, B, tp, N, cfg)) == pytest.approx(0.003 + N / 1e9 / CZ)
    rep = SimConfig(replicated_tp_sends=1.0)
    assert float(pipeline_send_s(_network("shared"), A, B, tp, N, rep)) == pytest.approx(tp * N / 1e9 / CZ)


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("nic", ["per-gpu", "shared"])
def test_ring_allreduce_shares_the_node_among_its_tp_rings(tp, nic) -> None:
    g, d = 4e8, 4  # bytes per GPU, replicas
    per_ring = (tp * C1 if nic == "per-gpu" else C1) / tp  # GB/s each of the tp concurrent rings gets
    expect = 2 * (d - 1) * (g / d) / 1e9 / per_ring
    got = float(allreduce_s(_network(nic), {(A, A)}, tp, d, g, ONCE))
    assert got == pytest.approx(expect)
    assert float(allreduce_s(_network(nic), {(A, A)}, tp, 1, g, ONCE)) == 0.0


def test_ring_over_zones_runs_at_its_slowest_edge_and_buckets_pay_their_latency() -> None:
    g, d, alpha = 4e8, 4, 1e-3
    cfg = SimConfig(allreduce_latency_s=alpha, allreduce_bucket_bytes=1e8)
    got = float(allreduce_s(_network("shared"), {(A, A), (A, B), (B, A)}, 1, d, g, cfg))
    buckets = 4  # 4e8 bytes in 1e8-byte buckets, each a ring of 2 (D-1) steps
    assert got == pytest.approx(buckets * 2 * (d - 1) * (alpha + 1e8 / d / 1e9 / CZ))


def _two_stage(tp: int, zone2: str = "a", gpu: str = "T") -> Plan:
    return Plan("OPT-350", 64, 2, (Stage(0, 13, (ReplicaGroup(gpu, "a", tp, 1),)),
                                   Stage(13, 26, (ReplicaGroup(gpu, zone2, tp, 1),))))


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_simulate_charges_the_formula_and_bills_cross_zone_bytes(tp) -> None:
    from heteroplan.perf.sailor_profiles import load_model_profile

    real = load_model_profile("OPT-350")
    profile = type(real)(real.name, real.num_layers, real.params, real.act_out, real.act_mem,
                         {("T", m, t): v for (g, m, t), v in real.compute.items() if g == "RTX-3090"})
    if not profile.has("T", 2, tp):
        pytest.skip(f"no RTX-3090 profile at tp {tp}")
    types = {"T": GPUType("T", 96, 8, 1.0)}
    n = 4 * real.act_out[tp][12] * 2
    for cfg, copies in ((ONCE, 1), (REPLICATED, tp)):
        sim = simulate_plan(_two_stage(tp, "b"), profile=profile, network=_network("shared"), gpu_types=types, config=cfg)
        assert sim.stage_times.pipeline_send[1, 0] == pytest.approx(copies * n / 1e9 / CZ)
        assert sim.egress_gb == pytest.approx(2 * copies * n * 32 / 1e9)  # act + grad, 32 microbatches


def test_a_gpu_type_without_calibration_uses_the_default_and_says_so(caplog) -> None:
    caplog.set_level(logging.INFO, logger="heteroplan.planner.api")  # logged at INFO (quiet unless asked)
    plan = Plan("OPT-350", 64, 2, (Stage(0, 26, (ReplicaGroup("A100-40", "us-central1-a", 1, 1),)),))
    assert "A100-40" not in SHIPPED_PLATFORMS.platforms
    sim = simulate_plan(plan)
    assert sim.uncalibrated == ("A100-40",)
    chosen = simulate_plan(plan, config=UNCALIBRATED_CONFIG)  # the same constants, chosen: nothing to report
    assert (sim.iteration_time_s, sim.memory_per_stage_gb) == (chosen.iteration_time_s, chosen.memory_per_stage_gb)
    assert chosen.uncalibrated == ()
    result = plan_job("OPT-350", 64, {("A100-40", "us-central1-a"): 4})
    assert result.uncalibrated_gpu_types == ("A100-40",)
    assert [n.kind for n in result.notes] == [NoteKind.UNCALIBRATED] and "A100-40" in result.notes[0].message
    assert result.to_dict()["uncalibrated_gpu_types"] == ["A100-40"] and "A100-40" in result.describe().splitlines()[-1]
    assert "uncalibrated" in caplog.text
    gh = plan_job("OPT-350", 64, {("GH-96", "us-central1-a"): 4})
    assert gh.uncalibrated_gpu_types == () and not gh.notes and gh.to_dict()["notes"] == []


def test_a_plan_mixing_gpu_types_uses_each_types_own_constants() -> None:
    from heteroplan.perf.sailor_profiles import load_model_profile

    profile = load_model_profile("OPT-350")
    gh, rtx = SHIPPED_PLATFORMS.for_gpu("GH-96"), SHIPPED_PLATFORMS.for_gpu("RTX-3090")
    assert gh != rtx
    plan = Plan("OPT-350", 64, 2, (Stage(0, 13, (ReplicaGroup("RTX-3090", "us-central1-a", 2, 1),)),
                                   Stage(13, 26, (ReplicaGroup("GH-96", "us-central1-a", 2, 1),))))
    sim = simulate_plan(plan)
    assert sim.memory_per_stage_gb == pytest.approx((stage_memory_gb(profile, 2, 0, 13, 2, 2, rtx),
                                                  stage_memory_gb(profile, 2, 13, 26, 2, 1, gh)))
    f, b, _ = profile.stage_compute("RTX-3090", 2, 2, 0, 13)
    assert sim.stage_times.compute[0, 0] == pytest.approx(max(rtx.compute_scale * (f + b) + rtx.microbatch_overhead_s, 0))
    assert sim.uncalibrated == ()


def test_calibration_of_a_user_platform_is_written_as_a_table_row(tmp_path) -> None:
    assert load_platforms(tmp_path).uncalibrated(["cpu"]) == ("cpu",)  # nothing calibrated yet
    one = SimConfig(compute_scale=1.5, replicated_tp_sends=1.0)
    write_platform(tmp_path, "cpu", one, fitted_on="4 plans")
    SimConfig(compute_scale=0.7).write(tmp_path, "gpu0")  # a second platform, the first kept
    table = load_platforms(tmp_path)
    assert table.for_gpu("cpu") == one and table.for_gpu("gpu0").compute_scale == 0.7
    assert table.uncalibrated(["cpu", "gpu0", "other"]) == ("other",)
    assert PlatformConfigs.from_dict(table.to_dict(), table.default) == table


def test_shipped_table_has_plausible_constants_for_both_platforms() -> None:
    for gpu in ("GH-96", "RTX-2080", "RTX-3090", "Titan-RTX"):
        c = SHIPPED_PLATFORMS.for_gpu(gpu)
        assert 0.5 <= c.compute_scale <= 2.0 and 0 <= c.overhead_gb <= 16
        assert c.replicated_tp_sends == 0  # measured with Sailor's runtime
    assert as_platforms(ONCE).for_gpu("anything") == ONCE
    assert math.isclose(SHIPPED_PLATFORMS.for_gpu("RTX-2080").compute_scale, SHIPPED_PLATFORMS.for_gpu("Titan-RTX").compute_scale)


def test_a_fused_optimizer_step_is_priced_by_memory_bandwidth() -> None:
    """GH200 and MIT ran DeepSpeed's FusedAdam on fp32 weights: one memory-bound pass of 28 bytes
    per parameter (read weight, gradient and two moments, write three). OPT-350 on one GH-96 at TP 4
    (no all-reduce): the update is 28 x parameters per GPU / 4000 GB/s; a platform without the
    constant (and a GPU type without a bandwidth) keeps the profile's measured update."""
    from heteroplan.perf.sailor_profiles import load_model_profile
    from heteroplan.planner.model.simulator import gpu_catalog

    plan = Plan("OPT-350", 64, 4, (Stage(0, 26, (ReplicaGroup("GH-96", "us-central1-a", 4, 1),)),))
    profile = load_model_profile("OPT-350")
    params = profile.stage_sizes(4, 0, 26)[0]
    assert SHIPPED_PLATFORMS.for_gpu("GH-96").update_bytes_per_param == 28
    assert simulate_plan(plan).sync_time_s == pytest.approx(28 * params / 4000e9, rel=1e-12)  # about 0.58 ms
    profiled = profile.stage_compute("GH-96", 4, 4, 0, 26)[2]
    assert simulate_plan(plan, config=UNCALIBRATED_CONFIG).sync_time_s == pytest.approx(profiled, rel=1e-12)  # 11.7 ms
    unknown = {**gpu_catalog(), "GH-96": GPUType("GH-96", 96, 4, 11.06)}  # no bandwidth given
    assert simulate_plan(plan, gpu_types=unknown).sync_time_s == pytest.approx(profiled, rel=1e-12)
    with pytest.raises(InputError, match="update_bytes_per_param"):
        SimConfig(update_bytes_per_param=-1.0)


POOLS = [
    {("RTX-2080", "us-central1-a"): 16},
    {("RTX-3090", "us-central1-a"): 8, ("RTX-2080", "us-central1-a"): 16},
    {("Titan-RTX", "us-central1-a"): 8, ("RTX-2080", "us-central1-a"): 8},
    {("GH-96", "us-central1-a"): 4, ("RTX-3090", "us-central1-a"): 8},
    {("GH-96", "us-central1-a"): 8, ("A100-40", "us-central1-a"): 8},
]


@pytest.mark.parametrize("objective", ["throughput", "cost"])
@pytest.mark.parametrize("pool", POOLS, ids=lambda p: "+".join(f"{n}x{t}" for (t, _), n in p.items()))
def test_every_plan_the_search_returns_fits_memory_under_per_platform_constants(pool, objective) -> None:
    from heteroplan.planner.model.simulator import gpu_catalog

    catalog = gpu_catalog()
    res = plan_job("OPT-350", 64, pool, objective)
    sim = simulate_plan(res.plan)
    assert res.iteration_time_s == pytest.approx(sim.iteration_time_s, rel=1e-9)
    assert res.search_iteration_time_s == pytest.approx(sim.iteration_time_s, rel=1e-9)
    for mem, stage in zip(sim.memory_per_stage_gb, res.plan.stages, strict=True):
        for g in stage.replicas:
            assert mem <= catalog[g.gpu_type].memory_gb
            assert g.tp <= catalog[g.gpu_type].gpus_per_node


def test_a_fit_that_stops_at_the_end_of_a_plausible_range_is_reported(caplog) -> None:
    from heteroplan.planner.model.calibration import BOUNDS, fit_sim_config

    plans = [Plan("OPT-350", 64, m, (Stage(0, 26, (ReplicaGroup("GH-96", "us-central1-a", 4, 1),)),)) for m in (1, 2, 4)]
    truth = SimConfig(compute_scale=6.0)  # beyond the plausible 0.25-4
    measured = [simulate_plan(p, config=truth).iteration_time_s for p in plans]
    fit = fit_sim_config(plans, measured, constants=("compute_scale",), base=SimConfig())
    assert fit.at_bound == ("compute_scale",) and fit.config.compute_scale == pytest.approx(BOUNDS["compute_scale"][1])
    assert "plausible range" in fit.describe() and "compute_scale" in caplog.text
    inside = fit_sim_config(plans, [simulate_plan(p, config=SimConfig(compute_scale=1.5)).iteration_time_s for p in plans],
                            constants=("compute_scale",), base=SimConfig())
    assert inside.at_bound == () and inside.config.compute_scale == pytest.approx(1.5, rel=1e-4)
