"""The round executor applies a policy's allocations to real jobs (start, stop, rescale)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.cluster import Cluster, GPUType  # noqa: E402
from heteroplan.errors import InputError  # noqa: E402
from heteroplan.perf.applications import AppSpec  # noqa: E402
from heteroplan.perf.bootstrap import BootstrappedModel  # noqa: E402
from heteroplan.policies.base import Allocation, AllocationError, JobState  # noqa: E402
from heteroplan.policies.sia import SiaPolicy  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, train_reference  # noqa: E402
from heteroplan.runtime.rounds import (  # noqa: E402
    EventKind,
    ExecutorEvent,
    RoundExecutor,
    RuntimeJob,
    data_parallel_plan,
    job_plan,
    measure_single_gpu,
)

CLUSTER = Cluster.from_counts((GPUType("cpu-a", 16, 2, 1.0), GPUType("cpu-b", 16, 2, 2.0)),
                              {"cpu-a": 2, "cpu-b": 2}, name="local")
TASK = TinyGPTTask(n_layers=1, dtype="float64")


class ScriptedPolicy:
    """Round r gives each job the (type, count) in its script (no entry: no GPUs)."""

    name = "scripted"

    def __init__(self, script: dict[str, list[tuple[str, int] | None]]) -> None:
        self.script, self.round, self.seen = script, 0, []

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> dict[str, Allocation]:
        self.seen.append({j.job_id: (j.progress, j.num_restarts) for j in jobs})
        free = {n.name: n.num_gpus for n in cluster.nodes}
        out = {}
        for job in jobs:
            plan = self.script[job.job_id]
            want = plan[min(self.round, len(plan) - 1)]
            if want is None:
                continue
            gpu_type, count = want
            placement = []
            for node in cluster.nodes:
                take = min(free[node.name], count - sum(c for _, c in placement)) if node.gpu_type == gpu_type else 0
                if take > 0:
                    placement.append((node.name, take))
                    free[node.name] -= take
            out[job.job_id] = Allocation(gpu_type, count, tuple(placement))
        self.round += 1
        return out


class Recorder:
    """An estimator that records what it is told (and answers a flat goodput)."""

    def __init__(self) -> None:
        self.calls = []

    def observe(self, gpu_type, placement, local_bsz, step_time, sync_time) -> None:
        self.calls.append((gpu_type, sum(placement), local_bsz, step_time, sync_time))

    def goodput(self, gpu_type, num_nodes, num_gpus, **_):
        return np.asarray(num_gpus, dtype=float)


class BatchPicker(Recorder):
    """Picks local batch 2 with 1 accumulation step (2 microbatches per iteration) and records phi."""

    def __init__(self) -> None:
        super().__init__()
        self.phis = []

    def optimize(self, gpu_type, num_nodes, num_gpus, progress=0.0):
        return np.asarray(1.0), np.asarray(2), np.asarray(1)

    def set_measured_phi(self, phi) -> None:
        self.phis.append(phi)


def final_params(tmp_path: Path, job_id: str) -> dict[str, torch.Tensor]:
    from heteroplan.runtime import latest_checkpoint

    return latest_checkpoint(tmp_path / job_id).model_state()


def test_start_stop_rescale_keeps_training_exact(tmp_path: Path) -> None:
    """Whatever the policy does to a job, it ends with the parameters of uninterrupted training."""
    config = RunConfig(lr=0.05, momentum=0.9)
    rec = Recorder()
    jobs = [RuntimeJob("a", TASK, steps=200, global_batch_size=6, estimator=rec, config=config),
            RuntimeJob("b", TASK, steps=40, global_batch_size=6, config=config, arrival_time=0.0)]
    policy = ScriptedPolicy({"a": [("cpu-a", 1), ("cpu-a", 2), None, ("cpu-b", 2), ("cpu-b", 2), ("cpu-a", 1)],
                             "b": [("cpu-b", 2), None, ("cpu-a", 2), ("cpu-a", 1), ("cpu-a", 2), ("cpu-b", 2)]})
    executor = RoundExecutor(CLUSTER, policy, jobs, tmp_path, round_length=1.0, max_rounds=60)
    outcomes = executor.run()
    for jid, steps in (("a", 200), ("b", 40)):
        assert outcomes[jid].finish_time is not None and outcomes[jid].steps_done == steps
        model, _ = train_reference(TASK, 6, RunConfig(steps=steps, lr=0.05, momentum=0.9))
        state = final_params(tmp_path, jid)
        assert max(float((state[k] - v).abs().max()) for k, v in model.state_dict().items()) < 1e-9
    first = executor.log[0]
    assert first.allocations == {"a": ("cpu-a", 1), "b": ("cpu-b", 2)}
    assert ExecutorEvent(EventKind.RESCALE, "a") in executor.log[1].events and outcomes["a"].restarts >= 2
    # what the estimator heard matches what ran: GPUs, local batch = 6 / GPUs, positive times
    for gpu_type, gpus, local, step, sync in rec.calls:
        assert (gpu_type, gpus) in {("cpu-a", 1), ("cpu-a", 2), ("cpu-b", 2)}
        assert local == pytest.approx(6 / gpus) and step > 0 and sync >= 0
    # the policy saw progress grow and never more GPUs than the cluster has (checked each round)
    progress_a = [s["a"][0] for s in policy.seen if "a" in s]
    assert progress_a == sorted(progress_a)


def test_over_committing_policy_is_refused(tmp_path: Path) -> None:
    jobs = [RuntimeJob("a", TASK, steps=2, global_batch_size=4)]
    policy = ScriptedPolicy({"a": [("cpu-a", 3)]})
    policy.allocate = lambda cluster, js, now: {"a": Allocation("cpu-a", 3, (("cpu-a@default/0", 3),))}
    with pytest.raises(AllocationError, match="over-committed"):
        RoundExecutor(CLUSTER, policy, jobs, tmp_path, round_length=1.0).run()


def test_sia_refits_from_measured_steps(tmp_path: Path) -> None:
    """Sia's policy drives two real jobs; its bootstrapped models learn from the measured steps."""
    app = AppSpec("tiny-gpt", max_batch_size=8, init_batch_size=8, epochs=1, dataset_size=8 * 30, restart_delay=2.0)
    profile = measure_single_gpu(TASK, [1, 2, 4, 8])
    assert len(profile) == 4 and np.all(profile.step_time > 0)  # (times themselves are not asserted)
    models = {jid: BootstrappedModel(app, {"cpu-a": profile, "cpu-b": profile}, phi=100.0) for jid in "xy"}
    jobs = [RuntimeJob(jid, TASK, steps=30, global_batch_size=8, application="tiny-gpt", estimator=models[jid],
                       config=RunConfig(lr=0.05)) for jid in "xy"]
    executor = RoundExecutor(CLUSTER, SiaPolicy(), jobs, tmp_path, round_length=3.0, max_rounds=400)  # rounds are wall time: room for a loaded machine
    outcomes = executor.run()
    assert all(o.finish_time is not None for o in outcomes.values())
    for jid, model in models.items():
        assert outcomes[jid].observations >= 1
        ran = {(t, n) for r in executor.log for j, (t, n) in r.allocations.items() if j == jid}
        for t in {t for t, _ in ran}:
            assert len(model.observations(t)) >= len(profile)
        observed = sum(len(model.observations(t)) for t in ("cpu-a", "cpu-b")) - 2 * len(profile)
        assert observed == outcomes[jid].observations


def test_resume_without_a_saved_run_says_so_and_starts_afresh(tmp_path: Path, caplog) -> None:
    jobs = [RuntimeJob("a", TASK, 1, 4)]
    with caplog.at_level("WARNING", logger="heteroplan.runtime.rounds"):
        executor = RoundExecutor(CLUSTER, SiaPolicy(), jobs, tmp_path / "empty", resume=True)
    assert [r.getMessage() for r in caplog.records] == [
        f"resume: no saved run at {tmp_path / 'empty' / 'session.json'}; starting the run afresh"]
    assert executor.session.job_ids == ("a",) and executor.session.rounds == 0
    caplog.clear()
    RoundExecutor(CLUSTER, SiaPolicy(), jobs, tmp_path / "fresh")  # no resume asked: nothing said
    assert not caplog.records


def test_bad_jobs_and_plans() -> None:
    with pytest.raises(InputError, match="steps"):
        RuntimeJob("a", TASK, steps=0, global_batch_size=4)
    with pytest.raises(InputError, match="job_id"):
        RoundExecutor(CLUSTER, SiaPolicy(), [RuntimeJob("a", TASK, 1, 4)] * 2, "/tmp")
    with pytest.raises(InputError, match="num_gpus"):
        data_parallel_plan("m", 2, 3, 3, "cpu-a")
    plan = data_parallel_plan("m", 7, 3, 3, "cpu-a")
    assert plan.microbatches() == (3, 2, 2) and plan.microbatch_size == 1


def test_policy_batch_and_accumulation_are_applied_and_noise_scale_is_fed_back(tmp_path: Path) -> None:
    """An adaptive job runs at the estimator's local batch x accumulation steps (2 GPUs x 2 x 2 = 8
    samples), matches single-process training on that batch, and its estimator gets phi."""
    picker = BatchPicker()
    job = RuntimeJob("a", TASK, steps=4, global_batch_size=4, estimator=picker, adaptive_batch=True,
                     config=RunConfig(lr=0.05))
    plan = job_plan(job, Allocation("cpu-a", 2, (("local-cpu-a-0", 2),)), 3, 0.0)
    assert (plan.global_batch_size, plan.microbatch_size, plan.microbatches()) == (8, 2, (2, 2))
    fixed = job_plan(RuntimeJob("b", TASK, 4, 6), Allocation("cpu-a", 2, ()), 3, 0.0)
    assert (fixed.global_batch_size, fixed.microbatches()) == (6, (1, 1))
    executor = RoundExecutor(CLUSTER, ScriptedPolicy({"a": [("cpu-a", 2)]}), [job], tmp_path, round_length=2.0,
                             max_rounds=40)
    assert executor.run()["a"].finish_time is not None
    model, _ = train_reference(TASK, 8, RunConfig(steps=4, lr=0.05))
    assert max(float((final_params(tmp_path, "a")[k] - v).abs().max()) for k, v in model.state_dict().items()) < 1e-9
    assert picker.phis and all(phi > 0 for phi in picker.phis)
    assert executor.outcomes["a"].phi == picker.phis[-1]
    assert {c[2] for c in picker.calls} <= {2.0}  # observed per accumulation step of 2 samples


def test_gradient_noise_statistics_match_a_single_process_oracle(tmp_path: Path) -> None:
    """DP 2 with 3 + 1 microbatches of 2: the unbiased |G|^2 and tr(Sigma) estimates from the two
    replicas' gradients equal those computed from per-replica gradients in one process."""
    from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
    from heteroplan.runtime import run_plan

    plan = Plan("m", 8, 2, (Stage(0, 3, (ReplicaGroup("cpu", "local", 1, 2),)),), (3, 1))
    result = run_plan(plan, TASK, RunConfig(steps=1, lr=0.05))
    model = TASK.build_model()

    def grad_sqr(start: int, count: int) -> float:
        model.zero_grad()
        x, y = TASK.batch(0, start, count)
        TASK.loss(model(x), y).backward()
        return sum(float(p.grad.square().sum()) for p in model.parameters())

    total, big = 8, grad_sqr(0, 8)
    sqr = var = 0.0
    for start, b in ((0, 6), (6, 2)):
        small = grad_sqr(start, b)
        sqr += (total * big - b * small) / (total - b) / 2
        var += (small - big) / (1 / b - 1 / total) / 2
    first = result.steps[0]
    assert first.grad_sqr == pytest.approx(sqr, rel=1e-9) and first.grad_var == pytest.approx(var, rel=1e-9)


class MixedPolicy:
    """Every job gets one GPU of each type: a gang over two types (Hadar's task-level heterogeneity)."""

    name = "mixed"

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> dict[str, Allocation]:
        return {j.job_id: Allocation("cpu-a+cpu-b", 2, (("cpu-a@default/0", 1), ("cpu-b@default/0", 1))) for j in jobs[:1]}


def test_a_gang_over_two_types_runs_as_one_data_parallel_job(tmp_path: Path) -> None:
    """A mixed allocation runs a replica group per type (each rank placed and emulated as its own
    type; it ran as one group named 'cpu-a+cpu-b', which no emulation or Ray node knows), and trains
    exactly as one process on the whole batch. A forking policy is refused: its copies would run as
    one gang."""
    job = RuntimeJob("m", TASK, steps=4, global_batch_size=4, config=RunConfig(lr=0.05))
    mixed = MixedPolicy().allocate(CLUSTER, [job], 0.0)["m"]  # type: ignore[list-item]
    plan = job_plan(job, mixed, 3, 0.0, CLUSTER)
    assert [(g.gpu_type, g.count) for g in plan.stages[0].replicas] == [("cpu-a", 1), ("cpu-b", 1)]
    with pytest.raises(InputError, match="cluster"):
        job_plan(job, mixed, 3, 0.0)
    executor = RoundExecutor(CLUSTER, MixedPolicy(), [job], tmp_path, round_length=2.0, max_rounds=40)
    assert executor.run()["m"].finish_time is not None
    model, _ = train_reference(TASK, 4, RunConfig(steps=4, lr=0.05))
    assert max(float((final_params(tmp_path, "m")[k] - v).abs().max()) for k, v in model.state_dict().items()) < 1e-9
    from heteroplan.policies.registry import make_policy

    with pytest.raises(InputError, match="forks jobs"):
        RoundExecutor(CLUSTER, make_policy("hadare"), [job], tmp_path / "f")


def test_a_rigid_policy_runs_a_job_on_its_requested_gang(tmp_path: Path) -> None:
    """FIFO gives a job of ``requested_gpus = 2`` its two GPUs at once (every job ran on one GPU: the
    executor submitted one requested GPU whatever the job), and it trains exactly as one process."""
    from heteroplan.policies.registry import make_policy

    job = RuntimeJob("g", TASK, steps=3, global_batch_size=4, requested_gpus=2, config=RunConfig(lr=0.05))
    executor = RoundExecutor(CLUSTER, make_policy("fifo"), [job], tmp_path, round_length=2.0, max_rounds=40)
    assert executor.run()["g"].finish_time is not None
    assert {entry.allocations["g"][1] for entry in executor.log if "g" in entry.allocations} == {2}
    model, _ = train_reference(TASK, 4, RunConfig(steps=3, lr=0.05))
    assert max(float((final_params(tmp_path, "g")[k] - v).abs().max()) for k, v in model.state_dict().items()) < 1e-9
    with pytest.raises(InputError, match="requested_gpus"):
        RuntimeJob("h", TASK, steps=3, global_batch_size=4, requested_gpus=5)
