"""CLI ``heteroplan plan`` and the baseline planners."""

from __future__ import annotations

import json

import pytest

from heteroplan.cli import main
from heteroplan.planner import Plan, ReplicaGroup, SearchOptions, Stage, plan_job, simulate_plan
from heteroplan.planner.baselines import homogeneous_plan, uniform_split_plan
from heteroplan.planner.request import PlanRequest

A, V, Z = "A100-40", "V100-16", "us-central1-a"
POOL = {(A, Z): 8, (V, Z): 16}


def test_cli_plan_json_matches_api(capsys):
    argv = ["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", f"{A}@{Z}=8,{V}@{Z}=16", "--max-pp", "3", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    plan = Plan.from_dict(out["plan"])
    api = plan_job("OPT-350", 64, POOL, options=SearchOptions(max_pp=3))
    assert plan == api.plan
    assert out["throughput_iter_s"] == pytest.approx(api.throughput_iter_s)
    assert out["iteration_time_s"] == pytest.approx(simulate_plan(plan).iteration_time_s)
    assert sum(out["gpus"].values()) == plan.num_gpus


def test_cli_text_output_and_clear_errors(capsys):
    assert main(["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", f"{A}@{Z}=8", "--max-pp", "2"]) == 0
    text = capsys.readouterr().out
    assert "iter/s" in text and "$" in text and "GB/GPU" in text and "TP" in text
    assert main(["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", "A100-40@us-central1-a"]) == 2
    assert "--gpus" in capsys.readouterr().err
    assert main(["plan", "--model", "OPT-350", "--gbs", "256", "--gpus", f"{A}@{Z}=8", "--budget", "1e-6"]) == 2
    assert "budget too small" in capsys.readouterr().err


def test_sailor_search_is_at_least_as_good_as_baselines():
    opts = SearchOptions(max_pp=4)
    sailor = plan_job("OPT-350", 64, POOL, options=opts)
    homo = homogeneous_plan(PlanRequest.build("OPT-350", 64, POOL, options=opts))
    uni = uniform_split_plan(PlanRequest.build("OPT-350", 64, POOL), max_pp=4)
    assert len({g.gpu_type for s in homo.plan.stages for g in s.replicas}) == 1
    assert sailor.throughput_iter_s >= homo.throughput_iter_s * (1 - 1e-9)
    assert sailor.throughput_iter_s >= uni.throughput_iter_s * (1 - 1e-9)
    # the uniform baseline really splits uniformly
    sizes = [s.num_layers for s in uni.plan.stages]
    assert max(sizes) - min(sizes) <= 1


def test_cli_evaluate_says_whether_a_plan_file_fits(tmp_path, capsys):
    big = Plan("GPT-Neo-2.7", 2048, 1, (Stage(0, 34, (ReplicaGroup("V100-16", Z, 1, 8),)),))
    small = Plan("OPT-350", 64, 2, (Stage(0, 26, (ReplicaGroup(A, Z, 1, 8),)),))
    big.to_json(tmp_path / "big.json")
    small.to_json(tmp_path / "small.json")
    assert main(["plan", "--evaluate", str(tmp_path / "big.json")]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT memory" in out and "stage 0 (V100-16)" in out
    assert main(["plan", "--evaluate", str(tmp_path / "small.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits_memory"] is True and data["memory_over_gb"] == 0.0
    assert data["iteration_time_s"] == pytest.approx(simulate_plan(small).iteration_time_s)
    assert main(["plan", "--evaluate", str(tmp_path / "small.json"), "--gbs", "128"]) == 2


def test_plan_job_answers_fit_their_gpus():
    res = plan_job("GPT-Neo-2.7", 64, {("V100-16", Z): 16}, options=SearchOptions(max_pp=4))
    assert res.memory_fit.fits and res.memory_fit.headroom_gb >= 0
    assert simulate_plan(res.plan).fits
    assert res.to_dict()["fits_memory"] is True and "fits memory" in res.describe()
