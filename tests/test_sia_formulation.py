"""Sia's ILP against brute-force enumeration, and the LP-rounding mode against its bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import heteroplan.formulations.sia as sia_formulation
from heteroplan.cluster import Cluster, GPUType, preset
from heteroplan.errors import InputError
from heteroplan.formulations.sia import ConfigSet, build_sia_model, restart_factor
from heteroplan.policies.sia_solve import solve_sia
from heteroplan.solvers import solve

TINY = Cluster.from_counts((GPUType("a", 16, 2), GPUType("b", 16, 4)), {"a": 4, "b": 4})


def brute_force(G, configs, cap, current, restart, pinned, p, lam):
    J, C = G.shape
    valid = G > 0
    base = np.where(valid, G, np.inf).min(axis=1)
    best = np.inf
    for choice in itertools.product(range(-1, C), repeat=J):
        used = np.zeros(len(cap))
        total = 0.0
        ok = True
        for j, c in enumerate(choice):
            if pinned[j] and c != current[j]:
                ok = False
                break
            if c < 0:
                total += lam
                continue
            if not valid[j, c]:
                ok = False
                break
            n = G[j, c] / base[j]
            if current[j] >= 0 and c != current[j]:
                n *= restart[j]
            if n <= 0:
                ok = False
                break
            used[configs.type_index[c]] += configs.num_gpus[c]
            total += n**p
        if ok and np.all(used <= cap):
            best = min(best, total)
    return best


def test_configs_follow_sia_rules() -> None:
    cs = ConfigSet.from_cluster(preset("sia-64"))
    aws = cs.num_gpus[cs.type_names == "aws"].tolist()
    assert aws == [1, 2, 4, 8, 12, 16, 20, 24]  # 1,2,4 in a 4-GPU node, then whole nodes
    rtx = cs.num_gpus[cs.type_names == "rtx"].tolist()
    assert rtx == [1, 2, 4, 8, 16, 24]
    assert cs.num_nodes[cs.type_names == "rtx"].tolist() == [1, 1, 1, 1, 2, 3]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), J=st.integers(1, 3), p=st.sampled_from([-0.5, -1.0]))
def test_milp_equals_brute_force(seed: int, J: int, p: float) -> None:
    rng = np.random.default_rng(seed)
    configs = ConfigSet.from_cluster(TINY)
    C = len(configs)
    G = rng.uniform(1, 10, (J, C)) * configs.num_gpus ** rng.uniform(0.3, 1.0, (J, 1))
    G[rng.random((J, C)) < 0.2] = 0.0
    cap = np.array([4.0, 4.0])
    current = np.where(rng.random(J) < 0.5, rng.integers(0, C, J), -1)
    current[(current >= 0) & (G[np.arange(J), np.maximum(current, 0)] <= 0)] = -1
    restart = rng.uniform(0, 1, J)
    pinned = np.zeros(J, dtype=bool)
    problem = build_sia_model(G, configs, cap, current, restart, pinned, p, 1.1)
    res = solve_sia(problem, "milp", mip_gap=0)
    expect = brute_force(G, configs, cap, current, restart, pinned, p, 1.1)
    assert res.objective == pytest.approx(expect, rel=1e-7)
    used = np.bincount(configs.type_index[res.choice[res.choice >= 0]],
                       weights=configs.num_gpus[res.choice[res.choice >= 0]], minlength=2)
    assert np.all(used <= cap)
    rounded = solve_sia(problem, "lp-round")
    assert rounded.bound <= expect + 1e-7 <= rounded.objective + 2e-7  # LP bound <= optimum <= rounded


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), J=st.integers(1, 3), p=st.sampled_from([-0.5, -1.0, 0.5]),
       one_type=st.booleans())
def test_knapsack_bound_between_lp_bound_and_brute_force(seed: int, J: int, p: float, one_type: bool) -> None:
    rng = np.random.default_rng(seed)
    configs = ConfigSet.from_cluster(TINY)
    C = len(configs)
    G = rng.uniform(1, 10, (J, C)) * configs.num_gpus ** rng.uniform(0.3, 1.0, (J, 1))
    G[rng.random((J, C)) < 0.2] = 0.0
    if one_type:
        G[:, configs.type_index == 1] = 0.0
    cap = np.array([float(rng.integers(1, 5)), 4.0])
    current = np.where(rng.random(J) < 0.5, rng.integers(0, C, J), -1)
    current[(current >= 0) & (G[np.arange(J), np.maximum(current, 0)] <= 0)] = -1
    restart = rng.uniform(0, 1, J)
    pinned = (current >= 0) & (rng.random(J) < 0.3)
    problem = build_sia_model(G, configs, cap, current, restart, pinned, p, 1.1)
    if problem.model.num_vars == 0:
        return
    sign = 1.0 if p < 0 else -1.0  # minimization form: bounds from below
    if p < 0:
        expect = brute_force(G, configs, cap, current, restart, pinned, p, 1.1)
    else:
        expect = solve_sia(problem, "milp", mip_gap=0).objective
    if not np.isfinite(expect):  # pinned jobs over capacity
        return
    # Any prices >= 0 give a valid bound ...
    bound = problem.knapsack_bound(rng.uniform(0, 1, 2))
    assert sign * bound <= sign * expect + 1e-7
    # ... and the LP's duals one at least as tight as the LP's
    lp = solve(problem.model, relax=True, algorithm="simplex")
    bound = problem.knapsack_bound(sign * -lp.duals["capacity"])
    assert sign * lp.objective - 1e-7 <= sign * bound <= sign * expect + 1e-7
    if one_type:  # one knapsack, nothing relaxed: the dynamic program is exact
        assert bound == pytest.approx(expect, rel=1e-9, abs=1e-9)


def test_lp_round_is_near_optimal_at_scale() -> None:
    rng = np.random.default_rng(0)
    cluster = preset("sia-64")
    configs = ConfigSet.from_cluster(cluster)
    J = 120
    G = rng.uniform(1, 5, (J, 1)) * configs.num_gpus ** rng.uniform(0.2, 0.9, (J, 1)) * rng.uniform(0.5, 2, (1, 3))[:, configs.type_index]
    cap = np.array([cluster.capacity()[t] for t in configs.gpu_types], dtype=float)
    problem = build_sia_model(G, configs, cap, p=-0.5)
    exact = solve_sia(problem, "milp", mip_gap=0)
    rounded = solve_sia(problem, "lp-round")
    assert rounded.objective >= exact.objective - 1e-6
    assert (rounded.objective - exact.objective) / exact.objective < 0.01
    assert rounded.bound <= exact.objective + 1e-6


def test_pinned_job_keeps_its_config_and_restart_factor() -> None:
    configs = ConfigSet.from_cluster(TINY)
    G = np.tile(configs.num_gpus.astype(float), (2, 1))
    problem = build_sia_model(G, configs, [4, 4], current=np.array([0, -1]), pinned=np.array([True, False]))
    res = solve_sia(problem, mip_gap=0)
    assert res.choice[0] == 0
    np.testing.assert_allclose(restart_factor([100, 10], [1, 0], [50, 50]), [50 / 150, 10 / 60])


def test_bad_inputs() -> None:
    configs = ConfigSet.from_cluster(TINY)
    with pytest.raises(InputError, match="goodput.shape"):
        build_sia_model(np.ones((2, 3)), configs, [4, 4])
    with pytest.raises(InputError, match="capacity"):
        build_sia_model(np.ones((2, len(configs))), configs, [4])
    with pytest.raises(InputError, match="p="):
        build_sia_model(np.ones((2, len(configs))), configs, [4, 4], p=0)
    with pytest.raises(InputError, match="mode"):
        solve_sia(build_sia_model(np.ones((1, len(configs))), configs, [4, 4]), mode="ga")


def test_sia_prices_restarts_as_the_artifact_and_spares_young_jobs() -> None:
    from heteroplan.errors import InputError
    from heteroplan.policies.base import JobState
    from heteroplan.policies.sia import SiaPolicy

    jobs = [
        JobState("c", "cifar10", 0.0, num_restarts=1, restart_delay=50.0),  # priced 30 s, pays 50 s
        JobState("b", "bert", 0.0, restart_delay=120.0),  # 100 s old: younger than its 120 s price
        JobState("r", "rigid-x", 0.0, num_restarts=1, restart_delay=10.0),  # not in the table: own delay
    ]
    np.testing.assert_allclose(SiaPolicy().restart_factors(jobs, 100.0), [70 / 130, 1.0, 90 / 110])
    np.testing.assert_allclose(SiaPolicy(young_exempt=False).restart_factors(jobs, 100.0),
                               [70 / 130, 100 / 220, 90 / 110])
    np.testing.assert_allclose(SiaPolicy(restart_prices={}, young_exempt=False).restart_factors(jobs, 100.0),
                               [50 / 150, 100 / 220, 90 / 110])
    # bert at 130 s is past its price: penalized again
    np.testing.assert_allclose(SiaPolicy().restart_factors(jobs[1:2], 130.0), [130 / 250])
    with pytest.raises(InputError, match="restart_prices"):
        SiaPolicy(restart_prices={"cifar10": -1.0})


def _improve_by_recomputing(problem, choice, used, capacity, lam, max_moves=50, pair_limit=600):
    """The local search of ``_improve`` by its definition, the oracle for its incremental, pruned
    form: each step recomputes every move's gain and GPU change from the choice alone and tries
    every ordered pair of moves at once, as a full matrix (the first improving but not fitting
    alone, the second giving back GPUs of some type, two different jobs)."""
    configs = problem.configs
    J, K = problem.num_jobs, len(capacity)
    cost = problem.utility - lam if problem.minimize else -problem.utility
    var_of = {(int(j), int(c)): v for v, (j, c) in enumerate(zip(problem.job_of, problem.config_of, strict=True))}
    # The moves: each variable (its job to its configuration), then each job to no configuration.
    jobs = np.r_[problem.job_of, np.arange(J)]
    targets = np.r_[problem.config_of, np.full(J, -1)]
    target_cost = np.r_[cost, np.zeros(J)]
    pinned = {int(j) for j in problem.job_of[problem.model.variables["x"].lb > 0.5]}
    movable = np.array([int(j) not in pinned for j in jobs])

    def gpus(config):
        """GPUs per type (rows: entries of ``config``; -1 holds none)."""
        out = np.zeros((len(config), K))
        for row, c in enumerate(config):
            if c >= 0:
                out[row, configs.type_index[c]] = configs.num_gpus[c]
        return out

    target_gpus = gpus(targets)
    for _ in range(max_moves):
        now = np.array([cost[var_of[j, int(c)]] if (j, int(c)) in var_of else 0.0 for j, c in enumerate(choice)])
        gain = np.where(movable, target_cost - now[jobs], np.inf)
        change = target_gpus - gpus(choice)[jobs]
        room = capacity + 1e-9 - used
        fits = (change <= room).all(axis=1)
        single = np.where(fits, gain, np.inf)
        best, best_gain = [int(np.argmin(single))], float(single.min())
        if len(problem.job_of) <= pair_limit:
            first = (gain < -1e-12) & ~fits
            second = np.isfinite(gain) & (change < 0).any(axis=1)
            both_fit = ((change[:, None, :] + change[None, :, :]) <= room).all(axis=2)
            ok = first[:, None] & second[None, :] & both_fit & (jobs[:, None] != jobs[None, :])
            together = np.where(ok, gain[:, None] + gain[None, :], np.inf)
            if together.min() < best_gain:
                a, b = np.unravel_index(int(np.argmin(together)), together.shape)
                best, best_gain = [int(a), int(b)], float(together[a, b])
        if not best_gain < -1e-12:
            break
        for m in best:
            used += change[m]
            choice[jobs[m]] = targets[m]
    return choice


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), J=st.integers(2, 40), p=st.sampled_from([-0.5, -1.0, 0.5]))
def test_local_search_equals_its_plain_form(seed: int, J: int, p: float) -> None:
    rng = np.random.default_rng(seed)
    cluster = preset("sia-64")
    configs = ConfigSet.from_cluster(cluster)
    C = len(configs)
    G = rng.uniform(1, 5, (J, 1)) * configs.num_gpus ** rng.uniform(0.2, 0.9, (J, 1)) \
        * rng.uniform(0.5, 2, (1, 3))[:, configs.type_index]
    G[rng.random((J, C)) < 0.5] = 0.0
    current = np.where(rng.random(J) < 0.5, rng.integers(0, C, J), -1)
    current[(current >= 0) & (G[np.arange(J), np.maximum(current, 0)] <= 0)] = -1
    pinned = (current >= 0) & (rng.random(J) < 0.2)
    cap = np.array([cluster.capacity()[t] for t in configs.gpu_types], dtype=float)
    problem = build_sia_model(G, configs, cap, current, rng.uniform(0, 1, J), pinned, p, 1.1)
    if problem.model.num_vars == 0:
        return
    # Start from a random feasible choice (pinned jobs on their configuration).
    choice = np.where(pinned, current, -1)
    used = np.bincount(configs.type_index[choice[choice >= 0]], weights=configs.num_gpus[choice[choice >= 0]],
                       minlength=3).astype(float)
    for v in rng.permutation(problem.model.num_vars):
        j, c = problem.job_of[v], problem.config_of[v]
        k = configs.type_index[c]
        if choice[j] < 0 and rng.random() < 0.5 and used[k] + configs.num_gpus[c] <= cap[k]:
            choice[j], used[k] = c, used[k] + configs.num_gpus[c]
    for pair_limit in (600, 0):
        fast = sia_formulation._improve(problem, choice.copy(), used.copy(), cap, 1.1, pair_limit=pair_limit)
        plain = _improve_by_recomputing(problem, choice.copy(), used.copy(), cap, 1.1, pair_limit=pair_limit)
        np.testing.assert_array_equal(fast, plain)
