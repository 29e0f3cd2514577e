"""The documentation builds with warnings as errors, and its quickstart code runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_docs_build_strict(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "index.html").exists()
    # math is MathML made at build time: nothing left for a CDN script to typeset
    hadar = (tmp_path / "site" / "hadar" / "index.html").read_text()
    assert "<math" in hadar and 'class="arithmatex"' not in hadar
    pages = [p.read_text() for p in (tmp_path / "site").rglob("*.html")]
    assert not any("mathjax" in p.lower() or "fonts.googleapis" in p for p in pages)


def test_quickstart_code_blocks_run() -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 4
    for code in blocks:
        namespace: dict[str, object] = {}
        exec(compile(code, "quickstart.md", "exec"), namespace)  # noqa: S102 - our own docs


def test_jupyter_page_code_blocks_run(tmp_path: Path, monkeypatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "jupyter.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 3
    namespace: dict[str, object] = {}
    for code in blocks:  # the third block uses the second one's pool
        exec(compile(code, "jupyter.md", "exec"), namespace)  # noqa: S102 - our own docs
    front, result = namespace["front"], namespace["result"]
    assert [r.summary().finished for r in namespace["results"]] == [6, 6]  # the summary block
    assert result.cost_per_iteration_usd <= 0.07
    # the page's claims: the budget plan is on the front and pipelines over both A100 zones
    assert any(abs(p.throughput - result.throughput_iter_s) < 1e-9 for p in front)
    assert {z for _, z in result.plan.gpus_by_type_zone()} == {"us-central1-a", "us-central1-b"}
    assert list(tmp_path.iterdir()) == []  # the docs' code writes no files


def test_runtime_page_code_blocks_run(tmp_path: Path, monkeypatch) -> None:
    """The runtime guide's examples train for real and end where the page says."""
    pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "runtime.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "__main__" in b]
    assert len(blocks) == 5  # plan executor, round executor, profiler + planner, calibration, GPU recipe
    plan_ns: dict[str, object] = {"__name__": "__main__"}
    exec(compile(blocks[0], "runtime.md", "exec"), plan_ns)  # noqa: S102 - our own docs
    result = plan_ns["result"]
    assert result.final_step == 20 and result.checkpoint.step == 20 and result.losses[-1] < result.losses[0]
    rounds_ns: dict[str, object] = {"__name__": "__main__"}
    exec(compile(blocks[1], "runtime.md", "exec"), rounds_ns)  # noqa: S102 - our own docs
    assert all(o.finish_time is not None and o.steps_done == 200 for o in rounds_ns["outcomes"].values())
    exec(compile(blocks[2], "runtime.md", "exec"), {"__name__": "__main__"})  # noqa: S102 - asserts inside
    assert (tmp_path / "my-profile" / "profiles" / "my-lm" / "cpu.json").is_file()
    # the calibration block imports cleanly as a module (its 30 measured rounds run under the guard)
    exec(compile(blocks[3], "runtime.md", "exec"), {"__name__": "docs"})  # noqa: S102 - our own docs
    # the GPU recipe, on this CPU: device cpu, no graphs, a tiny model in place of the 320M GPT
    recipe = blocks[4]
    for gpu, cpu in [('device="cuda"', 'device="cpu"'), ("cuda_graphs=True", "cuda_graphs=False"),
                     ("TinyGPTTask(vocab=8192, seq_len=512, d_model=1024, n_layers=24, n_heads=16)",
                      "TinyGPTTask(vocab=64, seq_len=16, d_model=32, n_layers=2, n_heads=2)")]:
        assert gpu in recipe
        recipe = recipe.replace(gpu, cpu)
    recipe_ns: dict[str, object] = {"__name__": "__main__"}
    exec(compile(recipe, "runtime.md", "exec"), recipe_ns)  # noqa: S102 - our own docs
    info = json.loads((tmp_path / "gpu-profile" / "llm_info.json").read_text())
    assert info["gpt-bf16"]["1"]["0"]["precision"] == "bf16" and info["gpt-bf16"]["1"]["0"]["cuda_graphs"] is False
    assert (tmp_path / "gpu-profile" / "profiles" / "gpt-bf16" / "H100.json").is_file()


@pytest.mark.parametrize("page", ["model", "sailor", "goodput", "hadar", "own_loop"])
def test_guide_code_blocks_run(page: str, tmp_path: Path, monkeypatch) -> None:
    """Every Python block of the page runs as written (one namespace per page, in order),
    from any directory: no path into the checkout (an installed wheel has no tests/ or docs/)."""
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / f"{page}.md").read_text(), flags=re.S)
    assert blocks
    namespace: dict[str, object] = {"__name__": "__main__"}
    for code in blocks:
        exec(compile(code, f"{page}.md", "exec"), namespace)  # noqa: S102 - our own docs
