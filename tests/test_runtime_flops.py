"""Model FLOPs and MFU (issue 49): counted FLOPs against the analytic count, the one formula as
`heteroplan run` and `heteroplan plan` print it, the peaks of the GPU type table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.cli import main  # noqa: E402
from heteroplan.cluster import SAILOR_GPU_TYPES, ClusterError, GPUType  # noqa: E402
from heteroplan.errors import InputError  # noqa: E402
from heteroplan.perf.sailor_profiles import load_model_profile  # noqa: E402
from heteroplan.planner import simulate_plan  # noqa: E402
from heteroplan.planner.model.flops import (  # noqa: E402
    Utilization,
    model_flops_per_iteration,
    peak_tflops,
    plan_peak_tflops,
    recomputed_flops_per_sample,
    utilization,
)
from heteroplan.planner.plan import Plan, Precision, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig  # noqa: E402
from heteroplan.runtime.flops import task_forward_flops_per_layer, task_forward_flops_per_sample  # noqa: E402
from heteroplan.runtime.models import GPT_1_3B, GPT_320M, TinyGPTTask  # noqa: E402
from heteroplan.runtime.profiler import profile_layers  # noqa: E402

TYPES = {t.name: t for t in SAILOR_GPU_TYPES}
TINY = TinyGPTTask(vocab=256, seq_len=32, d_model=64, n_layers=2, n_heads=4)


def kaplan_iteration_flops(task: TinyGPTTask, samples: int) -> float:
    """The issue's yardstick, written independently of the counter: 6 x parameters x tokens plus
    attention (3 x 4 s^2 d per block and sample), parameters without the embedding tables."""
    non_embedding = task.parameter_count - (task.vocab + task.seq_len) * task.d_model
    attention = 3 * task.n_layers * 4 * task.seq_len ** 2 * task.d_model
    return samples * (6 * non_embedding * task.seq_len + attention)


@pytest.mark.parametrize("task", [GPT_320M, GPT_1_3B], ids=["320M", "1.3B"])
def test_bundled_models_count_the_analytic_flops(task: TinyGPTTask) -> None:
    with torch.device("meta"):
        model = task.build_model()
    assert sum(p.numel() for p in model.parameters()) == task.parameter_count
    counted = task_forward_flops_per_sample(task)
    assert counted == task.forward_flops_per_sample  # exact: the same matmuls, 2 FLOPs a multiply-add
    flops = model_flops_per_iteration(counted, 32)
    assert flops == pytest.approx(kaplan_iteration_flops(task, 32), rel=0.02)
    assert flops != pytest.approx(kaplan_iteration_flops(task, 32), rel=1e-4)  # biases, norms: not matmuls


def test_recomputed_flops_are_the_recomputing_stages_forwards() -> None:
    per_layer = task_forward_flops_per_layer(TINY)
    d, s, v = TINY.d_model, TINY.seq_len, TINY.vocab
    assert per_layer == (0.0, 24 * d * d * s + 4 * s * s * d, 24 * d * d * s + 4 * s * s * d, 2 * d * v * s)
    g = (ReplicaGroup("cpu", "local"),)
    plan = Plan("tiny", 8, 2, (Stage(0, 2, g, "full"), Stage(2, 4, g)))
    assert recomputed_flops_per_sample(per_layer, plan) == per_layer[0] + per_layer[1]
    assert recomputed_flops_per_sample(per_layer, Plan("tiny", 8, 2, (Stage(0, 4, g),))) == 0


def test_the_1_3b_recipe_is_1b_class() -> None:
    assert GPT_1_3B.parameter_count == 1_243_213_824 and GPT_320M.parameter_count == 319_621_120
    assert (GPT_1_3B.n_layers, GPT_1_3B.d_model) == (24, 2048)


def test_the_profiler_counts_every_layer_on_cpu_attention_included(tmp_path: Path) -> None:
    prof = profile_layers(TINY.build_model(), lambda m: TINY.batch(0, 0, m)[0], (1, 2), warmup=0, repeats=1,
                          loss_fn=lambda out: out.float().sum())
    d, s, v = TINY.d_model, TINY.seq_len, TINY.vocab
    block = 24 * d * d * s + 4 * s * s * d
    assert prof.forward_flops == (0, block, block, 2 * d * v * s)
    prof.write(tmp_path, "tiny", "H100-80")
    info = json.loads((tmp_path / "llm_info.json").read_text())
    assert [info["tiny"]["1"][str(i)]["forward_flops"] for i in range(4)] == list(prof.forward_flops)
    assert load_model_profile("tiny", tmp_path).forward_flops == tuple(float(f) for f in prof.forward_flops)
    for layer in info["tiny"]["1"].values():  # a profile written before the count still loads, without it
        layer.pop("forward_flops")
    (tmp_path / "llm_info.json").write_text(json.dumps(info))
    assert load_model_profile("tiny", tmp_path).forward_flops is None


def test_peaks_come_from_the_gpu_type_table_by_precision() -> None:
    h100 = TYPES["H100-80"]
    assert [peak_tflops(h100, p) for p in Precision] == [67.0, 494.7, 989.4]
    assert peak_tflops(TYPES["A100-40"], Precision.BF16) == 312.0
    assert "datasheet" in h100.peak_source
    total, note = plan_peak_tflops([(TYPES["A100-40"], 2), (h100, 1)], Precision.BF16)
    assert total == pytest.approx(2 * 312 + 989.4) and "A100-40" in note
    assert plan_peak_tflops([(TYPES["V100-16"], 1)], Precision.BF16) == (0.0, "no bf16 peak for GPU type V100-16")
    with pytest.raises(ClusterError, match="peak_tflops_bf16"):
        GPUType("x", 16, 1, peak_tflops_bf16=-1.0)


def test_mfu_is_model_flops_over_time_and_peak() -> None:
    u = utilization(1e9, 32, 0.128, 989.4, "H100")
    assert u.model_flops == 3 * 1e9 * 32
    assert u.achieved_tflops == pytest.approx(9.6e10 / 0.128 / 1e12)
    assert u.mfu == pytest.approx(u.achieved_tflops / 989.4)
    assert u.hfu == u.mfu and "HFU" not in u.describe()
    recomputing = utilization(1e9, 32, 0.128, 989.4, "H100", recomputed_flops_per_sample=4e8)
    assert recomputing.hardware_flops == 3 * 1e9 * 32 + 4e8 * 32 and recomputing.mfu == u.mfu
    assert recomputing.hfu == pytest.approx(recomputing.hardware_flops / 0.128 / 1e12 / 989.4)
    assert f"HFU {100 * recomputing.hfu:.1f}%" in recomputing.describe()
    assert "MFU: n/a (no peak)" in Utilization(1e12, 1.0, 0.0, "no peak").describe()
    with pytest.raises(InputError, match="seconds"):
        utilization(1e9, 32, 0.0)


def _numbers(text: str, pattern: str) -> tuple[float, ...]:
    match = re.search(pattern, text)
    assert match, text
    return tuple(float(g) for g in match.groups())


def test_heteroplan_run_prints_tflops_and_mfu(tmp_path: Path, capsys) -> None:
    args = ["run", "--pp", "1", "--dp", "1", "--mbs", "4", "--microbatches", "2", "--layers", "2", "--width", "64",
            "--heads", "4", "--seq-len", "32", "--steps", "3"]
    assert main([*args, "--json", "--peak-tflops", "0.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    task = TinyGPTTask(vocab=64, seq_len=32, d_model=64, n_layers=2, n_heads=4)
    expected = 3 * task.forward_flops_per_sample * 8 / out["median_iteration_s"] / 1e12
    assert out["utilization"]["achieved_tflops"] == pytest.approx(expected, rel=1e-9)
    assert out["utilization"]["mfu"] == pytest.approx(expected / 0.5, rel=1e-9)
    assert main(args) == 0
    text = capsys.readouterr().out
    flops, seconds, tflops = _numbers(text, r"utilization: ([0-9.e+]+) model FLOPs in ([0-9.e+-]+) s = ([0-9.e+-]+) TFLOP/s")
    (ms,) = _numbers(text, r"median ([0-9.]+) ms/iteration")
    assert flops == pytest.approx(3 * task.forward_flops_per_sample * 8, rel=1e-5)
    assert seconds * 1e3 == pytest.approx(ms, abs=0.05)  # the median iteration
    assert tflops == pytest.approx(flops / seconds / 1e12, rel=1e-5)
    assert "MFU: n/a (no peak for device cpu" in text


def test_heteroplan_plan_prints_the_predicted_mfu(tmp_path: Path, capsys) -> None:
    data = tmp_path / "prof"
    assert main(["profile", "--out", str(data), "--gpu-type", "H100-80", "--mbs", "2", "--repeats", "1", "--warmup",
                 "0", "--no-network", "--seq", "16"]) == 0
    capsys.readouterr()
    plan = Plan("tiny-gpt", 8, 2, (Stage(0, 6, (ReplicaGroup("H100-80", "local"),)),))
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_dict()))
    assert main(["plan", "--evaluate", str(tmp_path / "plan.json"), "--data-dir", str(data), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fwd = sum(load_model_profile("tiny-gpt", data).forward_flops)
    achieved = 3 * fwd * 8 / out["iteration_time_s"] / 1e12
    assert out["utilization"]["achieved_tflops"] == pytest.approx(achieved, rel=1e-9)
    assert out["utilization"]["mfu"] == pytest.approx(achieved / 67.0, rel=1e-9)  # fp32 peak of an H100
    recomputing = simulate_plan(Plan("tiny-gpt", 8, 2, (Stage(0, 6, (ReplicaGroup("H100-80", "local"),), "full"),)),
                           data_dir=data).utilization
    assert recomputing.hardware_flops == pytest.approx(recomputing.model_flops + fwd * 8, rel=1e-12)
    assert recomputing.hfu > recomputing.mfu
    assert main(["plan", "--model", "tiny-gpt", "--gbs", "8", "--gpus", "H100-80@us-central1-a=1", "--data-dir", str(data)]) == 0
    text = capsys.readouterr().out
    (predicted,) = _numbers(text, r"predicted: ([0-9.e+-]+) s/iteration")
    flops, seconds, tflops, mfu = _numbers(
        text, r"predicted ([0-9.e+]+) model FLOPs in ([0-9.e+-]+) s = ([0-9.e+-]+) TFLOP/s, MFU: ([0-9.]+)%")
    assert flops == pytest.approx(3 * fwd * 8, rel=1e-5) and seconds == pytest.approx(predicted, rel=1e-3)
    assert tflops == pytest.approx(flops / seconds / 1e12, rel=1e-5)
    assert mfu == pytest.approx(100 * tflops / 67.0, abs=0.06)


def test_run_config_refuses_bad_values() -> None:
    with pytest.raises(InputError, match="config.compile"):
        RunConfig(compile="yes")  # type: ignore[arg-type]
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(InputError, match="config.peak_tflops"):
            RunConfig(peak_tflops=bad)  # type: ignore[arg-type]
