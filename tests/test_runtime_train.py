"""The runtime trains for real (gloo, CPU processes) and matches single-process training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")


from heteroplan.errors import InputError, LossNotFinite, RankFailure  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, latest_checkpoint, run_plan, train_reference  # noqa: E402
from heteroplan.runtime.layout import rank_layout  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# HETEROPLAN_TEST_DEVICE=cuda runs the same tests with NCCL on GPUs (one GPU per rank; not in CI)
DEVICE = os.environ.get("HETEROPLAN_TEST_DEVICE", "cpu")
TASK = TinyGPTTask(n_layers=2, dtype="float64")  # 4 plan layers: embedding, 2 blocks, head
GBS = 8


def plan_of(stages: list[tuple[int, int]], dp: int, micro: tuple[int, ...] | None = None, mbs: int = 2) -> Plan:
    return Plan("tiny-gpt", GBS, mbs, tuple(Stage(a, b, (ReplicaGroup("cpu", "local", 1, dp),)) for a, b in stages),
                micro)


def max_param_diff(state: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    ref = model.state_dict()
    assert set(state) == set(ref)
    return max(float((state[k] - v).abs().max()) for k, v in ref.items())


def test_heterogeneous_pipeline_matches_single_process(tmp_path: Path) -> None:
    """2 stages x 2 replicas, replicas taking 3 and 1 microbatches: same parameters as one process."""
    config = RunConfig(device=DEVICE, steps=3, lr=0.05, momentum=0.9, checkpoint_dir=str(tmp_path))
    plan = plan_of([(0, 2), (2, 4)], dp=2, micro=(3, 1))
    result = run_plan(plan, TASK, config)
    model, losses = train_reference(TASK, GBS, config)
    assert result.final_step == 3 and result.world_size == 4
    # torch.distributed.pipelining ran it: each replica its own schedule and microbatch count
    assert result.pipeline.startswith("torch: replica 0 Schedule1F1B x 3 microbatches, replica 1 ScheduleGPipe x 1")
    assert result.losses == pytest.approx(losses, rel=1e-9)
    assert max_param_diff(result.checkpoint.model_state(), model) < 1e-9
    # an even split gives different per-replica gradients but the same update (heteroplan's own loop)
    even = run_plan(plan_of([(0, 1), (1, 4)], dp=2), TASK, RunConfig(
        device=DEVICE, steps=3, lr=0.05, momentum=0.9, schedule="gpipe", pipeline="heteroplan",
        checkpoint_dir=str(tmp_path / "even")))
    assert even.pipeline.startswith("heteroplan: replica 0 gpipe x 2")
    assert max_param_diff(even.checkpoint.model_state(), model) < 1e-9


def test_rescale_from_2_to_4_workers_continues_same_step_and_loss(tmp_path: Path) -> None:
    config = RunConfig(device=DEVICE, steps=6, optimizer="adam", lr=0.01, checkpoint_dir=str(tmp_path))
    reference, losses = train_reference(TASK, GBS, config)
    first = run_plan(plan_of([(0, 4)], dp=2), TASK, RunConfig(**{**config.__dict__, "steps": 3}))
    assert first.final_step == 3 and first.checkpoint.step == 3
    assert first.checkpoint.loss == pytest.approx(losses[2], rel=1e-9)
    second = run_plan(plan_of([(0, 2), (2, 4)], dp=2, micro=(1, 3)), TASK, config)  # 4 workers, 2 stages
    assert second.start_step == 3 and [m.step for m in second.steps] == [4, 5, 6]
    assert second.losses == pytest.approx(losses[3:], rel=1e-9)
    assert max_param_diff(second.checkpoint.model_state(), reference) < 1e-9


def test_dead_rank_stops_the_run_with_a_resumable_checkpoint(tmp_path: Path) -> None:
    config = RunConfig(device=DEVICE, steps=5, lr=0.05, checkpoint_dir=str(tmp_path), checkpoint_every=1, fault=("exit", 3, 2))
    plan = plan_of([(0, 2), (2, 4)], dp=2)
    with pytest.raises(RankFailure) as info:
        run_plan(plan, TASK, config)
    # seen as the death of rank 3 (exit code 17), not as a stall after config.timeout_s (rank None,
    # "no iteration finished"), nor as a peer's collective error: the launcher did not wait it out
    assert info.value.rank == 3 and info.value.reason.startswith("process exited with code 17")
    assert info.value.checkpoint is not None and info.value.checkpoint.step == 2
    assert "resume" in str(info.value)
    resumed = run_plan(plan, TASK, RunConfig(**{**config.__dict__, "fault": None}))
    model, losses = train_reference(TASK, GBS, config)
    assert resumed.start_step == 2 and resumed.losses == pytest.approx(losses[2:], rel=1e-9)
    assert max_param_diff(resumed.checkpoint.model_state(), model) < 1e-9


def test_hung_rank_times_out_instead_of_hanging(tmp_path: Path) -> None:
    """Rank 1 sleeps 10 x timeout_s at step 1: the run fails after timeout_s, by the launcher's
    watchdog or a peer's collective timeout, without waiting for it (else it would wake and finish)."""
    config = RunConfig(device=DEVICE, steps=4, timeout_s=3, fault=("hang", 1, 1), checkpoint_dir=str(tmp_path), checkpoint_every=1)
    with pytest.raises(RankFailure) as info:
        run_plan(plan_of([(0, 4)], dp=2), TASK, config)
    reason = info.value.reason.lower()
    assert (info.value.rank is None and reason == "no iteration finished for 3 s") or \
        (info.value.rank == 0 and ("timed out" in reason or "timeout" in reason)), info.value.reason
    assert info.value.checkpoint.step == 1  # the hung rank never reached step 2


@dataclass(frozen=True)
class DivergingTask(TinyGPTTask):
    """The tiny GPT, except that at iteration ``bad_step`` (0-based) the samples from ``bad_sample``
    on have every target ignored (cross-entropy's -100): their mean loss is 0/0, NaN."""

    bad_step: int = 2
    bad_sample: int = 4

    def batch(self, step: int, start: int, count: int):
        x, y = super().batch(step, start, count)
        return (x, torch.full_like(y, -100)) if step == self.bad_step and start >= self.bad_sample else (x, y)


@pytest.mark.parametrize("pipeline", ["heteroplan", "torch"])
def test_a_loss_that_is_not_finite_stops_the_run_at_that_iteration(tmp_path: Path, pipeline: str) -> None:
    """NaN at iteration 3 on replica 1 only (samples 4-7): the run stops there, naming iteration 3
    and the last-stage rank of replica 1; checkpoints 1 and 2 stay, none is written of the NaN update."""
    task = DivergingTask(n_layers=2, dtype="float64")
    plan = plan_of([(0, 2), (2, 4)], dp=2)  # replica 0 trains samples 0-3, replica 1 samples 4-7
    config = RunConfig(device=DEVICE, steps=6, lr=0.05, checkpoint_dir=str(tmp_path), checkpoint_every=1,
                       pipeline=pipeline)
    with pytest.raises(LossNotFinite) as info:
        run_plan(plan, task, config)
    culprit = next(r.rank for r in rank_layout(plan) if r.stage == plan.pp - 1 and r.replica == 1)
    assert culprit != min(r.rank for r in rank_layout(plan) if r.stage == plan.pp - 1)  # not just the first
    err = info.value
    assert (err.rank, err.step) == (culprit, 3) and err.loss != err.loss  # NaN
    assert f"iteration 3 on rank {culprit}" in str(err) and "learning rate" in str(err)
    _, losses = train_reference(TinyGPTTask(n_layers=2, dtype="float64"), GBS, RunConfig(steps=2, lr=0.05))
    assert [m.step for m in err.steps] == [1, 2, 3]
    assert [m.loss for m in err.steps[:2]] == pytest.approx(losses, rel=1e-9) and err.steps[2].loss != err.steps[2].loss
    assert err.checkpoint is not None and err.checkpoint.step == 2 == latest_checkpoint(tmp_path).step


def test_bad_runs_are_refused_before_any_process_starts(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="layers"):
        run_plan(plan_of([(0, 3)], dp=1, mbs=8), TASK)
    with pytest.raises(InputError, match="tensor-parallel degree"):  # replicas of one stage with TP 2 and TP 1
        run_plan(Plan("m", 8, 2, (Stage(0, 4, (ReplicaGroup("cpu", "local", 2, 1), ReplicaGroup("gpu", "local", 1, 1))),)),
                 TASK, RunConfig(pipeline="torch"))  # runnable on heteroplan's loop (test_runtime_pipeline_set), not torch's
    with pytest.raises(InputError, match="n_heads"):  # TP 4 cannot split 2 heads
        run_plan(Plan("m", 8, 2, (Stage(0, 4, (ReplicaGroup("cpu", "local", 4, 1),)),)), TASK)
    with pytest.raises(InputError, match="config.optimizer"):
        RunConfig(optimizer="lamb")
    with pytest.raises(InputError, match="task"):
        run_plan(plan_of([(0, 4)], dp=1, mbs=8), object())
    assert latest_checkpoint(tmp_path / "nothing") is None


def test_torchrun_entry_point_trains(tmp_path: Path) -> None:
    """``torchrun -m heteroplan.runtime.worker`` (the multi-node path) on 2 local processes."""
    plan = plan_of([(0, 1), (1, 4)], dp=1, micro=(4,))
    plan.to_json(tmp_path / "plan.json")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "heteroplan.runtime.worker", "--plan", str(tmp_path / "plan.json"), "--steps", "3", "--layers", "2",
           "--checkpoint-dir", str(tmp_path / "ck")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [float(line.split()[3]) for line in proc.stdout.splitlines() if line.startswith("step")]
    _, losses = train_reference(TinyGPTTask(n_layers=2), GBS, RunConfig(device=DEVICE, steps=3))
    assert printed == pytest.approx(losses, abs=2e-4)
    manifest = json.loads((tmp_path / "ck" / "step-00000003" / "manifest.json").read_text())
    assert manifest["step"] == 3 and manifest["num_layers"] == 4


def test_cli_run_prints_the_losses_of_single_process_training(tmp_path: Path, capsys) -> None:
    from heteroplan.cli import main

    assert main(["run", "--pp", "2", "--dp", "1", "--microbatches", "2", "--mbs", "2", "--layers", "2",
                 "--steps", "3", "--optimizer", "sgd", "--lr", "0.05", "--checkpoint-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    printed = [float(line.split()[1]) for line in out.splitlines() if line.strip()[:1].isdigit() and "ms" not in line]
    _, losses = train_reference(TinyGPTTask(n_layers=2), 4, RunConfig(device=DEVICE, steps=3, lr=0.05))
    assert printed == pytest.approx(losses, abs=2e-4)
    assert "checkpoint: iteration 3" in out
    assert main(["run", "--pp", "9", "--layers", "2"]) != 0
    assert "--pp=9" in capsys.readouterr().err
