"""The recipe for a new sync cost term (docs/sailor.md, "Adding a cost term"), followed once: a toy
collective of a fixed 0.25 s added in its one place (``planner/model/sync.py``'s ``ring_sync_s``)
changes the simulator's estimate and the search's own pricing by exactly that, and both still agree."""

from __future__ import annotations

import pytest

from heteroplan.perf.sailor_network import load_network
from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner import simulate_plan
from heteroplan.planner.model import sync
from heteroplan.planner.model.comm import allreduce_s
from heteroplan.planner.model.sim_config import DEFAULT_CONFIG
from heteroplan.planner.plan import PipelineBlock
from heteroplan.planner.request import PlanRequest
from heteroplan.planner.search.searcher import Searcher

A = "A100-40"
ZA, ZB = "us-central1-a", "us-central1-b"
OPT = load_model_profile("OPT-350")
TOY_S = 0.25  # seconds of the toy collective, per stage with two or more replicas


def _add_toy_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 1 of the recipe: the new term in the sync's one place (here wrapped, not edited)."""
    original = sync.ring_sync_s

    def ring_sync_s(network, links, tp, replicas, grad_bytes, config, gathered_weight_bytes=None):
        seconds = original(network, links, tp, replicas, grad_bytes, config, gathered_weight_bytes)
        return seconds + (TOY_S if replicas > 1 else 0.0)

    monkeypatch.setattr(sync, "ring_sync_s", ring_sync_s)


# (pool, spread): two stages of four TP-1 replicas in one zone, and the same ring across two zones
CASES = [
    ({(A, ZA): 8}, None),
    ({(A, ZA): 4, (A, ZB): 4}, ((ZA, 2), (ZB, 2))),
]


@pytest.mark.parametrize("pool,spread", CASES)
def test_toy_sync_term_changes_simulator_and_search_by_exactly_its_value(monkeypatch, pool, spread):
    blocks, mbs, dp = [PipelineBlock((A, ZA), 1, 2)], 4, 4

    def priced():
        cand = Searcher(PlanRequest.build("OPT-350", 64, pool, "throughput")).evaluate(blocks, mbs, dp, spread)
        assert cand is not None
        return cand, simulate_plan(cand.plan, profile=OPT)

    cand, est = priced()
    _add_toy_term(monkeypatch)
    toy_cand, toy_est = priced()

    assert toy_cand.plan == cand.plan  # a constant on every stage's sync moves no split
    assert toy_est.iteration_time_s == pytest.approx(est.iteration_time_s + TOY_S, rel=1e-12)
    assert toy_est.time_terms.allreduce == pytest.approx(est.time_terms.allreduce + TOY_S, rel=1e-12)
    assert toy_est.stage_times.allreduce == pytest.approx(est.stage_times.allreduce + TOY_S, rel=1e-12)
    assert toy_est.time_terms.total == pytest.approx(toy_est.iteration_time_s, rel=1e-12)  # the terms still add up
    # the search prices through the same place: its own time moves by the same amount and agrees with simulate
    assert toy_cand.iteration_time == pytest.approx(cand.iteration_time + TOY_S, rel=1e-12)
    assert toy_cand.iteration_time == pytest.approx(toy_est.iteration_time_s, rel=1e-9)
    assert cand.iteration_time == pytest.approx(est.iteration_time_s, rel=1e-9)
    # money: the rental grows with the time; the term sends no bytes, so egress is unchanged
    assert toy_est.cost_terms.allreduce_egress == est.cost_terms.allreduce_egress
    assert toy_est.cost_terms.rental == pytest.approx(est.cost_terms.rental * toy_est.iteration_time_s / est.iteration_time_s,
                                                      rel=1e-12)


def test_one_replica_pays_no_ring(monkeypatch):
    """The toy term, like every ring collective, costs nothing without a ring (one replica)."""
    cand = Searcher(PlanRequest.build("OPT-350", 64, {(A, ZA): 8}, "throughput")).evaluate(
        [PipelineBlock((A, ZA), 1, 2)], 4, 1)
    before = simulate_plan(cand.plan, profile=OPT)
    _add_toy_term(monkeypatch)
    assert simulate_plan(cand.plan, profile=OPT).iteration_time_s == before.iteration_time_s


# ----------------------------------------------------------- the assembled terms against hand values
def test_ring_sync_is_the_gradients_allreduce_plus_zero1_gather_and_inf_without_a_range():
    net, cfg, links = load_network(), DEFAULT_CONFIG, {((A, ZA), (A, ZA))}
    grad, weights = 2e8, 4e8
    plain = float(sync.ring_sync_s(net, links, 1, 4, grad, cfg))
    sharded = float(sync.ring_sync_s(net, links, 1, 4, grad, cfg, weights))
    assert plain == pytest.approx(float(allreduce_s(net, links, 1, 4, grad, cfg)), rel=1e-15)
    # the all-gather of the fp32 weights is timed as an all-reduce of half their bytes
    assert sharded - plain == pytest.approx(float(allreduce_s(net, links, 1, 4, weights / 2, cfg)), rel=1e-12)
    assert float(sync.ring_sync_s(net, links, 1, 1, grad, cfg, weights)) == 0.0  # one replica: no ring
    matrix = sync.ring_sync_s(net, links, 1, 4, [grad, float("inf")], cfg, [weights, float("inf")])
    assert matrix[0] == pytest.approx(sharded, rel=1e-15) and matrix[1] == float("inf")
    assert sync.stage_sync_s(plain, 0.5) == plain + 0.5


def test_ring_and_boundary_egress_bill_only_edges_across_zones():
    net = load_network()
    edges = sync.ring_edges([(A, ZA), (A, ZA), (A, ZB)])
    assert edges == [((A, ZA), (A, ZA)), ((A, ZA), (A, ZB)), ((A, ZB), (A, ZA))]
    sent, usd = sync.ring_egress(net, edges, 3, 2, 1e9)
    per_edge = 2 * (3 - 1) / 3 * 1e9 * 2  # 2 (D-1)/D of the bytes per rank, tp = 2 rings
    assert sent == pytest.approx(2 * per_edge, rel=1e-15)
    assert usd == pytest.approx(per_edge / 1e9 * (net.egress_per_gb(ZA, ZB) + net.egress_per_gb(ZB, ZA)), rel=1e-12)
    assert sync.ring_egress(net, edges, 1, 2, 1e9) == (0.0, 0.0)
    assert sync.ring_bytes(1e9, 4e8) == 1e9 + 2e8 and sync.ring_bytes(1e9) == 1e9
    assert sync.boundary_egress(net, ZA, ZA, 1e6, 1, 8, DEFAULT_CONFIG) == (0.0, 0.0)
    sent, usd = sync.boundary_egress(net, ZA, ZB, 1e6, 1, 8, DEFAULT_CONFIG)
    assert sent == 2 * 8 * 1e6  # each microbatch's activation forward and its gradient back
    assert usd == pytest.approx(sent / 1e9 * net.egress_per_gb(ZA, ZB), rel=1e-15)
