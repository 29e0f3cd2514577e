"""Pollux's solve (issue 32): ``mode="auto"`` keeps LP + rounding only within ``mip_gap`` of the
optimum, every round's gap reaches the simulation result, and ``mode="milp"`` is the former solve."""

from __future__ import annotations

import pytest

import heteroplan.policies.pollux as pollux_module
from heteroplan.cluster import preset
from heteroplan.errors import InputError
from heteroplan.policies.registry import make_policy
from heteroplan.policies.sia_solve import solve_sia
from heteroplan.sim import simulate
from heteroplan.workload.sia import bundled_workload


def _recorded_run(monkeypatch: pytest.MonkeyPatch, name: str, **options: object):
    """Simulate the first 40 jobs of philly workload 1 for 8 h; every round's problem and the policy's answer."""
    rounds = []
    real_solve = pollux_module.solve_sia

    def solve(problem, *args, **kwargs):
        result = real_solve(problem, *args, **kwargs)
        rounds.append((problem, result))
        return result

    monkeypatch.setattr(pollux_module, "solve_sia", solve)
    jobs = bundled_workload("philly/workload-1")[:40]
    result = simulate(jobs, preset("sia-64"), make_policy(name, **options), max_time=8 * 3600.0)
    return result, rounds


@pytest.mark.parametrize("name", ["pollux", "pollux-sia"])
def test_auto_answers_every_round_within_the_requested_gap_of_the_optimum(monkeypatch, name):
    result, rounds = _recorded_run(monkeypatch, name)
    policy_gap = make_policy(name).mip_gap
    assert len(rounds) > 50
    assert {r.mode for _, r in rounds} >= {"lp-round"}  # the relaxation answers (most rounds)
    for problem, answer in rounds:
        exact = solve_sia(problem, "milp", mip_gap=0.0)
        assert answer.gap <= policy_gap + 1e-12
        # Pollux minimizes sum of speed-up ** -1 (+ lam per job without GPUs)
        assert answer.objective >= exact.objective - 1e-9 * abs(exact.objective)
        assert answer.objective - exact.objective <= policy_gap * abs(answer.objective) + 1e-9
    # the simulation reports the gap of every round in which the policy solved
    gaps = [g for g in result.solve_gaps if g is not None]
    assert len(result.solve_gaps) == result.rounds
    assert gaps == pytest.approx([r.gap for _, r in rounds])


def test_milp_mode_solves_every_round_exactly(monkeypatch):
    _, rounds = _recorded_run(monkeypatch, "pollux", mode="milp")
    assert {r.mode for _, r in rounds} == {"milp"}
    for problem, answer in rounds[::10]:
        exact = solve_sia(problem, "milp", mip_gap=0.0)
        assert answer.objective - exact.objective <= 1e-3 * abs(answer.objective) + 1e-9


def test_policies_without_a_solve_report_no_gap():
    jobs = bundled_workload("philly/workload-1")[:10]
    result = simulate(jobs, preset("sia-64"), make_policy("gavel"), max_time=3600.0)
    assert result.rounds > 0 and result.solve_gaps == (None,) * result.rounds


@pytest.mark.parametrize(("field", "value"), [("mode", "exact"), ("threads", 0), ("auto_limit", -1), ("mip_gap", -0.1)])
def test_bad_solve_options_name_the_field(field, value):
    with pytest.raises(InputError) as err:
        make_policy("pollux", **{field: value})
    assert err.value.field == field
