"""CLI ``heteroplan plan`` and the baseline planners."""

from __future__ import annotations

import json

import pytest

from heteroplan.cli import main
from heteroplan.planner import Plan, SearchOptions, plan_job, simulate
from heteroplan.planner.baselines import homogeneous_plan, uniform_split_plan

A, V, Z = "A100-40", "V100-16", "us-central1-a"
POOL = {(A, Z): 8, (V, Z): 16}


def test_cli_plan_json_matches_api(capsys):
    argv = ["plan", "--model", "OPT-350", "--gbs", "64", "--gpus", f"{A}@{Z}=8,{V}@{Z}=16", "--max-pp", "3", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    plan = Plan.from_dict(out["plan"])
    api = plan_job("OPT-350", 64, POOL, options=SearchOptions(max_pp=3))
    assert plan == api.plan
    assert out["throughput_iter_s"] == pytest.approx(api.throughput)
    assert out["iteration_time_s"] == pytest.approx(simulate(plan).iteration_time)
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
    homo = homogeneous_plan("OPT-350", 64, POOL, options=opts)
    uni = uniform_split_plan("OPT-350", 64, POOL, max_pp=4)
    assert len({g.gpu_type for s in homo.plan.stages for g in s.replicas}) == 1
    assert sailor.throughput >= homo.throughput * (1 - 1e-9)
    assert sailor.throughput >= uni.throughput * (1 - 1e-9)
    # the uniform baseline really splits uniformly
    sizes = [s.num_layers for s in uni.plan.stages]
    assert max(sizes) - min(sizes) <= 1
