"""Every example script and notebook runs and shows what it promises (small inputs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, cwd: Path) -> str:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def finished_column(table: str, policy: str) -> int:
    for line in table.splitlines():
        cells = line.split()
        if cells and cells[0] == policy:
            return int(cells[1])
    raise AssertionError(f"no row for {policy} in\n{table}")


def test_compare_policies_example(tmp_path: Path) -> None:
    out = run_example("compare_policies.py", "--jobs", "8", "--out", str(tmp_path / "plots"), cwd=tmp_path)
    for policy in ("sia", "pollux", "fifo"):
        assert finished_column(out, policy) == 8
    assert (tmp_path / "plots" / "jct_cdf.png").stat().st_size > 1000
    assert (tmp_path / "plots" / "gpus_sia.png").stat().st_size > 1000


def test_custom_policy_example(tmp_path: Path) -> None:
    out = run_example("custom_policy.py", "--jobs", "6", cwd=tmp_path)
    assert finished_column(out, "maxmin") == 6 and finished_column(out, "sia") == 6


def test_own_loop_example(tmp_path: Path) -> None:
    out = run_example("own_loop.py", "--policy", "fifo", "--jobs", "4", "--verbose", cwd=tmp_path)
    assert "start" in out and "fifo: average JCT" in out


@pytest.mark.parametrize("notebook", sorted(p.name for p in (EXAMPLES / "notebooks").glob("*.ipynb")))
def test_notebooks_execute(notebook: str, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(EXAMPLES / "notebooks" / notebook, as_version=4)
    os.environ.setdefault("MPLBACKEND", "Agg")
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    # Every notebook ends by printing a check line of the form "OK: ..." from its own assertions.
    last = [o.get("text", "") for o in nb.cells[-1].get("outputs", []) if o.output_type == "stream"]
    assert any("OK:" in t for t in last), last


def test_fit_goodput_example(tmp_path: Path) -> None:
    out = run_example("fit_goodput.py", cwd=tmp_path)
    median = float(out.strip().splitlines()[-1].rsplit(" ", 1)[1])
    assert median < 0.10  # held-out configurations predicted within 10% (median)
    assert "GPUs" in out and "goodput" in out


def front_rows(out: str) -> list[tuple[float, float, int]]:
    """($/iter, iter/s, GPUs) of the Pareto table that ``ParetoFront.describe`` prints."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Pareto front")) + 2
    rows = []
    for line in lines[start:]:
        cells = line.split()
        if len(cells) < 5 or not cells[0][0].isdigit():
            break
        rows.append((float(cells[0]), float(cells[1]), int(cells[2])))
    return rows


def test_plan_geo_budget_example(tmp_path: Path) -> None:
    out = run_example("plan_geo_budget.py", "--budget", "0.07", "--out", str(tmp_path / "plots"), cwd=tmp_path)
    assert "zones used: 2 (us-central1-a, us-central1-b)" in out
    cost = float(out.split("cost: $", 1)[1].split("/", 1)[0])
    assert cost <= 0.07
    thr = float(out.split(" iter/s, $", 1)[0].rsplit("= ", 1)[1])
    rows = front_rows(out)
    assert len(rows) >= 4
    costs, speeds = [r[0] for r in rows], [r[1] for r in rows]
    assert costs == sorted(costs) and speeds == sorted(speeds)  # the front is monotone
    # the budget plan is the front's fastest point within the budget (4 significant digits printed)
    assert max(s for c, s in zip(costs, speeds, strict=True) if c <= 0.07) == pytest.approx(thr, rel=1e-3)
    for name in ("pareto_front.png", "pipeline_timeline.png"):
        assert (tmp_path / "plots" / name).stat().st_size > 10_000


def test_train_plan_example_matches_single_process(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")
    out = run_example("train_plan.py", "--steps", "4", cwd=tmp_path)
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit() and len(line.split()) == 4]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4] and [int(r[1]) for r in rows] == [4, 4, 2, 2]
    assert all(abs(float(r[2]) - float(r[3])) < 1e-6 for r in rows)
    assert "resumed at iteration 2" in out
    assert float(out.rsplit("single process:", 1)[1]) < 1e-9
