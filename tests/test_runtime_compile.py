"""The compiled path (issue 49): ``RunConfig(compile=True)`` trains to the parameters of the eager
run (inductor's CPU backend), the profiler measures compiled layers, and what cannot be compiled
is refused with an InputError naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan  # noqa: E402
from heteroplan.runtime import compiled as compiled_mod  # noqa: E402
from heteroplan.runtime.profiler import profile_layers  # noqa: E402
from heteroplan.runtime.worker import pipeline_choice  # noqa: E402

UNAVAILABLE = compiled_mod.compile_unavailable("cpu")
needs_compile = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"torch.compile on CPU: {UNAVAILABLE}")
TASK = TinyGPTTask(vocab=64, seq_len=16, d_model=32, n_layers=1, n_heads=2)
TASK64 = TinyGPTTask(vocab=64, seq_len=16, d_model=32, n_layers=1, n_heads=2, dtype="float64")


def one_gpu(recompute: str = "none", tp: int = 1) -> Plan:
    return Plan("tiny", 8, 4, (Stage(0, TASK.num_layers, (ReplicaGroup("cpu", "local", tp),), recompute),))


@needs_compile
def test_a_compiled_run_trains_to_the_eager_parameters(tmp_path: Path) -> None:
    """float64, SGD with momentum, 3 steps, every layer recomputed: compiled kernels reorder float
    sums, so the parameters agree to rounding, not bit for bit; the checkpoint's names are the
    eager model's. (Adam would amplify the rounding of near-zero gradients: m / sqrt(v).)"""
    plan = one_gpu("full")
    runs = {}
    for compile in (False, True):
        config = RunConfig(steps=3, lr=0.05, momentum=0.9, compile=compile, checkpoint_dir=str(tmp_path / str(compile)))
        runs[compile] = run_plan(plan, TASK64, config)
    eager, compiled = (runs[c].checkpoint.model_state() for c in (False, True))
    assert eager.keys() == compiled.keys() == set(TASK64.build_model().state_dict())
    start = TASK64.build_model().state_dict()
    moved = max(float((eager[k] - start[k]).abs().max()) for k in eager)
    diff = max(float((eager[k] - compiled[k]).abs().max()) for k in eager)
    assert moved > 1e-3 and diff < 1e-9  # it trained, and the same way
    assert runs[True].losses == pytest.approx(runs[False].losses, rel=1e-9)


@needs_compile
def test_the_profiler_measures_compiled_layers() -> None:
    model = TASK.build_model()
    prof = profile_layers(model, lambda m: TASK.batch(0, 0, m)[0], (2,), warmup=1, repeats=1, compile=True)
    eager = profile_layers(model, lambda m: TASK.batch(0, 0, m)[0], (2,), warmup=0, repeats=1)
    assert prof.compiled and not eager.compiled and prof.llm_info()["0"]["compiled"] is True
    assert prof.forward_flops == eager.forward_flops and sum(prof.forward_flops) == TASK.forward_flops_per_sample
    assert sum(f + b for f, b, _ in prof.compute[2]) > 0


def test_what_cannot_be_compiled_is_refused(monkeypatch) -> None:
    with pytest.raises(InputError, match="config.compile.*tensor-parallel"):
        pipeline_choice(one_gpu(tp=2), RunConfig(compile=True))
    monkeypatch.setattr(compiled_mod, "compile_unavailable", lambda device: "no C++ compiler")
    with pytest.raises(InputError, match="config.compile.*no C\\+\\+ compiler"):
        pipeline_choice(one_gpu(), RunConfig(compile=True))
    with pytest.raises(InputError, match="compile.*no C\\+\\+ compiler"):
        profile_layers(TASK.build_model(), lambda m: TASK.batch(0, 0, m)[0], (1,), compile=True)
    with pytest.raises(InputError, match="compile"):
        profile_layers(TASK.build_model(), lambda m: TASK.batch(0, 0, m)[0], (1,), compile="yes")
    assert pipeline_choice(one_gpu(), RunConfig()).engine  # without compile nothing is checked
