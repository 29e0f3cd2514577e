"""docs/contributing.md's recipe for a parallelism dimension, followed once: its applier (static
loss scaling) added to the runtime's applier list trains as one process does."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, train_reference  # noqa: E402
from heteroplan.runtime.appliers import APPLIERS, StageBuild, StageContext  # noqa: E402
from heteroplan.runtime.tensor_parallel import create_groups  # noqa: E402
from heteroplan.runtime.worker import StageTrainer  # noqa: E402

TASK = TinyGPTTask(n_layers=2, dtype="float64")  # 4 plan layers
GBS = 8


class Logged:
    """An applier that notes each call of the one it wraps in ``log``."""

    def __init__(self, inner: object, log: list[tuple[str, str]]) -> None:
        self.inner, self.log = inner, log

    def check(self, plan, config, model_dtype) -> None:
        self.log.append(("check", type(self.inner).__name__))
        self.inner.check(plan, config, model_dtype)

    def apply(self, build: StageBuild, ctx: StageContext) -> None:
        self.log.append(("apply", type(self.inner).__name__))
        self.inner.apply(build, ctx)


def one_gpu_plan() -> Plan:
    return Plan("tiny-gpt", GBS, 2, (Stage(0, 4, (ReplicaGroup("cpu", "local"),)),))


def test_a_new_applier_runs_in_its_place_and_trains_as_one_process(one_rank_group, docs_block) -> None:
    scale_applier = docs_block("contributing.md", "class LossScaleApplier")["LossScaleApplier"]
    applier = scale_applier(1024.0)
    log: list[tuple[str, str]] = []
    appliers = tuple(Logged(a, log) for a in (*APPLIERS, applier))
    config = RunConfig(steps=3, lr=0.05, momentum=0.9, pipeline="heteroplan")  # 4 microbatches of 2
    plan = one_gpu_plan()
    trainer = StageTrainer(plan, TASK, config, 0, create_groups(plan), appliers=appliers)
    losses = [trainer.step(step)[0].loss for step in range(config.steps)]
    names = [type(a).__name__ for a in (*APPLIERS, applier)]
    assert log == [("check", n) for n in names] + [("apply", n) for n in names]
    model, reference = train_reference(TASK, GBS, config)
    assert losses == pytest.approx([1024.0 * loss for loss in reference], rel=1e-12)
    state, expected = trainer.stage.state_dict(), model.state_dict()
    assert set(state) == set(expected)
    assert max(float((state[k] - v).abs().max()) for k, v in expected.items()) < 1e-12
    # without the hooks' unscaling the update would be 1024 times larger: the test would see it
    assert max(float((state[k] - v).abs().max()) for k, v in TASK.build_model().state_dict().items()) > 1e-6


def test_a_new_applier_refuses_what_it_cannot_run_before_the_stage_is_built(one_rank_group, docs_block) -> None:
    scale_applier = docs_block("contributing.md", "class LossScaleApplier")["LossScaleApplier"]
    plan = one_gpu_plan()
    with pytest.raises(InputError, match="loss_scale.*power of two"):
        StageTrainer(plan, TASK, RunConfig(pipeline="heteroplan"), 0, create_groups(plan),
                     appliers=(*APPLIERS, scale_applier(1000.0)))
