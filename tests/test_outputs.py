"""What a user sees: short reprs of result objects, a typed simulation summary, one spelling
per quantity with its unit, warnings that say how to fix what they warn about."""

from __future__ import annotations

import json
import logging
import warnings

import numpy as np
import pytest

from heteroplan.cli import main
from heteroplan.cluster import preset
from heteroplan.sim.compare import compare_policies
from heteroplan.sim.summary import SimSummary
from heteroplan.workload.sia import bundled_workload


@pytest.fixture(scope="module")
def results():
    return compare_policies(bundled_workload("philly/workload-1")[:30], preset("sia-64"), ["fifo", "tiresias"],
                            progress=False)


def test_result_reprs_are_a_few_lines(results) -> None:
    text = repr(results)  # 30 jobs x 2 policies: 109,494 characters before
    assert len(text) < 1500 and len(text.splitlines()) <= 8, text
    assert "fifo" in text and "tiresias" in text and "avg_jct_h" in text
    one = repr(results[0])
    assert len(one) < 1000 and len(one.splitlines()) <= 8 and "30 jobs" in one
    assert "JobRecord" not in text + one


def test_summary_is_typed_prints_nicely_and_reads_as_a_mapping(results) -> None:
    res = results[0]
    s = res.summary()
    assert isinstance(s, SimSummary)
    assert s.avg_jct_h == s["avg_jct_h"] == pytest.approx(np.mean([j.jct_s for j in res.finished()]) / 3600)
    assert s.finished == 30 and 0 <= s.utilization <= 1
    text = str(s)
    assert text == repr(s) and len(text.splitlines()) == 5 and "average JCT" not in text
    assert f"{s.avg_jct_h:.3g} h" in text
    plain = s.to_dict()
    assert dict(s) == plain and json.loads(json.dumps(plain, default=float))["policy"] == "fifo"
    assert "avg_queueing_delay_h" in s and "avg_queuing_delay_h" not in s  # one spelling, as in the jobs table
    with pytest.raises(KeyError):  # the former spelling is gone, as a key and as an attribute
        s["avg_queuing_delay_h"]
    assert not hasattr(s, "avg_queuing_delay_h")
    with pytest.raises(KeyError):
        s["no_such_metric"]


def test_the_jobs_table_and_the_summary_spell_queueing_alike(results) -> None:
    from heteroplan.sim.tables import JOB_COLUMNS

    assert "queueing_delay_s" in JOB_COLUMNS and "queueing_delay" not in JOB_COLUMNS
    frame = results[0].to_dataframe("jobs")
    assert results[0].summary().avg_queueing_delay_h == pytest.approx(frame["queueing_delay_s"].mean() / 3600)
    # every time column says its unit; the hours column is the seconds column / 3600
    times = [c for c in frame.columns if "time" in c or c.startswith(("jct", "queueing"))]
    assert times and all(c.endswith(("_s", "_h")) for c in times), times
    assert frame["jct_h"].to_numpy() == pytest.approx(frame["jct_s"].to_numpy() / 3600, nan_ok=True)
    job = results[0].to_dict()["jobs"][0]
    record = results[0].jobs[0]
    assert job["jct_s"] == record.jct_s and job["queueing_delay_s"] == record.queueing_delay_s
    assert "jct" not in job and job["job_id"] == record.job_id  # one spelling each, written with its unit


def test_solution_repr_shows_shapes_not_values() -> None:
    from heteroplan.milp import Model
    from heteroplan.solvers import solve

    m = Model("big")
    x = m.binary("x", 3000)
    m.add_constraints(x.sum() <= 5, "cap")
    m.maximize(x.sum())
    text = repr(solve(m))
    assert len(text) < 400 and "x (3000,) int64" in text and "optimal" in text


def test_plan_result_repr_and_units_in_its_json() -> None:
    from heteroplan.planner import plan_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = plan_job("OPT-350", 64, {("GH-96", "us-central1-a"): 4})
    assert repr(res) == res.describe() and len(repr(res).splitlines()) <= 8
    data = res.to_dict()
    assert data["cost_per_iteration_usd"] == res.cost_per_iteration_usd and "cost_per_iteration" not in data
    assert data["iteration_time_s"] == res.iteration_time_s and data["throughput_iter_s"] == res.throughput_iter_s


def test_python_names_carry_units_as_the_json_does_and_the_former_names_are_gone() -> None:
    """PlanResult, PlanEstimate and RunnerUp: one spelling with its unit; the former names are gone."""
    from heteroplan.planner import plan_job

    res = plan_job("OPT-350", 256, {("A100-40", "us-central1-a"): 8, ("V100-16", "us-central1-a"): 16})
    data = res.to_dict()
    for name in ("iteration_time_s", "throughput_iter_s", "cost_per_iteration_usd", "search_time_s"):
        assert data[name] == getattr(res, name), name
    assert data["memory_per_gpu_gb"] == list(res.memory_per_gpu_gb)
    est = res.estimate
    assert (est.iteration_time_s, est.cost_per_iteration_usd, est.memory_per_stage_gb) == (
        res.iteration_time_s, res.cost_per_iteration_usd, res.memory_per_gpu_gb)
    assert est.iteration_time_s == pytest.approx(est.pipeline_time_s + est.sync_time_s)
    runner = res.runner_ups[0]
    former = [(res, "iteration_time", "iteration_time_s"), (res, "throughput", "throughput_iter_s"),
              (res, "cost_per_iteration", "cost_per_iteration_usd"), (res, "memory_per_gpu", "memory_per_gpu_gb"),
              (res, "search_time", "search_time_s"), (est, "iteration_time", "iteration_time_s"),
              (est, "memory_per_stage", "memory_per_stage_gb"), (est, "cost_per_iteration", "cost_per_iteration_usd"),
              (est, "pipeline_time", "pipeline_time_s"), (est, "sync_time", "sync_time_s"),
              (est, "throughput", "throughput_iter_s"), (runner, "iteration_time", "iteration_time_s"),
              (runner, "cost_per_iteration", "cost_per_iteration_usd")]
    for obj, old, new in former:
        assert hasattr(obj, new) and not hasattr(obj, old), (type(obj).__name__, old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing the library does itself reads a former name
        res.describe(), res.explain(), res.to_dict(), est.describe(), res._repr_html_()


def test_a_calibrated_shipped_type_plans_without_a_calibration_warning(caplog) -> None:
    from heteroplan.planner import plan_job

    with caplog.at_level(logging.DEBUG, logger="heteroplan"):
        res = plan_job("OPT-350", 64, {("GH-96", "us-central1-a"): 4})
    assert "calibration" not in caplog.text and "calibration" not in res.describe()
    assert res.to_dict()["uncalibrated_gpu_types"] == []


def test_the_plan_command_names_uncalibrated_types_once_with_the_fix(capsys, caplog) -> None:
    args = ["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", "A100-40@us-central1-a=8"]
    with caplog.at_level(logging.WARNING, logger="heteroplan"):
        assert main(args) == 0
    captured = capsys.readouterr()
    said = captured.out + captured.err + caplog.text
    assert said.count("no simulator calibration for A100-40") == 1, said  # was twice: the log and describe()
    assert "heteroplan profile" in said and "--calibrate" in said and "--data-dir" in said


def test_the_uncalibrated_note_is_info_not_a_warning_and_says_how_to_fix_it(caplog) -> None:
    """Quiet unless asked: nothing at WARNING (logging's last-resort handler would print it to
    stderr on every process); at INFO (``heteroplan -v``) and in describe(), the note and the fix."""
    from heteroplan.planner import api

    with caplog.at_level(logging.WARNING, logger="heteroplan"):
        res = api.plan_job("OPT-350", 64, {("V100-16", "us-central1-a"): 8})
    assert caplog.records == []
    with caplog.at_level(logging.INFO, logger="heteroplan"):
        api.plan_job("OPT-350", 64, {("V100-16", "us-central1-a"): 8})
    assert "no simulator calibration for V100-16" in caplog.text and "--calibrate" in caplog.text
    assert "no simulator calibration for V100-16" in res.describe() and "--calibrate" in res.describe()


def test_skip_and_error_messages_do_not_suggest_the_cuda_pulling_extra() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bad = ("install -e '.[runtime]'", "install 'heteroplan[runtime]'")
    offenders = [str(p.relative_to(root)) for folder in ("heteroplan", "tests") for p in (root / folder).rglob("*.py")
                 if p.name != "test_outputs.py" and any(b in p.read_text() for b in bad)]
    assert offenders == []


def test_pipeline_schedule_repr_is_one_line() -> None:
    from heteroplan.planner.model.schedule import schedule_1f1b

    sched = schedule_1f1b([0.1, 0.2], [0.2, 0.4], [0.0, 0.01, 0.0], 64)
    assert repr(sched).count("\n") == 0 and "2 stages x 64 microbatches" in repr(sched)
