"""Plan files end to end: ``heteroplan plan --out`` -> ``heteroplan run --plan``, and Sailor's plan_config files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime needs torch")

from heteroplan.cli import main  # noqa: E402
from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner.plan import Plan  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, train_reference  # noqa: E402
from heteroplan.runtime.layout import load_plan  # noqa: E402
from heteroplan.runtime.netbench import NetworkMeasurement  # noqa: E402
from heteroplan.runtime.profiler import profile_layers  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "sailor"


def printed_losses(out: str) -> list[float]:
    """Losses of the ``step loss ms sync`` table that ``heteroplan run`` prints."""
    rows = [line.split() for line in out.splitlines()]
    return [float(r[1]) for r in rows if len(r) == 4 and r[0].isdigit()]


def test_plan_out_then_run_plan_on_a_profiled_small_model(tmp_path: Path, capsys) -> None:
    task = TinyGPTTask(n_layers=2)
    prof = profile_layers(task.build_model(), lambda mbs: task.batch(0, 0, mbs)[0], (1, 2, 4), warmup=0, repeats=1)
    prof.write(tmp_path / "prof", "tiny-gpt", "cpu")
    NetworkMeasurement((1_000_000,), (2.0,), (5e-4,), (0.0, 0.0, 2.0), 2e9).write(tmp_path / "prof", "cpu", "local")
    cluster = {"name": "here", "gpu_types": [{"name": "cpu", "memory_gb": 16, "gpus_per_node": 4, "price_per_hour": 0.1}],
               "counts": {"cpu@local": 4}, "zones": ["local"]}
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    plan_args = ["plan", "--model", "tiny-gpt", "--gbs", "8", "--cluster", str(tmp_path / "cluster.json"),
                 "--data-dir", str(tmp_path / "prof")]
    assert main([*plan_args, "--out", str(tmp_path / "p.json"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    plan = load_plan(tmp_path / "p.json")
    assert plan == Plan.from_dict(printed["plan"])
    (tmp_path / "printed.json").write_text(json.dumps(printed))
    assert load_plan(tmp_path / "printed.json") == plan  # what `plan --json` prints runs too

    assert main(["run", "--plan", str(tmp_path / "p.json"), "--steps", "2", "--optimizer", "sgd", "--lr", "0.05"]) == 0
    out = capsys.readouterr().out
    assert f"{plan.num_gpus} processes on this machine" in out
    _, losses = train_reference(task, 8, RunConfig(steps=2, lr=0.05))
    assert printed_losses(out) == pytest.approx(losses, abs=2e-4)


def test_sailor_plan_config_with_tp4_runs_its_plan(capsys) -> None:
    """Sailor's OPT-350 validation plan: 1 stage of 26 layers on TP 4 (4 processes, one per GPU)."""
    path = DATA / "plan_config_N1_D1_M4_G1.json"
    plan = load_plan(path)
    assert (plan.pp, plan.dp, plan.num_gpus, plan.num_layers) == (1, 1, 4, 26)
    assert main(["run", "--plan", str(path), "--steps", "1", "--optimizer", "sgd", "--lr", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "24 blocks, width 32, 4 heads" in out
    _, losses = train_reference(TinyGPTTask(n_layers=24, n_heads=4), 1, RunConfig(steps=1, lr=0.05))
    assert printed_losses(out) == pytest.approx(losses, abs=2e-4)


def test_bad_plan_files_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="bad.json"):
        load_plan(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="JSON object"):
        load_plan(tmp_path / "list.json")
    (tmp_path / "partial.json").write_text(json.dumps({"model": "m", "global_batch_size": 8}))
    with pytest.raises(InputError, match="malformed plan"):
        load_plan(tmp_path / "partial.json")
