"""Simulator constants: the per-transfer latency, sim_config.json, and refitting them to measurements."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from heteroplan.errors import InputError
from heteroplan.perf.sailor_profiles import DATA_DIR
from heteroplan.planner import plan_job, simulate_plan
from heteroplan.planner.model.calibration import fit_sim_config, relative_errors, time_constants_for
from heteroplan.planner.model.sim_config import (
    DEFAULT_CONFIG,
    PROFILED_CONFIG,
    SimConfig,
    load_sim_config,
)
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.search.searcher import SearchOptions

MODEL, GPU, ZONE = "OPT-350", "A100-40", "us-central1-a"
LAYERS = 26  # OPT-350's plan layers in the shipped profile


def _plan(pp: int, dp: int, mbs: int, gbs: int = 256) -> Plan:
    bounds = np.linspace(0, LAYERS, pp + 1).round().astype(int)
    group = ReplicaGroup(GPU, ZONE, 1, dp)
    return Plan(MODEL, gbs, mbs, tuple(Stage(int(a), int(b), (group,)) for a, b in zip(bounds, bounds[1:], strict=False)))


PLANS = {f"PP{pp} DP{dp} mbs{m}": _plan(pp, dp, m) for pp, dp, m in
         ((1, 4, 2), (1, 4, 8), (2, 2, 2), (2, 2, 4), (4, 1, 4), (4, 2, 8))}


def test_shipped_profile_has_the_layers_the_tests_assume() -> None:
    assert simulate_plan(PLANS["PP1 DP4 mbs2"]).iteration_time_s > 0
    with pytest.raises(InputError):
        simulate_plan(Plan(MODEL, 256, 2, (Stage(0, LAYERS - 1, (ReplicaGroup(GPU, ZONE),)),)))


@pytest.mark.parametrize("pp, mbs", [(2, 2), (2, 8), (4, 4)])
def test_transfer_latency_adds_two_per_microbatch_and_stage_boundary_on_the_critical_path(pp, mbs) -> None:
    """Closed form: every stage step gains 2 (c_in + c_out); T_pipe = (M-1) max sigma + sum fb + 2 sum c."""
    plan = _plan(pp, 1, mbs)
    M = plan.global_batch_size // mbs
    lat = 0.003
    base = simulate_plan(plan, config=DEFAULT_CONFIG)
    late = simulate_plan(plan, config=replace(DEFAULT_CONFIG, transfer_latency_s=lat))
    sigma = base.stage_times.compute[:, 0] + 2 * (base.stage_times.pipeline_send[:-1, 0] + base.stage_times.pipeline_send[1:, 0])
    late_sigma = sigma + 2 * lat * np.array([1 if s in (0, pp - 1) else 2 for s in range(pp)])
    expected = (M - 1) * late_sigma.max() + base.stage_times.compute[:, 0].sum() + 2 * (
        base.stage_times.pipeline_send[:, 0].sum() + lat * (pp - 1))
    assert late.pipeline_time_s == pytest.approx(expected, rel=1e-12)
    if pp == 2:  # both stages gain 2 lat per step: exactly 2 lat M in all
        assert late.pipeline_time_s - base.pipeline_time_s == pytest.approx(2 * lat * M, rel=1e-9)
    # no pipeline, no transfer: data parallelism alone is unchanged
    flat = _plan(1, 4, mbs)
    assert simulate_plan(flat, config=replace(DEFAULT_CONFIG, transfer_latency_s=lat)).iteration_time_s == simulate_plan(flat, config=DEFAULT_CONFIG).iteration_time_s


@pytest.mark.parametrize("pp, dp", [(1, 2), (1, 4), (2, 2), (4, 2)])
def test_allreduce_latency_adds_two_per_ring_step(pp, dp) -> None:
    """Alpha-beta ring all-reduce: D replicas take 2 (D - 1) steps, each paying the latency once."""
    plan = _plan(pp, dp, 4)
    lat = 0.004
    base = simulate_plan(plan, config=DEFAULT_CONFIG)
    late = simulate_plan(plan, config=replace(DEFAULT_CONFIG, allreduce_latency_s=lat))
    np.testing.assert_allclose(late.stage_times.sync, base.stage_times.sync + 2 * (dp - 1) * lat, rtol=1e-12)
    assert late.iteration_time_s == pytest.approx(base.iteration_time_s + 2 * (dp - 1) * lat, rel=1e-12)
    assert late.pipeline_time_s == base.pipeline_time_s
    single = _plan(2, 1, 4)  # one replica: no all-reduce, nothing added
    assert simulate_plan(single, config=replace(DEFAULT_CONFIG, allreduce_latency_s=lat)).iteration_time_s == (
        simulate_plan(single, config=DEFAULT_CONFIG).iteration_time_s)


def test_time_constants_follow_what_the_plans_exercise() -> None:
    assert time_constants_for([_plan(1, 1, 2)]) == ("compute_scale", "microbatch_overhead_s")
    assert time_constants_for([_plan(1, 1, 2), _plan(2, 1, 2)])[2:] == ("transfer_latency_s",)
    assert time_constants_for({"a": _plan(1, 2, 2)})[-1] == "straggler_cv"
    assert "allreduce_latency_s" not in time_constants_for(PLANS)  # only when asked for
    assert len(time_constants_for(PLANS)) == 4


@pytest.mark.parametrize("constant, width", [("transfer_latency_s", "pp"), ("allreduce_latency_s", "dp")])
def test_search_prices_the_latencies_as_the_simulator_does(constant, width) -> None:
    """The DP search keeps its own stage tables: its best plan's time must equal simulate_plan's with the same constants."""
    pool = {(GPU, ZONE): 16}
    fast = plan_job(MODEL, 256, pool, options=SearchOptions(config=DEFAULT_CONFIG))
    config = replace(DEFAULT_CONFIG, **{constant: 0.05})
    slow = plan_job(MODEL, 256, pool, options=SearchOptions(config=config))
    assert slow.search_iteration_time_s == pytest.approx(slow.iteration_time_s, rel=1e-9)
    assert slow.iteration_time_s == pytest.approx(simulate_plan(slow.plan, config=config).iteration_time_s, rel=1e-12)
    # 50 ms per transfer (per ring step) makes pipelines (data parallelism) expensive: no deeper (wider) pick
    assert getattr(slow.plan, width) <= getattr(fast.plan, width)
    assert slow.iteration_time_s >= fast.iteration_time_s


@pytest.mark.parametrize("last, value", [("straggler_cv", 0.15), ("allreduce_latency_s", 0.003)])
def test_fit_recovers_known_constants_from_exact_measurements(last, value) -> None:
    truth = replace(DEFAULT_CONFIG, compute_scale=1.3, microbatch_overhead_s=0.004, transfer_latency_s=0.002,
                    **{last: value})
    measured = [simulate_plan(p, config=truth).iteration_time_s for p in PLANS.values()]
    constants = ("compute_scale", "microbatch_overhead_s", "transfer_latency_s", last)
    fit = fit_sim_config(PLANS, measured, base=DEFAULT_CONFIG,
                         constants=None if last == "straggler_cv" else constants)  # the default, or asked for
    assert fit.constants == constants
    assert fit.config.compute_scale == pytest.approx(1.3, rel=1e-3)
    assert fit.config.microbatch_overhead_s == pytest.approx(0.004, rel=1e-2)
    assert fit.config.transfer_latency_s == pytest.approx(0.002, rel=1e-2)
    assert getattr(fit.config, last) == pytest.approx(value, rel=1e-2)
    assert np.abs(fit.errors_after).max() < 1e-4
    assert np.abs(fit.errors_before).mean() > 0.1
    assert fit.config.overhead_gb == DEFAULT_CONFIG.overhead_gb  # constants not fitted are kept
    np.testing.assert_allclose(relative_errors(list(PLANS.values()), measured, fit.config), fit.errors_after)
    assert "transfer_latency_s" in fit.describe() and fit.names == tuple(PLANS)


def test_fit_of_memory_constants_recovers_them() -> None:
    truth = replace(DEFAULT_CONFIG, overhead_gb=3.0, working_layers=1.5)
    measured = [simulate_plan(p, config=truth).peak_memory_gb for p in PLANS.values()]
    fit = fit_sim_config(PLANS, measured, constants=("overhead_gb", "working_layers"), quantity="peak_memory_gb",
                         base=DEFAULT_CONFIG)
    assert fit.config.overhead_gb == pytest.approx(3.0, rel=1e-3)
    assert fit.config.working_layers == pytest.approx(1.5, rel=1e-3)


def test_a_measurement_no_plausible_constants_reach_is_named(caplog) -> None:
    """A memory reading below what a plan holds with zero overhead and no working buffers (its
    weights, Adam state and in-flight activations) is out of reach of the fit: the calibration
    names it and warns; readings inside the reach are not named."""
    truth = replace(DEFAULT_CONFIG, overhead_gb=3.0, working_layers=1.5)
    measured = {n: simulate_plan(p, config=truth).peak_memory_gb for n, p in PLANS.items()}
    bare = replace(DEFAULT_CONFIG, overhead_gb=0.0, working_layers=0.0)
    floor = simulate_plan(PLANS["PP4 DP1 mbs4"], config=bare).peak_memory_gb
    ceiling = simulate_plan(PLANS["PP1 DP4 mbs8"], config=replace(DEFAULT_CONFIG, overhead_gb=16.0, working_layers=8.0)).peak_memory_gb
    measured["PP4 DP1 mbs4"] = 0.5 * floor  # e.g. another GPU's reading
    measured["PP1 DP4 mbs8"] = 1.1 * ceiling
    with caplog.at_level("WARNING"):
        fit = fit_sim_config(PLANS, list(measured.values()), constants=("overhead_gb", "working_layers"),
                             quantity="peak_memory_gb", base=DEFAULT_CONFIG)
    assert sorted(fit.out_of_reach) == ["PP1 DP4 mbs8", "PP4 DP1 mbs4"]
    # left out of the fit: the readings in reach give back the true constants
    assert not fit.fitted_out_of_reach and "left out of the fit" in fit.describe()
    assert fit.config.overhead_gb == pytest.approx(3.0, rel=1e-3)
    assert fit.config.working_layers == pytest.approx(1.5, rel=1e-3)
    assert len(fit.predicted_after) == len(PLANS) and fit.errors_after[list(PLANS).index("PP4 DP1 mbs4")] > 1  # still reported
    row = list(PLANS).index("PP4 DP1 mbs4")
    assert fit.reach[row, 0] == pytest.approx(floor)
    assert fit.reach[list(PLANS).index("PP1 DP4 mbs8"), 1] == pytest.approx(ceiling)
    assert np.all(fit.reach[:, 0] <= fit.reach[:, 1])
    assert "below the least predicted" in fit.describe() and "above the most predicted" in fit.describe()
    assert "PP4 DP1 mbs4" in caplog.text and fit.to_dict()["out_of_reach"] == list(fit.out_of_reach)
    clean = fit_sim_config(PLANS, [simulate_plan(p, config=truth).peak_memory_gb for p in PLANS.values()],
                           constants=("overhead_gb", "working_layers"), quantity="peak_memory_gb", base=DEFAULT_CONFIG)
    assert clean.out_of_reach == ()
    # too few readings in reach to fit two constants without the bad ones: they are kept, and it says so
    two = {n: measured[n] for n in ("PP4 DP1 mbs4", "PP1 DP4 mbs8")}
    kept = fit_sim_config({n: PLANS[n] for n in two}, list(two.values()), constants=("overhead_gb", "working_layers"),
                          quantity="peak_memory_gb", base=DEFAULT_CONFIG)
    assert kept.fitted_out_of_reach and "kept in the fit" in kept.describe()


def test_sim_config_file_is_used_by_simulate_and_plan_job(tmp_path) -> None:
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    plan = PLANS["PP2 DP2 mbs4"]
    assert load_sim_config(data) == PROFILED_CONFIG
    assert simulate_plan(plan, data_dir=data).iteration_time_s == simulate_plan(plan, config=PROFILED_CONFIG).iteration_time_s
    fitted = replace(PROFILED_CONFIG, compute_scale=2.0, transfer_latency_s=0.01)
    fitted.write(data)
    assert load_sim_config(data) == fitted
    assert simulate_plan(plan, data_dir=data).iteration_time_s == pytest.approx(simulate_plan(plan, config=fitted).iteration_time_s)
    result = plan_job(MODEL, 256, {(GPU, ZONE): 8}, data_dir=data)
    assert result.iteration_time_s == pytest.approx(simulate_plan(result.plan, config=fitted).iteration_time_s, rel=1e-12)
    # rewritten file is re-read
    replace(fitted, compute_scale=3.0).write(data)
    assert load_sim_config(data).compute_scale == 3.0


@pytest.mark.parametrize(
    "content, field",
    [({"compute_scale": -1.0}, "compute_scale"), ({"warp_speed": 1.0}, "sim_config"),
     ({"transfer_latency_s": "fast"}, "transfer_latency_s"), ({"allreduce_latency_s": -1e-3}, "allreduce_latency_s"),
     ([1, 2], "sim_config")],
)
def test_bad_sim_config_file_names_the_constant(tmp_path, content, field) -> None:
    (tmp_path / "sim_config.json").write_text(json.dumps(content))
    with pytest.raises(InputError, match=field):
        load_sim_config(tmp_path)


def test_bad_fit_inputs_name_the_field() -> None:
    plans = list(PLANS.values())[:3]
    with pytest.raises(InputError, match="measured"):
        fit_sim_config(plans, [1.0, -2.0, 1.0])
    with pytest.raises(InputError, match="measured"):
        fit_sim_config(plans, [1.0, 2.0])
    with pytest.raises(InputError, match="constants"):
        fit_sim_config(plans, [1.0, 1.0, 1.0], constants=("bytes_per_param",))
    with pytest.raises(InputError, match="plans"):
        fit_sim_config(plans[:2], [1.0, 1.0])
    with pytest.raises(InputError, match="quantity"):
        fit_sim_config(plans, [1.0, 1.0, 1.0], quantity="joules")
    with pytest.raises(InputError, match="transfer_latency_s"):
        SimConfig(transfer_latency_s=-0.1)


def test_fit_steps_off_a_bound_its_simplex_collapsed_on() -> None:
    """From compute_scale 1.0 Nelder-Mead parks allreduce_latency_s next to 0 (a local minimum,
    0.04% error left); the retry from 1% inside the range finds the exact constants."""
    truth = replace(DEFAULT_CONFIG, compute_scale=1.3, microbatch_overhead_s=0.004, transfer_latency_s=0.002,
                    allreduce_latency_s=0.003)
    measured = [simulate_plan(p, config=truth).iteration_time_s for p in PLANS.values()]
    fit = fit_sim_config(PLANS, measured, base=replace(DEFAULT_CONFIG, compute_scale=1.0),
                         constants=("compute_scale", "microbatch_overhead_s", "transfer_latency_s", "allreduce_latency_s"))
    assert fit.config.allreduce_latency_s == pytest.approx(0.003, rel=1e-2)
    assert fit.config.compute_scale == pytest.approx(1.3, rel=1e-3)
    assert np.abs(fit.errors_after).max() < 1e-4 and fit.at_bound == ()
