"""Gavel max-min fairness LP and policy: oracle cross-checks and the priority mechanism."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from heteroplan.cluster import preset
from heteroplan.errors import InputError
from heteroplan.formulations.gavel import max_min_fairness_model, normalized_throughputs
from heteroplan.policies.gavel import GavelPolicy, solve_max_min_fairness
from heteroplan.sim.loop import simulate
from heteroplan.solvers import solve
from heteroplan.workload.gavel import generate_workload, load_throughputs
from heteroplan.workload.rigid import RigidJob, rigid_jobs_from_gavel


def linprog_oracle(tp, scale, cap):
    """Same LP written directly for scipy's linprog: variables [X.ravel(), t]."""
    num_jobs, num_types = tp.shape
    usable = (tp > 0) & (scale[:, None] <= cap[None, :])
    coef = normalized_throughputs(np.where(usable, tp, 0.0))
    n = num_jobs * num_types
    c = np.zeros(n + 1)
    c[-1] = -1.0
    rows, rhs = [], []
    for j in range(num_jobs):  # t - sum_k coef X <= 0
        r = np.zeros(n + 1)
        r[j * num_types : (j + 1) * num_types] = -coef[j]
        r[-1] = 1
        rows.append(r), rhs.append(0.0)
        r = np.zeros(n + 1)
        r[j * num_types : (j + 1) * num_types] = 1
        rows.append(r), rhs.append(1.0)
    for k in range(num_types):
        r = np.zeros(n + 1)
        r[k:n:num_types] = scale
        rows.append(r), rhs.append(cap[k])
    bounds = [(0, float(u)) for u in usable.ravel()] + [(0, None)]
    res = linprog(c, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=bounds, method="highs-ipm")
    return -res.fun


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 8), st.integers(1, 3), st.integers(0, 10_000))
def test_lp_optimum_matches_linprog(num_jobs, num_types, seed):
    rng = np.random.default_rng(seed)
    tp = rng.uniform(0.1, 10.0, (num_jobs, num_types)) * (rng.random((num_jobs, num_types)) > 0.2)
    tp[tp.max(axis=1) == 0, 0] = 1.0
    scale = rng.choice([1, 2, 4], num_jobs).astype(float)
    cap = rng.integers(4, 9, num_types).astype(float)
    sol = solve(max_min_fairness_model(tp, scale, cap), algorithm="simplex")
    assert sol.objective == pytest.approx(linprog_oracle(tp, scale, cap), rel=1e-6, abs=1e-9)
    x, level = solve_max_min_fairness(tp, scale, cap)
    assert (x.sum(axis=1) <= 1 + 1e-7).all()
    assert ((x * scale[:, None]).sum(axis=0) <= cap + 1e-6).all()
    assert (x[tp == 0] <= 1e-9).all()
    # the second stage keeps every job at (essentially) the max-min level
    levels = (x * normalized_throughputs(tp)).sum(axis=1)
    assert levels.min() >= level * (1 - 1e-5) - 1e-9


def test_known_optimum_equal_share():
    # three identical 1-GPU jobs, one type with 2 GPUs: each gets 2/3 of the time.
    x, level = solve_max_min_fairness(np.ones((3, 1)), np.ones(3), np.array([2.0]))
    assert level == pytest.approx(2 / 3)
    np.testing.assert_allclose(x[:, 0], 2 / 3, atol=1e-7)


def test_bad_input():
    with pytest.raises(InputError, match="scale_factors"):
        max_min_fairness_model(np.ones((2, 1)), np.ones(3), np.ones(1))
    with pytest.raises(InputError, match="cannot run"):
        max_min_fairness_model(np.array([[1.0, 0.0]]), np.array([4.0]), np.array([2.0, 8.0]))


def test_priorities_track_time_fractions():
    # 3 identical 1-GPU jobs on one 2-GPU type: over 30 rounds each runs ~20 rounds.
    from heteroplan.cluster import Cluster, GPUType, Node

    cluster = Cluster((GPUType("g", 16, 2),), (Node("n0", "g", 2),))
    jobs = [RigidJob(f"j{i}", 1, 1e9, 0.0, {"g": 1.0}) for i in range(3)]
    res = simulate(jobs, cluster, GavelPolicy(), round_length=10.0, max_rounds=30, record=True)
    counts = {j.job_id: sum(j.job_id in a for _, a in res.schedule) for j in jobs}
    assert all(abs(c - 20) <= 1 for c in counts.values())
    assert all(sum(a.num_gpus for a in allocs.values()) == 2 for _, allocs in res.schedule)


def test_policy_respects_capacity_on_gavel_workload():
    cluster = preset("gavel-108")
    jobs = rigid_jobs_from_gavel(generate_workload(60, 30.0, seed=3, duration_scale=0.05), load_throughputs())
    res = simulate(jobs, cluster, GavelPolicy(), record=True)  # raises on over-capacity / bad gang
    assert not res.unfinished
    for _, allocs in res.schedule:
        for a in allocs.values():
            assert "+" not in a.gpu_type  # Gavel gives one type per job per round


# -- throughputs in any unit ------------------------------------------------------------------

def _value(objective: str, x: np.ndarray, tp: np.ndarray, rem: np.ndarray, costs: np.ndarray) -> float:
    """The objective ``x`` reaches, in the base unit (steps/s, or 1/s for the makespan)."""
    rates = (x * tp).sum(axis=1)
    if objective == "max_sum_throughput":
        return float(rates.sum())
    if objective == "max_throughput_per_cost":
        return float((x * tp / costs[None, :]).sum())
    return float((rates / rem).min())  # min_makespan: 1 / the slowest job's finish time


@pytest.mark.parametrize("objective", ["max_sum_throughput", "max_throughput_per_cost", "min_makespan"])
@pytest.mark.parametrize("power", [-40, -20, 30, 50])
def test_time_fractions_are_optimal_in_any_unit_of_work(objective, power) -> None:
    """Throughputs and steps counted in units of 2**-power (epochs, FLOPs): the answer reaches the
    same optimum as in steps, to 1e-6. Throughputs of 1e-12 steps/s sat below HiGHS's tolerances
    (any feasible X was 'optimal'); at 2**50 the coefficients left its range."""
    from heteroplan.policies.gavel_lp import solve_time_fractions

    rng = np.random.default_rng(3)
    tp = rng.uniform(0.5, 20.0, (12, 3))
    rem, scale, cap, costs = rng.uniform(1e3, 1e5, 12), rng.choice([1.0, 2.0], 12), np.array([4.0, 6.0, 8.0]), \
        np.array([3.0, 1.5, 0.5])
    base = _value(objective, solve_time_fractions(objective, tp, scale, cap, rem, costs=costs), tp, rem, costs)
    f = 2.0 ** power
    x = solve_time_fractions(objective, tp * f, scale, cap, rem * f, costs=costs)
    assert (x >= -1e-9).all() and (x.sum(axis=1) <= 1 + 1e-9).all() and ((x * scale[:, None]).sum(axis=0) <= cap + 1e-9).all()
    assert _value(objective, x, tp, rem, costs) == pytest.approx(base, rel=1e-6)
