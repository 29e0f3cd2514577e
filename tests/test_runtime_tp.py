"""Tensor parallelism (DTensor, gloo, float64) composed with pipeline stages and heterogeneous data
parallelism matches single-process training, and checkpoints reshard between layouts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime needs torch")

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan, train_reference  # noqa: E402
from heteroplan.runtime.layout import neighbours, rank_layout, stage_tp, world_size  # noqa: E402

DEVICE = os.environ.get("HETEROPLAN_TEST_DEVICE", "cpu")
TASK = TinyGPTTask(n_layers=2, d_model=16, n_heads=2, dtype="float64")  # 4 plan layers
GBS = 8


def max_param_diff(state: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    ref = model.state_dict()
    assert set(state) == set(ref)
    return max(float((state[k] - v).abs().max()) for k, v in ref.items())


def group(tp: int, count: int, gpu: str = "cpu") -> ReplicaGroup:
    return ReplicaGroup(gpu, "local", tp, count)


def test_layout_numbers_tp_ranks_of_a_replica_together_and_links_full_activations() -> None:
    plan = Plan("m", GBS, 2, (Stage(0, 2, (group(2, 2),)), Stage(2, 4, (group(1, 2),))), (3, 1))
    layout = rank_layout(plan)
    assert world_size(plan) == plan.num_gpus == 6
    assert [(r.stage, r.replica, r.tp_index) for r in layout] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 1, 0)]
    assert [r.num_microbatches for r in layout] == [3, 3, 1, 1, 3, 1]
    # TP 2 -> TP 1: rank 0 feeds the single rank of its replica, rank 1 only takes gradients from it
    assert neighbours(plan, layout[0], +1, "destination") == [4] and neighbours(plan, layout[1], +1, "destination") == []
    assert neighbours(plan, layout[1], +1, "source") == [4] and neighbours(plan, layout[3], +1, "source") == [5]
    assert neighbours(plan, layout[5], -1, "source") == [2] and neighbours(plan, layout[5], -1, "destination") == [2, 3]
    mixed = Plan("m", GBS, 2, (Stage(0, 4, (group(2, 1), group(1, 1, "gpu-b"))),))
    with pytest.raises(InputError, match="one tensor-parallel degree"):
        stage_tp(mixed)  # what needs one degree per stage (torch's pipelines) refuses a mixed stage
    assert [(r.replica, r.tp_index, r.tp) for r in rank_layout(mixed)] == [(0, 0, 2), (0, 1, 2), (1, 0, 1)]


def test_pp2_dp2_tp2_matches_single_process_and_rescales_to_tp1_dp4(tmp_path: Path) -> None:
    """8 ranks: PP 2 x DP 2 x TP 2, replicas running 3 and 1 microbatches, give the parameters of one
    process; its checkpoint (sharded weights and both of Adam's moments, DTensor shards) then resumes
    on TP 1 x DP 4 (4 ranks, one stage) and the losses continue exactly."""
    config = RunConfig(device=DEVICE, steps=5, optimizer="adam", lr=0.01, checkpoint_dir=str(tmp_path))
    model3, losses3 = train_reference(TASK, GBS, RunConfig(**{**config.__dict__, "steps": 3}))
    model5, losses5 = train_reference(TASK, GBS, config)
    plan = Plan("tiny-gpt", GBS, 2, (Stage(0, 2, (group(2, 1, "fast"), group(2, 1, "slow"))),
                                     Stage(2, 4, (group(2, 1, "fast"), group(2, 1, "slow")))), (3, 1))
    first = run_plan(plan, TASK, RunConfig(**{**config.__dict__, "steps": 3}))
    assert first.world_size == 8 and first.final_step == 3
    assert first.pipeline.startswith("torch: replica 0 Schedule1F1B x 3 microbatches, replica 1 ScheduleGPipe x 1")
    assert first.losses == pytest.approx(losses3, rel=1e-9)
    assert max_param_diff(first.checkpoint.model_state(), model3) < 1e-9
    second = run_plan(Plan("tiny-gpt", GBS, 2, (Stage(0, 4, (group(1, 4),)),)), TASK, config)
    assert second.world_size == 4 and second.start_step == 3 and second.pipeline.startswith("torch:")
    assert second.losses == pytest.approx(losses5[3:], rel=1e-9)
    assert max_param_diff(second.checkpoint.model_state(), model5) < 1e-9


def test_stages_of_different_tp_degrees_match_single_process(tmp_path: Path) -> None:
    """TP 2 then TP 1 (3 ranks): the single rank of stage 1 feeds its gradient to both TP ranks."""
    config = RunConfig(device=DEVICE, steps=2, lr=0.05, checkpoint_dir=str(tmp_path))
    plan = Plan("tiny-gpt", GBS, 4, (Stage(0, 2, (group(2, 1),)), Stage(2, 4, (group(1, 1),))))
    result = run_plan(plan, TASK, config)
    assert result.pipeline.startswith("heteroplan: replica 0 1f1b x 2")  # torch's PipelineStage cannot fan out
    model, losses = train_reference(TASK, GBS, config)
    assert result.losses == pytest.approx(losses, rel=1e-9)
    assert max_param_diff(result.checkpoint.model_state(), model) < 1e-9


def test_tensor_parallel_profile_holds_one_shard_and_the_planner_reads_it(tmp_path: Path) -> None:
    """One rank of a TP-2 group: blocks hold half of their sharded parameters, the full activations
    leave every rank, and the planner loads the tp = 2 entries next to tp = 1."""
    from heteroplan.perf.sailor_profiles import load_model_profile
    from heteroplan.runtime.profile_tp import profile_tensor_parallel
    from heteroplan.runtime.profiler import profile_layers

    task = TinyGPTTask(n_layers=1, d_model=16, n_heads=2)
    one = profile_layers(task.build_model(), lambda m: task.batch(0, 0, m)[0], (1, 2), warmup=0, repeats=1)
    two = profile_tensor_parallel(task, 2, (1, 2), warmup=0, repeats=1)
    d = task.d_model
    replicated = 2 * 2 * d + 2 * d  # two layer norms; the biases of the row-parallel proj and mlp.2
    assert two.params_floats[1] == (one.params_floats[1] - replicated) // 2 + replicated
    assert (two.params_floats[0], two.params_floats[2]) == (one.params_floats[0], one.params_floats[2])
    assert two.act_output_floats == one.act_output_floats
    one.write(tmp_path, "g", "cpu")
    two.write(tmp_path, "g", "cpu", tp=2)
    profile = load_model_profile("g", tmp_path)
    assert sorted(profile.params) == [1, 2] and profile.has("cpu", 2, 2)
    assert list(profile.params[2]) == list(two.params_floats)
