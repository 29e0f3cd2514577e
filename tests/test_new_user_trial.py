"""Issue 47 (item 6): what a new user ran into. ``plan --evaluate`` with a profiled data directory
and ``--cluster``; ``plan`` prints and writes what Python's ``PlanResult`` explains; a plan in a
precision its profile does not record is warned about; ``--model module:task`` from the working
directory; the profiler warns when repeated timings disagree."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytest

from heteroplan.cli import main
from heteroplan.planner.api import plan_job
from heteroplan.planner.explain import TermKind, estimate_terms
from heteroplan.planner.model.simulator import PrecisionWarning, simulate_plan
from heteroplan.planner.plan import Plan, Precision, ReplicaGroup, Stage

POOL = ["--model", "OPT-350", "--gbs", "64", "--gpus", "A100-40@us-central1-a=8,V100-16@us-central1-a=8"]


# ------------------------------------------------------------------ plan prints what PlanResult explains
def test_plan_json_holds_the_terms_runner_ups_and_explanation_of_python(capsys) -> None:
    assert main(["plan", *POOL, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    result = plan_job("OPT-350", 64, {("A100-40", "us-central1-a"): 8, ("V100-16", "us-central1-a"): 8})
    assert printed["explanation"] == result.explain().splitlines()
    assert [r["family"] for r in printed["runner_ups"]] == [r.family.label for r in result.runner_ups]
    assert len(printed["runner_ups"]) >= 2
    assert [Plan.from_dict(r["plan"]) for r in printed["runner_ups"]] == [r.plan for r in result.runner_ups]
    terms = printed["terms"]
    assert set(terms) == {"time", "cost", "memory"}
    assert sum(terms["time"].values()) == pytest.approx(printed["iteration_time_s"], rel=1e-9)
    assert sum(terms["cost"].values()) == pytest.approx(printed["cost_per_iteration_usd"], rel=1e-9)
    assert terms["memory"]["total"] == pytest.approx(printed["peak_memory_gb"], rel=1e-9)
    assert estimate_terms(result.estimate)[TermKind.TIME] == terms["time"]


def test_plan_prints_the_breakdown_and_why(capsys) -> None:
    assert main(["plan", *POOL]) == 0
    out = capsys.readouterr().out
    assert "by term:" in out and "time (s/iteration): compute" in out and "cost ($/iteration): rental" in out
    assert "why this plan" in out and "best of GPU types V100-16" in out


def test_plan_needs_gpus_once(capsys) -> None:
    assert main(["plan", "--model", "OPT-350", "--gbs", "64"]) == 2
    assert "--gpus/--cluster" in capsys.readouterr().err
    assert main(["plan", *POOL, "--cluster", "sia-64"]) == 2
    assert "not both" in capsys.readouterr().err


# ------------------------------------------------------------------ --evaluate on a profiled data directory
LAYERS = 3


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory that profiled the model ``tiny`` on the GPU type ``mygpu`` (not shipped)."""
    root = tmp_path / "data"
    (root / "profiles" / "tiny").mkdir(parents=True)
    sizes = {"params_floats": 1000, "act_output_floats": 64, "act_input_floats": 64, "act_mem_floats": 256}
    (root / "llm_info.json").write_text(json.dumps({"tiny": {"1": {str(i): sizes for i in range(LAYERS)}}}))
    times = {str(m): {"1": {str(i): [0.001 * m, 0.002 * m, 0.0005] for i in range(LAYERS)}} for m in (1, 2)}
    (root / "profiles" / "tiny" / "mygpu.json").write_text(json.dumps(times))
    return root


def _cluster(tmp_path: Path, gpus: int = 1) -> Path:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"name": "mine", "gpu_types": [{"name": "mygpu", "memory_gb": 16, "gpus_per_node": 1,
                                                               "price_per_hour": 3.6}],
                                "nodes": [{"name": f"n{i}", "gpu_type": "mygpu", "num_gpus": 1, "zone": "local"}
                                          for i in range(gpus)]}))
    return path


def _plan_file(tmp_path: Path, precision: Precision = Precision.FP32) -> Path:
    path = tmp_path / "plan.json"
    Plan("tiny", 4, 2, (Stage(0, LAYERS, (ReplicaGroup("mygpu", "local", 1, 1),)),), precision=precision).to_json(path)
    return path


def test_evaluate_takes_the_profiled_gpu_type_from_cluster(tmp_path: Path, data_dir: Path, capsys) -> None:
    plan = _plan_file(tmp_path)
    assert main(["plan", "--evaluate", str(plan), "--data-dir", str(data_dir), "--json",
                 "--cluster", str(_cluster(tmp_path))]) == 0
    out = json.loads(capsys.readouterr().out)
    # the cluster file gives the profiled type its memory (16 GB) and price ($3.6/h)
    assert out["fits_memory"] is True and out["iteration_time_s"] > 0
    assert out["cost_per_iteration_usd"] == pytest.approx(3.6 / 3600 * out["iteration_time_s"], rel=1e-6)


def test_evaluate_without_cluster_names_the_type_and_the_fix(tmp_path: Path, data_dir: Path, cli_error) -> None:
    err = cli_error(["plan", "--evaluate", str(_plan_file(tmp_path)), "--data-dir", str(data_dir)])
    assert "mygpu" in err and "--cluster" in err


def test_evaluate_refuses_a_plan_the_cluster_cannot_hold(tmp_path: Path, data_dir: Path, cli_error) -> None:
    path = tmp_path / "big.json"
    Plan("tiny", 4, 2, (Stage(0, LAYERS, (ReplicaGroup("mygpu", "local", 1, 2),)),)).to_json(path)
    err = cli_error(["plan", "--evaluate", str(path), "--data-dir", str(data_dir), "--cluster",
                     str(_cluster(tmp_path, gpus=1))])
    assert "has 1 mygpu GPUs in zone local; the plan uses 2" in err


def test_a_plan_in_a_precision_its_profile_does_not_record_is_warned_about(tmp_path: Path, data_dir: Path) -> None:
    from heteroplan.cluster import GPUType

    gpu = {"mygpu": GPUType("mygpu", 16, 1, 3.6)}
    fp32 = Plan("tiny", 4, 2, (Stage(0, LAYERS, (ReplicaGroup("mygpu", "local", 1, 1),)),))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        simulate_plan(fp32, data_dir=data_dir, gpu_types=gpu)  # fp32: what the search assumes, no warning
    bf16 = Plan.from_dict({**fp32.to_dict(), "precision": "bf16"})
    with pytest.warns(PrecisionWarning, match="plan.precision='bf16'.*does not record its precision"):
        simulate_plan(bf16, data_dir=data_dir, gpu_types=gpu)


# ------------------------------------------------------------------ --model module:task from the working directory
_TASK = '''
import torch
from heteroplan.runtime.models import SequentialTask


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))


def batch(step, start, count):
    return torch.ones(count, 4), torch.zeros(count, dtype=torch.long)


def task():
    return SequentialTask(model, batch, torch.nn.functional.cross_entropy)
'''


def test_a_model_module_in_the_working_directory_is_found(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch", reason="--model needs torch")
    from heteroplan.runtime.models import load_task

    (tmp_path / "hp_user_task_47.py").write_text(_TASK)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "hp_user_task_47", raising=False)
    task = load_task("hp_user_task_47:task")
    assert len(task.build_model()) == 2 and sys.path[0] == os.getcwd()
    from heteroplan.errors import InputError

    with pytest.raises(InputError, match="cannot import it"):
        load_task("hp_no_such_module_47:task")


@pytest.mark.parametrize(("spec", "error"), [("os:system", "TypeError"), ("json:loads", "TypeError"),
                                             ("hp_failing_task_s24:task", "RuntimeError")])
def test_a_model_factory_that_fails_when_called_is_named_not_a_traceback(spec, error, tmp_path, monkeypatch,
                                                                         cli_error) -> None:
    """``--model os:system`` (a factory needing arguments) or one that raises: before, the
    factory's TypeError/RuntimeError came out of ``heteroplan run/profile/schedule`` as a traceback."""
    pytest.importorskip("torch", reason="--model needs torch")
    from heteroplan.errors import InputError
    from heteroplan.runtime.models import load_task

    (tmp_path / "hp_failing_task_s24.py").write_text("def task():\n    raise RuntimeError('no data here')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "hp_failing_task_s24", raising=False)
    with pytest.raises(InputError, match=rf"^--model='{spec}': calling it with no arguments failed: {error}: "):
        load_task(spec)
    assert f"--model='{spec}': calling it with no arguments failed: {error}" in cli_error(["run", "--model", spec])


# ------------------------------------------------------------------ the profiler's repeated timings
def _scripted_profile(monkeypatch, times: list[float]):
    torch = pytest.importorskip("torch", reason="the profiler needs torch")
    from heteroplan.runtime import profiler

    clock = iter(times * 10_000)

    def timed(self, fn):
        return next(clock), fn()

    monkeypatch.setattr(profiler._Timer, "__call__", timed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    return profiler.profile_layers(model, lambda m: torch.ones(m, 4), (1, 2), warmup=0, repeats=4, device="cpu",
                                   timing="layer")


def test_the_profiler_warns_when_repeated_timings_disagree(monkeypatch) -> None:
    pytest.importorskip("torch", reason="the profiler needs torch")
    from heteroplan.runtime.profiler import TimingSpreadWarning

    with pytest.warns(TimingSpreadWarning, match="more than 20% apart.*worst: layer"):
        _scripted_profile(monkeypatch, [0.001, 0.001, 0.004, 0.004])  # median 2.5 ms, MAD 1.5 ms = 60%


def test_the_profiler_is_quiet_when_repeated_timings_agree(monkeypatch) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profile = _scripted_profile(monkeypatch, [0.001, 0.0011, 0.001, 0.0009])  # 10% around 1 ms
    assert profile.compute[1][0][0] == pytest.approx(0.001)
