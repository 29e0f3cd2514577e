"""The recipe for a new sync cost term (docs/sailor.md, "Adding a cost term"), followed once: a toy
collective of a fixed 0.25 s added in its one place (``planner/model/sync.py``'s ``ring_sync_s``)
changes the simulator's estimate and the search's own pricing by exactly that, and both still agree."""

from __future__ import annotations

import pytest

from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner import simulate_plan
from heteroplan.planner.model import sync
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
