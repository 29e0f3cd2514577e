"""The runtime trains what Plan alone could not run: stages whose replicas differ in TP degree, and
sets of independent pipelines (each its own depth, layer split and batch share), exactly as one
process trains the whole batch (gloo, CPU processes, float64); checkpoints move between them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the runtime needs torch: pip install torch==2.13.0 (CPU wheel: "
                            "--index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner.pipeline_set import PipelineSet  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan, train_reference  # noqa: E402
from heteroplan.runtime.layout import (  # noqa: E402
    load_run,
    neighbours,
    rank_layout,
    run_pipelines,
    run_world_size,
)
from heteroplan.runtime.segment_sync import plan_segments, uses_segment_sync  # noqa: E402

TASK = TinyGPTTask(n_layers=2, d_model=16, n_heads=2, dtype="float64")  # 4 plan layers
GBS = 8


def group(tp: int, count: int = 1, gpu: str = "cpu") -> ReplicaGroup:
    return ReplicaGroup(gpu, "local", tp, count)


def pipeline(gbs: int, cuts: list[int], tps: list[int], mbs: int = 2) -> Plan:
    """One pipeline of one replica: stages between ``cuts``, stage ``s`` on TP ``tps[s]``."""
    return Plan("tiny-gpt", gbs, mbs, tuple(Stage(a, b, (group(t),)) for a, b, t in zip(cuts, cuts[1:], tps, strict=False)))


def max_param_diff(state: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    ref = model.state_dict()
    assert set(state) == set(ref)
    return max(float((state[k] - v).abs().max()) for k, v in ref.items())


def test_a_mixed_stage_numbers_each_replicas_tp_ranks_together_and_links_them_replica_by_replica() -> None:
    plan = Plan("m", GBS, 2, (Stage(0, 2, (group(2, 1, "slow"), group(1, 1, "fast"))),
                              Stage(2, 4, (group(1, 1, "slow"), group(2, 1, "fast")))), (1, 3))
    layout = rank_layout(plan)
    assert run_world_size(plan) == plan.num_gpus == 6
    assert [(r.stage, r.replica, r.tp_index, r.tp) for r in layout] == [
        (0, 0, 0, 2), (0, 0, 1, 2), (0, 1, 0, 1), (1, 0, 0, 1), (1, 1, 0, 2), (1, 1, 1, 2)]
    assert [r.sample_offset for r in layout] == [0, 0, 2, 0, 2, 2]
    # replica 0: TP 2 -> TP 1 (rank 0 feeds rank 3, rank 3 returns gradients to both); replica 1: TP 1 -> TP 2
    assert neighbours(plan, layout[0], +1, "destination") == [3] and neighbours(plan, layout[1], +1, "destination") == []
    assert neighbours(plan, layout[3], -1, "destination") == [0, 1]
    assert neighbours(plan, layout[2], +1, "destination") == [4, 5]
    assert neighbours(plan, layout[4], -1, "source") == [2] and neighbours(plan, layout[5], -1, "source") == [2]
    assert uses_segment_sync(run_pipelines(plan))
    assert [(s.first, s.last, s.holders, s.sharded) for s in plan_segments(run_pipelines(plan))] == [
        (0, 2, ((0, 1), (2,)), False), (2, 4, ((3,), (4, 5)), False)]


def test_a_set_takes_consecutive_ranks_and_samples_and_its_segments_are_the_sets() -> None:
    pset = PipelineSet((pipeline(6, [0, 1, 4], [1, 1]), pipeline(2, [0, 3, 4], [2, 1])))
    slots = run_pipelines(pset)
    assert [(s.rank_offset, s.sample_offset, s.batch_size, s.world) for s in slots] == [(0, 0, 8, 5), (2, 6, 8, 5)]
    second = rank_layout(slots[1].plan, 2, 6)
    assert [(r.rank, r.sample_offset) for r in second] == [(2, 6), (3, 6), (4, 6)]
    # the second pipeline's TP 2 -> TP 1 boundary links its own ranks (offset 2), not the first pipeline's
    assert neighbours(slots[1].plan, second[0], +1, "destination", 2) == [4]
    assert neighbours(slots[1].plan, second[2], -1, "destination", 2) == [2, 3]
    assert neighbours(slots[1].plan, second[1], +1, "source", 2) == [4]
    segments = plan_segments(slots)
    assert tuple((s.first, s.last) for s in segments) == pset.segments() == ((0, 1), (1, 3), (3, 4))
    assert [s.holders for s in segments] == [((0,), (2, 3)), ((1,), (2, 3)), ((1,), (4,))]
    assert [s.sharded for s in segments] == [False, False, True]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(1, 5), max_size=3), st.lists(st.integers(1, 2), min_size=1, max_size=2),
                          st.integers(1, 3)), min_size=1, max_size=3))
def test_every_replica_of_every_pipeline_holds_each_layer_once_and_every_sample_is_trained_once(specs) -> None:
    """Random sets (cuts, per-replica TP, microbatches): each segment has one holder per replica of
    the set, each rank is in the segments of its own layers only, and the samples of all replicas
    of any one layer are the global batch, once each."""
    plans = []
    for cuts, tps, micro in specs:
        bounds = [0, *sorted(cuts), 6]
        stages = tuple(Stage(a, b, tuple(group(t) for t in tps)) for a, b in zip(bounds, bounds[1:], strict=False))
        plans.append(Plan("m", 2 * micro * len(tps), 2, stages))
    pset = PipelineSet(tuple(plans))
    slots = run_pipelines(pset)
    layouts = [r for s in slots for r in rank_layout(s.plan, s.rank_offset, s.sample_offset)]
    assert sorted(r.rank for r in layouts) == list(range(run_world_size(pset)))
    for seg in plan_segments(slots):
        assert len(seg.holders) == pset.replicas
        held = {r for h in seg.holders for r in h}
        assert held == {r.rank for r in layouts if r.first_layer <= seg.first < r.last_layer}
        samples = sorted(x for r in layouts if r.tp_index == 0 and r.first_layer <= seg.first < r.last_layer
                         for x in range(r.sample_offset, r.sample_offset + r.num_microbatches * 2))
        assert samples == list(range(pset.global_batch_size))


def test_mixed_tp_stage_matches_single_process_and_its_checkpoint_resumes_across_tp_layouts(tmp_path: Path) -> None:
    """One stage, replicas at TP 1 (3 microbatches) and TP 2 (1 microbatch): the parameters of one
    process. Its checkpoint (written whole by the TP-1 replica) resumes on two stages whose
    replicas swap TP 2 and TP 1 from one stage to the next; the losses continue exactly."""
    config = RunConfig(steps=3, optimizer="adam", lr=0.01, checkpoint_dir=str(tmp_path))
    model2, losses2 = train_reference(TASK, GBS, RunConfig(**{**config.__dict__, "steps": 2}))
    model3, losses3 = train_reference(TASK, GBS, config)
    mixed = Plan("tiny-gpt", GBS, 2, (Stage(0, 4, (group(1, 1, "fast"), group(2, 1, "slow"))),), (3, 1))
    first = run_plan(mixed, TASK, RunConfig(**{**config.__dict__, "steps": 2}))
    assert first.world_size == 3 and first.pipeline.startswith("heteroplan: replica 0 1f1b x 3 microbatches")
    assert "differ in TP degree" in first.pipeline
    assert first.losses == pytest.approx(losses2, rel=1e-9)
    assert max_param_diff(first.checkpoint.model_state(), model2) < 1e-9
    swapped = Plan("tiny-gpt", GBS, 2, (Stage(0, 2, (group(2, 1, "slow"), group(1, 1, "fast"))),
                                        Stage(2, 4, (group(1, 1, "slow"), group(2, 1, "fast")))), (1, 3))
    second = run_plan(swapped, TASK, config)
    assert second.world_size == 6 and second.start_step == 2
    assert second.losses == pytest.approx(losses3[2:], rel=1e-9)
    assert max_param_diff(second.checkpoint.model_state(), model3) < 1e-9


def test_independent_pipelines_match_single_process_and_checkpoints_move_between_sets_and_plans(tmp_path: Path) -> None:
    """PP 2 (layers 0 | 1-3, 6 samples) beside PP 1 on TP 2 (2 samples): the parameters of one
    process; its checkpoint resumes on a plain plan (PP 1 x DP 2), whose checkpoint resumes on
    another set (PP 2 cut at 3, PP 2 cut at 1: three all-reduce ranges) on heteroplan's own
    pipeline loop (its links between the second pipeline's ranks, which start at rank 2)."""
    config = RunConfig(steps=4, optimizer="adam", lr=0.01, checkpoint_dir=str(tmp_path))
    model4, losses4 = train_reference(TASK, GBS, config)
    model2, _ = train_reference(TASK, GBS, RunConfig(**{**config.__dict__, "steps": 2}))
    first_set = PipelineSet((pipeline(6, [0, 1, 4], [1, 1]), pipeline(2, [0, 4], [2])))
    first = run_plan(first_set, TASK, RunConfig(**{**config.__dict__, "steps": 2}))
    assert first.world_size == 4 and first.global_batch_size == GBS
    assert first.pipeline.startswith("pipeline 0 torch: replica 0 Schedule1F1B x 3 microbatches")
    assert "pipeline 1 torch: replica 0 Schedule1F1B x 1 microbatches" in first.pipeline
    assert first.losses == pytest.approx(losses4[:2], rel=1e-9)
    assert max_param_diff(first.checkpoint.model_state(), model2) < 1e-9
    assert len(first.checkpoint.manifest["pipelines"]) == 2 and "plan" not in first.checkpoint.manifest

    plain = Plan("tiny-gpt", GBS, 2, (Stage(0, 4, (group(1, 2),)),))
    second = run_plan(plain, TASK, RunConfig(**{**config.__dict__, "steps": 3}))
    assert second.start_step == 2 and second.losses == pytest.approx(losses4[2:3], rel=1e-9)
    other_set = PipelineSet((pipeline(4, [0, 3, 4], [1, 1]), pipeline(4, [0, 1, 4], [1, 1])))
    third = run_plan(other_set, TASK, RunConfig(**{**config.__dict__, "pipeline": "heteroplan"}))
    assert third.pipeline.startswith("pipeline 0 heteroplan: replica 0 1f1b x 2") and "pipeline 1 heteroplan" in third.pipeline
    assert third.start_step == 3 and third.losses == pytest.approx(losses4[3:], rel=1e-9)
    assert max_param_diff(third.checkpoint.model_state(), model4) < 1e-9


def test_heteroplan_run_reads_a_pipeline_set_file(tmp_path: Path, capsys) -> None:
    """``heteroplan run --plan set.json`` trains the set: the losses of one process."""
    from heteroplan.cli import main

    pset = PipelineSet((pipeline(4, [0, 2, 4], [1, 1]), pipeline(4, [0, 4], [1])))
    pset.to_json(tmp_path / "set.json")
    assert load_run(tmp_path / "set.json") == pset
    assert main(["run", "--plan", str(tmp_path / "set.json"), "--steps", "2", "--optimizer", "sgd", "--lr", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "2 independent pipelines" in out and "3 processes on this machine" in out
    rows = [line.split() for line in out.splitlines()]
    losses = [float(r[1]) for r in rows if len(r) == 4 and r[0].isdigit()]
    _, expected = train_reference(TinyGPTTask(n_layers=2), GBS, RunConfig(steps=2, lr=0.05))
    assert losses == pytest.approx(expected, abs=2e-4)


def test_what_a_segment_run_cannot_do_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    zero1 = Plan("tiny-gpt", GBS, 2, (Stage(0, 2, (group(1), group(1, 1, "b")), optimizer_sharding="zero1"),
                                      Stage(2, 4, (group(2), group(1, 1, "b")))))
    with pytest.raises(InputError, match="optimizer_sharding"):
        run_plan(zero1, TASK, RunConfig(steps=1))
    mixed = Plan("tiny-gpt", GBS, 2, (Stage(0, 4, (group(1), group(2, 1, "b"))),))
    with pytest.raises(InputError, match="one tensor-parallel degree"):
        run_plan(mixed, TASK, RunConfig(steps=1, pipeline="torch"))
    (tmp_path / "bad.json").write_text(json.dumps({"pipelines": []}))
    with pytest.raises(InputError, match="bad.json"):
        load_run(tmp_path / "bad.json")


def test_the_ray_backend_refuses_a_set_by_name() -> None:
    pytest.importorskip("ray", reason="the Ray backend needs ray: pip install 'heteroplan[ray]'")
    from heteroplan.runtime.ray_backend import RayJobHandle

    pset = PipelineSet((pipeline(4, [0, 4], [1]), pipeline(4, [0, 4], [1])))
    with pytest.raises(InputError, match="Ray backend runs a Plan"):
        RayJobHandle(pset, TASK, RunConfig(steps=1), ["node"], 1.0, "job")
