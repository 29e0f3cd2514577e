"""benchmarks/closed_loop.py on CPU, small model (what CI runs of it): profile -> simulate -> run.

The script's one-GPU matrix at microbatch 4, fp32, with and without recomputation: it writes a
row per plan, and the planner's predicted peak memory of every rank is within 5% of the
runtime's measured one (torch's profiler on CPU). Times on a shared CI machine are not asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "closed_loop.py"


def test_closed_loop_predicts_every_ranks_peak_memory_within_5_percent(tmp_path) -> None:
    out = tmp_path / "closed_loop.json"
    cmd = [sys.executable, str(SCRIPT), "--mbs", "4", "--precisions", "fp32", "--recompute", "none", "full",
           "--layers", "2", "--steps", "3", "--repeats", "1", "--sweeps", "1", "--warmup", "0", "--time-recomputed",
           "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["plan"] for r in rows] == ["1 GPU mbs 4 fp32 none", "1 GPU mbs 4 fp32 full"]
    for row in rows:
        predicted = [t["total"] for t in row["predicted_memory_terms"]]  # GB
        measured = row["peak_allocated_bytes"]
        assert len(predicted) == len(measured) == 1
        assert predicted[0] * 1e9 == pytest.approx(measured[0], rel=0.05), row["plan"]
