"""benchmarks/runtime_speed.py on CPU with a tiny GPT (so the GPU benchmark does not rot): a row per
loop and variant, TFLOP/s and MFU from the one formula on each row's time, heteroplan's rows with
their closed-loop errors (memory within 5% on CPU), and the ratio to plain torch.compile. Times on
a shared CI machine are not asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.runtime.compiled import compile_unavailable  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "runtime_speed.py"
TINY_FORWARD_FLOPS = 2 * (24 * 32 * 32 * 16 + 4 * 16 * 16 * 32) + 2 * 32 * 64 * 16  # 2 blocks, width 32, seq 16, vocab 64


def test_the_speed_benchmark_runs_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--gbs", "8", "--mbs", "4", "--steps", "3",
           "--repeats", "1", "--precision", "fp32", "--peak-tflops", "0.01", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    compiled = compile_unavailable("cpu") is None
    expected = ["plain eager", "plain compile", "heteroplan eager", "heteroplan compiled"] if compiled \
        else ["plain eager", "heteroplan eager"]
    assert [r["variant"] for r in data["rows"]] == expected, data["rows"]
    for row in data["rows"]:
        tflops = 3 * TINY_FORWARD_FLOPS * 8 / row["iteration s"] / 1e12
        assert row["TFLOP/s"] == pytest.approx(tflops, rel=1e-9)
        assert row["MFU"] == f"{100 * tflops / 0.01:.1f}%"
        if row["variant"].startswith("heteroplan"):
            assert row["time error"] == f"{(row['predicted s'] - row['iteration s']) / row['iteration s']:+.1%}"
            assert abs(float(row["memory error"].rstrip("%"))) < 5.0, row
    if compiled:
        best = min(data["rows"][2:], key=lambda r: r["iteration s"])
        ratio = data["ratios"]["tiny"]
        assert ratio["best"] == best["variant"]
        assert ratio["plain_compile_over_best"] == pytest.approx(data["rows"][1]["iteration s"] / best["iteration s"])
        assert f"= {ratio['plain_compile_over_best']:.3f}" in done.stdout
