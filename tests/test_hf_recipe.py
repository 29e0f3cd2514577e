"""The Hugging Face GPT-2 recipe of docs/runtime.md ("Your own model"), run as written but shrunk.

``transformers`` is not a dependency of heteroplan: the test skips without it (CI does not
install it). Where it runs, it executes the documented ``mymodel.py`` block (2 blocks, width 64,
sequence 32, vocabulary 256), trains a bf16 PP-2 plan that recomputes its first stage, and
compares the losses with single-process bf16 training of the same model.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")
pytest.importorskip("transformers", reason="the Hugging Face recipe needs transformers (not a heteroplan dependency)")

from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, run_plan, train_reference  # noqa: E402
from heteroplan.runtime.models import load_task  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "runtime.md"


@pytest.fixture
def recipe(tmp_path, monkeypatch) -> str:
    text = DOC.read_text()
    code = re.search(r"```python\n(# mymodel\.py\n.*?)```", text, re.S).group(1)
    code = code.replace("SEQ, VOCAB = 512, 8192", "SEQ, VOCAB = 32, 256")
    code = code.replace("n_layer=24, n_embd=1024, n_head=16", "n_layer=2, n_embd=64, n_head=4")
    (tmp_path / "mymodel.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the runtime's worker processes import it too
    sys.modules.pop("mymodel", None)
    return "mymodel:task"


def test_the_documented_gpt2_recipe_trains_a_recomputing_bf16_pipeline(recipe) -> None:
    task = load_task(recipe)
    layers = len(task.build_model())
    assert layers == 4  # embedding, 2 blocks, head
    config = RunConfig(steps=3, optimizer="adam", lr=1e-3)
    plan = Plan("hf-gpt2", 8, 2, (Stage(0, 2, (ReplicaGroup("cpu", "local"),), "full"),
                                 Stage(2, 4, (ReplicaGroup("cpu", "local"),))), precision="bf16")
    result = run_plan(plan, task, config)
    _, reference = train_reference(task, 8, config, precision="bf16")
    assert result.losses == pytest.approx(reference, rel=5e-3)
