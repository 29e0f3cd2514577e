"""Runtime calibration: run calibration plans for real, refit the simulator, plan with the result."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.cluster import GPUType  # noqa: E402
from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner import plan_job, simulate_plan  # noqa: E402
from heteroplan.planner.model.sim_config import PROFILED_CONFIG, load_sim_config  # noqa: E402
from heteroplan.runtime import TinyGPTTask  # noqa: E402
from heteroplan.runtime.calibrate import best_of, calibrate, calibration_plans  # noqa: E402
from heteroplan.runtime.netbench import NetworkMeasurement  # noqa: E402
from heteroplan.runtime.profiler import profile_layers  # noqa: E402

TASK = TinyGPTTask()


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    root = tmp_path_factory.mktemp("calib")
    prof = profile_layers(TASK.build_model(), lambda m: TASK.batch(0, 0, m)[0], (1, 2),
                          loss_fn=lambda out: out.float().logsumexp(-1).mean(), warmup=1, repeats=3)
    prof.write(root, "tiny", "cpu")
    NetworkMeasurement((1_000_000,), (1.0,), (1e-3,), (0.0, 0.0, 1.0), 1e9).write(root, "cpu", "local")
    return root


def test_calibration_plans_cover_compute_microbatches_and_transfers() -> None:
    plans = calibration_plans("m", 6, (4, 1, 2), 16, processes=2)
    assert list(plans) == ["1 process, mbs 1", "1 process, mbs 4", "DP 2, mbs 4", "DP 2, mbs 1", "PP 2, mbs 4",
                           "PP 2, mbs 1"]
    assert [(p.pp, p.dp, p.microbatch_size) for p in plans.values()] == [
        (1, 1, 1), (1, 1, 4), (1, 2, 4), (1, 2, 1), (2, 1, 4), (2, 1, 1)]
    assert [(s.first_layer, s.last_layer) for s in plans["PP 2, mbs 4"].stages] == [(0, 3), (3, 6)]
    assert list(calibration_plans("m", 6, (2,), 16, processes=1)) == ["1 process, mbs 2"]
    with pytest.raises(InputError, match="global_batch_size"):
        calibration_plans("m", 6, (1, 4), 12, processes=2)
    with pytest.raises(InputError, match="microbatch_sizes"):
        calibration_plans("m", 6, (), 16, processes=2)
    assert best_of({"a": [0.3, 0.1, 0.2]}) == {"a": 0.1}


def test_a_run_counts_a_quantile_of_its_iterations_after_warm_up() -> None:
    from heteroplan.runtime.config import StepMetrics
    from heteroplan.runtime.launch import RunResult

    times = [9.0, 0.5, 0.1, 0.4, 0.2, 0.3]  # first one is warm-up
    run = RunResult([StepMetrics(i + 1, 0.0, t, 0.0) for i, t in enumerate(times)], 6, 0, None, 0.0, 1)
    assert run.median_iteration_time(skip=1) == pytest.approx(0.3)
    assert run.iteration_time_quantile(0.0, skip=1) == pytest.approx(0.1)
    assert run.iteration_time_quantile(0.25, skip=1) == pytest.approx(0.2)
    assert run.iteration_time_quantile(0.125, skip=1) == pytest.approx(0.15)  # interpolated
    assert run.iteration_time_quantile(1.0, skip=0) == pytest.approx(9.0)
    assert run.iteration_time_quantile(0.5, skip=10) == pytest.approx(0.35)  # nothing left: all counted
    for bad in (-0.1, 1.5, True, "0.5"):
        with pytest.raises(InputError) as info:
            run.iteration_time_quantile(bad)
        assert info.value.field == "q"
    with pytest.raises(InputError, match="quantile"):
        from heteroplan.runtime.calibrate import measure_plans

        measure_plans({}, TASK, quantile=2.0)


@pytest.mark.parametrize("interleaved", [True, False])
def test_calibrate_runs_fits_writes_and_the_planner_uses_it(profiled, interleaved, tmp_path) -> None:
    profiled = shutil.copytree(profiled, tmp_path / "profile")  # each run starts uncalibrated
    lines: list[str] = []
    cal = calibrate(TASK, profiled, "tiny", processes=2, global_batch_size=8, interleaved=interleaved,
                    rounds=2 if interleaved else 1, steps=4, progress=lines.append)
    assert cal.names == ("1 process, mbs 1", "1 process, mbs 2", "DP 2, mbs 2", "DP 2, mbs 1", "PP 2, mbs 2",
                         "PP 2, mbs 1")
    if interleaved:  # one line per round, every plan's median so far
        assert len(lines) == 2 and lines[-1].startswith("round 2/2") and all(n in lines[-1] for n in cal.names)
    else:  # one line per run
        assert len(lines) == 6 and all("s/iteration" in line for line in lines)
    assert cal.constants == ("compute_scale", "microbatch_overhead_s", "transfer_latency_s", "straggler_cv")
    assert cal.base == PROFILED_CONFIG
    # the fit starts from the base and never ends worse than it
    assert np.abs(cal.errors_after).mean() <= np.abs(cal.errors_before).mean() + 1e-12
    # predictions are the simulator's with the fitted constants
    cpu = GPUType("cpu", memory_gb=1e6, gpus_per_node=2)
    plans = calibration_plans("tiny", TASK.num_layers, (1, 2), 8, 2)
    again = [simulate_plan(p, config=cal.config, data_dir=profiled, gpu_types={"cpu": cpu}).iteration_time_s for p in plans.values()]
    np.testing.assert_allclose(again, cal.predicted_after, rtol=1e-12)
    # written to the directory and used by simulate and plan_job from there
    assert load_sim_config(profiled, "cpu") == cal.config  # the platform's row of the table
    result = plan_job("tiny", 8, {("cpu", "local"): 2}, gpu_types=(GPUType("cpu", 16, 2),), data_dir=profiled)
    assert result.iteration_time_s == pytest.approx(
        simulate_plan(result.plan, config=cal.config, data_dir=profiled, gpu_types={"cpu": cpu}).iteration_time_s, rel=1e-12)


def test_calibrate_refuses_an_unprofiled_device(profiled) -> None:
    with pytest.raises(InputError, match="gpu_type"):
        calibrate(TASK, profiled, "tiny", gpu_type="tpu", rounds=1, steps=2)


def test_profile_cli_calibrates(tmp_path, capsys) -> None:
    from heteroplan.cli import main

    assert main(["profile", "--out", str(tmp_path), "--no-network", "--calibrate"]) == 2
    assert "--calibrate" in capsys.readouterr().err
    code = main(["profile", "--out", str(tmp_path), "--mbs", "1,2", "--warmup", "0", "--repeats", "1",
                 "--calibrate", "--rounds", "1", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    fitted = summary["calibration"]["constants"]
    assert set(fitted) == {"compute_scale", "microbatch_overhead_s", "transfer_latency_s", "straggler_cv"}
    assert load_sim_config(tmp_path, "cpu").to_dict() | fitted == load_sim_config(tmp_path, "cpu").to_dict()
    assert len(summary["calibration"]["measured"]) == 6


def test_fit_runs_reduces_each_plans_times_with_the_statistic(profiled) -> None:
    import statistics

    from heteroplan.runtime.calibrate import fit_runs

    plans = calibration_plans("tiny", TASK.num_layers, (1, 2), 8, 1)
    runs = {"1 process, mbs 1": [0.30, 0.10, 0.20], "1 process, mbs 2": [0.05, 0.25, 0.15, 0.35]}
    before = load_sim_config(profiled)
    fastest = fit_runs(plans, runs, profiled, write=False)
    np.testing.assert_allclose(fastest.measured, [0.10, 0.05])
    median = fit_runs(plans, runs, profiled, write=False, statistic=statistics.median)
    np.testing.assert_allclose(median.measured, [0.20, 0.20])
    assert load_sim_config(profiled) == before  # write=False wrote nothing
