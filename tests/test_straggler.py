"""Ranks in lock-step with noisy speed: Clark's maximum of normals, in the simulator and the search."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from heteroplan.errors import InputError
from heteroplan.planner import plan_job, simulate_plan
from heteroplan.planner.model.sim_config import DEFAULT_CONFIG, SimConfig
from heteroplan.planner.model.straggler import clark_max
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.search.searcher import SearchOptions

MODEL, GPU, ZONE = "OPT-350", "A100-40", "us-central1-a"
LAYERS = 26


def _plan(bounds: tuple[int, ...], dp: int, mbs: int, gbs: int = 256, micro: tuple[int, ...] | None = None) -> Plan:
    group = ReplicaGroup(GPU, ZONE, 1, dp)
    stages = tuple(Stage(a, b, (group,)) for a, b in zip(bounds, bounds[1:], strict=False))
    return Plan(MODEL, gbs, mbs, stages, micro)


def _max_moments_by_quadrature(m1: float, s1: float, m2: float, s2: float) -> tuple[float, float]:
    """E[max] and sd(max) of two independent normals, integrating the density of the maximum."""
    a, b = stats.norm(m1, s1), stats.norm(m2, s2)

    def density(x: float) -> float:
        return a.pdf(x) * b.cdf(x) + b.pdf(x) * a.cdf(x)

    lo, hi = min(m1 - 12 * s1, m2 - 12 * s2), max(m1 + 12 * s1, m2 + 12 * s2)
    mean = integrate.quad(lambda x: x * density(x), lo, hi, limit=200)[0]
    second = integrate.quad(lambda x: x * x * density(x), lo, hi, limit=200)[0]
    return mean, math.sqrt(second - mean**2)


@pytest.mark.parametrize("m1, s1, m2, s2", [(1.0, 0.2, 1.0, 0.2), (1.0, 0.1, 1.3, 0.4), (5.0, 1.0, 2.0, 0.5), (0.0, 1.0, 0.5, 0.01)])
def test_clark_is_exact_for_two_normals(m1, s1, m2, s2) -> None:
    mean, sd = clark_max(np.array([m1, m2]), np.array([s1, s2]))
    q_mean, q_sd = _max_moments_by_quadrature(m1, s1, m2, s2)
    assert float(mean) == pytest.approx(q_mean, rel=1e-7, abs=1e-9)
    assert float(sd) == pytest.approx(q_sd, rel=1e-6)


def test_two_balanced_ranks_lose_cv_over_sqrt_pi() -> None:
    mean, _ = clark_max(np.array([2.0, 2.0]), np.array([0.3, 0.3]))
    assert float(mean) == pytest.approx(2.0 + 0.3 / math.sqrt(math.pi), rel=1e-12)


def test_clark_of_many_is_close_to_monte_carlo() -> None:
    """Clark treats running maxima as normal; for 4 ranks that is within 1% of sampling."""
    means, sds = np.array([1.0, 1.05, 0.95, 1.0]), np.array([0.2, 0.25, 0.15, 0.2])
    rng = np.random.default_rng(7)
    samples = (means + sds * rng.standard_normal((400_000, 4))).max(axis=1)
    mean, sd = clark_max(means, sds)
    assert float(mean) == pytest.approx(samples.mean(), rel=0.01)
    assert float(sd) == pytest.approx(samples.std(), rel=0.05)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 100.0), st.floats(0.0, 5.0)), min_size=1, max_size=6))
def test_clark_never_below_the_largest_mean_and_exact_without_noise(pairs) -> None:
    means = np.array([m for m, _ in pairs])
    sds = np.array([s for _, s in pairs])
    mean, sd = clark_max(means, sds)
    assert float(mean) >= means.max() - 1e-9 and float(sd) >= 0
    exact, zero = clark_max(means, np.zeros_like(sds))
    assert float(exact) == means.max() and float(zero) == 0.0


def test_one_process_or_no_noise_changes_nothing() -> None:
    noisy = replace(DEFAULT_CONFIG, straggler_cv=0.3)
    alone = _plan((0, LAYERS), 1, 4)
    assert simulate_plan(alone, config=noisy).iteration_time_s == simulate_plan(alone, config=DEFAULT_CONFIG).iteration_time_s
    wide = _plan((0, 13, LAYERS), 2, 4)
    assert simulate_plan(wide, config=replace(noisy, straggler_cv=0.0)).iteration_time_s == simulate_plan(wide, config=DEFAULT_CONFIG).iteration_time_s


@pytest.mark.parametrize("dp", [2, 4])
def test_balanced_data_parallel_replicas_wait_for_the_slowest(dp) -> None:
    """One stage, ``dp`` identical replicas: each takes ``M fb (1 + e)``; E[max] = M fb (1 + cv E[max of dp N(0,1)])."""
    cv = 0.2
    plan = _plan((0, LAYERS), dp, 4)
    base = simulate_plan(plan, config=DEFAULT_CONFIG)
    noisy = simulate_plan(plan, config=replace(DEFAULT_CONFIG, straggler_cv=cv))
    expected_max = {2: 1 / math.sqrt(math.pi), 4: 1.0293753730039641}[dp]  # E[max of dp standard normals]
    rel = 1e-12 if dp == 2 else 0.01  # Clark is exact for two, an approximation for more
    assert noisy.pipeline_time_s == pytest.approx(base.pipeline_time_s * (1 + cv * expected_max), rel=rel)
    assert noisy.iteration_time_s - noisy.pipeline_time_s == pytest.approx(base.iteration_time_s - base.pipeline_time_s)


def test_a_replica_with_slack_costs_nothing() -> None:
    """Replicas with 3 and 1 microbatches of 8: the light one is never the straggler."""
    plan = Plan(MODEL, 32, 8, (Stage(0, LAYERS, (ReplicaGroup(GPU, ZONE, 1, 2),)),), (3, 1))
    base, noisy = simulate_plan(plan, config=DEFAULT_CONFIG), simulate_plan(plan, config=replace(DEFAULT_CONFIG, straggler_cv=0.1))
    heavy = base.stage_times.pipeline.max()
    assert noisy.pipeline_time_s == pytest.approx(heavy, rel=1e-6)


def test_pipeline_stages_are_not_maximised_over() -> None:
    """One replica: the noise has no slower peer to wait for, whatever the stages."""
    plan = _plan((0, 9, 17, LAYERS), 1, 2)
    assert simulate_plan(plan, config=replace(DEFAULT_CONFIG, straggler_cv=0.3)).iteration_time_s == simulate_plan(plan, config=DEFAULT_CONFIG).iteration_time_s


def test_pipelined_replicas_spread_as_their_bottleneck_stage() -> None:
    """PP 2 x DP 2: two identical replicas, each spread cv ((M-1) fb_bottleneck + |fb|); Clark is exact for two."""
    cv = 0.15
    plan = _plan((0, 12, LAYERS), 2, 2)
    base = simulate_plan(plan, config=DEFAULT_CONFIG)
    fb, comm = base.stage_times.compute[:, 0], base.stage_times.pipeline_send[:, 0]
    M = plan.global_batch_size // (plan.microbatch_size * plan.dp)
    bottleneck = int(np.argmax(fb + 2 * (comm[:-1] + comm[1:])))
    sd = cv * ((M - 1) * fb[bottleneck] + np.sqrt((fb**2).sum()))
    noisy = simulate_plan(plan, config=replace(DEFAULT_CONFIG, straggler_cv=cv))
    assert noisy.pipeline_time_s == pytest.approx(base.pipeline_time_s + math.sqrt(2) * sd / math.sqrt(2 * math.pi), rel=1e-12)


def test_unequal_replicas_match_sampling_the_rank_noise() -> None:
    """DP 3 with 6, 6 and 4 microbatches: sample each replica's speed, average the slowest."""
    cv = 0.2
    plan = Plan(MODEL, 128, 8, (Stage(0, LAYERS, (ReplicaGroup(GPU, ZONE, 1, 3),)),), (6, 6, 4))
    t = simulate_plan(plan, config=DEFAULT_CONFIG).stage_times.pipeline
    rng = np.random.default_rng(5)
    sampled = (t * (1 + cv * rng.standard_normal((400_000, 3)))).max(axis=1).mean()
    noisy = simulate_plan(plan, config=replace(DEFAULT_CONFIG, straggler_cv=cv))
    assert noisy.pipeline_time_s == pytest.approx(sampled, rel=0.003)  # the noise adds about 12%
    assert noisy.pipeline_time_s > 1.1 * t.max()


def test_search_prices_stragglers_as_the_simulator_does() -> None:
    pool = {(GPU, ZONE): 16}
    config = replace(DEFAULT_CONFIG, straggler_cv=0.2)
    fast = plan_job(MODEL, 256, pool, options=SearchOptions(config=DEFAULT_CONFIG))
    noisy = plan_job(MODEL, 256, pool, options=SearchOptions(config=config))
    assert noisy.search_iteration_time_s == pytest.approx(noisy.iteration_time_s, rel=1e-9)
    assert noisy.iteration_time_s == pytest.approx(simulate_plan(noisy.plan, config=config).iteration_time_s, rel=1e-12)
    assert noisy.iteration_time_s > fast.iteration_time_s


def test_negative_cv_is_refused() -> None:
    with pytest.raises(InputError, match="straggler_cv"):
        SimConfig(straggler_cv=-0.1)
