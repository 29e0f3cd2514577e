"""The runtime on a CUDA GPU with NCCL: the same answers as single-process training on CPU.

Skipped where no GPU is visible (CI never has one). With one GPU the single-rank run, a resume
across devices and the profiler's CUDA-event timing run; the multi-rank tests of
``test_runtime_train.py`` / ``test_runtime_tp.py`` run with ``HETEROPLAN_TEST_DEVICE=cuda`` on a
machine with a GPU per rank.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (none visible)", allow_module_level=True)

from torch import nn  # noqa: E402

from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan, train_reference  # noqa: E402
from heteroplan.runtime.profiler import profile_layers  # noqa: E402

TASK = TinyGPTTask(n_layers=2, dtype="float64")  # 4 plan layers: embedding, 2 blocks, head
GBS = 8


def one_gpu_plan(micro: int = 2, recompute: str = "none") -> Plan:
    return Plan("tiny-gpt", GBS, GBS // micro, (Stage(0, 4, (ReplicaGroup("cuda", "local", 1, 1),), recompute),))


def max_param_diff(state: dict[str, torch.Tensor], model: nn.Module) -> float:
    ref = model.state_dict()
    assert set(state) == set(ref)
    return max(float((state[k].cpu() - v.cpu()).abs().max()) for k, v in ref.items())


def test_one_gpu_rank_with_nccl_matches_single_process_training_on_cpu(tmp_path: Path) -> None:
    """float64 on the GPU: losses and parameters of CPU training within 1e-9 after 3 steps."""
    config = RunConfig(device="cuda", steps=3, lr=0.05, momentum=0.9, checkpoint_dir=str(tmp_path))
    result = run_plan(one_gpu_plan(), TASK, config)
    model, losses = train_reference(TASK, GBS, RunConfig(device="cpu", steps=3, lr=0.05, momentum=0.9))
    assert result.final_step == 3 and result.world_size == 1
    assert result.losses == pytest.approx(losses, rel=1e-9)
    assert max_param_diff(result.checkpoint.model_state(), model) < 1e-9


def test_a_cpu_checkpoint_resumes_on_the_gpu(tmp_path: Path) -> None:
    """Steps 1-2 on CPU (gloo), steps 3-4 on the GPU (NCCL) from the same checkpoint: the losses of
    4 uninterrupted CPU steps."""
    cpu = RunConfig(device="cpu", steps=4, optimizer="adam", lr=0.01, checkpoint_dir=str(tmp_path))
    model, losses = train_reference(TASK, GBS, cpu)
    cpu_plan = Plan("tiny-gpt", GBS, 4, (Stage(0, 4, (ReplicaGroup("cpu", "local", 1, 1),)),))
    first = run_plan(cpu_plan, TASK, RunConfig(**{**cpu.__dict__, "steps": 2}))
    assert first.final_step == 2
    second = run_plan(one_gpu_plan(), TASK, RunConfig(**{**cpu.__dict__, "device": "cuda"}))
    assert second.start_step == 2 and [m.step for m in second.steps] == [3, 4]
    assert second.losses == pytest.approx(losses[2:], rel=1e-9)
    assert max_param_diff(second.checkpoint.model_state(), model) < 1e-9


def test_the_profiler_times_gpu_layers_with_cuda_events() -> None:
    """A layer with 8x the flops of another takes longer forward and backward on the GPU (CUDA
    event timing), and the model comes back with its weights unchanged."""
    torch.manual_seed(0)
    d, vocab, seq = 1024, 64, 256
    model = nn.Sequential(nn.Embedding(vocab, d), nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d)),
                          nn.Sequential(nn.Linear(d, 8 * d), nn.GELU(), nn.Linear(8 * d, d)), nn.Linear(d, vocab))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prof = profile_layers(model, lambda mbs: torch.randint(0, vocab, (mbs, seq)), (8,), device="cuda",
                          warmup=2, repeats=5)
    times = prof.compute[8]
    assert all(t[0] > 0 and t[1] > 0 for t in times)
    assert times[2][0] > 2 * times[1][0] and times[2][1] > 2 * times[1][1], times
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k].cpu()) for k in before)


def test_an_iteration_queues_its_microbatches_without_waiting_for_the_gpu() -> None:
    """The forwards and backwards of an iteration never synchronise the device (inputs and
    targets are pinned non-blocking copies, the losses are added on the device): under
    ``torch.cuda.set_sync_debug_mode("error")`` a synchronising call raises. ``.to(device)`` from
    pageable memory or ``float(loss)`` per microbatch, as the runtime did before, fail here."""
    from heteroplan.runtime.tensor_parallel import create_groups
    from heteroplan.runtime.worker import StageTrainer

    plan = one_gpu_plan(micro=8)  # microbatch 1: 8 microbatches
    # heteroplan's own schedule (a one-stage plan runs under torch's pipelining by default, whose
    # groups create_groups(plan) does not make)
    config = RunConfig(device="cuda", steps=2, pipeline="heteroplan")
    trainer = StageTrainer(plan, TinyGPTTask(n_layers=2), config, 0, create_groups(plan))
    trainer.step(0)  # warm-up: cuBLAS handles, the pinned host blocks
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss = trainer._run_own_schedule(1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert isinstance(loss, torch.Tensor) and loss.device.type == "cuda"
    assert 0 < float(loss) < 10  # the mean cross-entropy of a 64-token vocabulary starts near ln 64


@pytest.mark.parametrize("task,rel,recompute", [(TASK, 1e-9, "none"), (TinyGPTTask(n_layers=2), 1e-3, "none"),
                                                (TASK, 1e-9, "full"), (TinyGPTTask(n_layers=2), 1e-3, "full")])
def test_a_graphed_run_trains_as_the_eager_run(task: TinyGPTTask, rel: float, recompute: str) -> None:
    """``cuda_graphs``: every microbatch replayed from one captured graph (inputs copied into its
    static tensors, gradients accumulating in place) gives the eager run's losses (each after the last step's update):
    float64 to 1e-9; bf16 (autocast under capture, its cast cache off) to 1e-3; recomputing
    stages too (their checkpoints captured without the RNG state: the model has no dropout)."""
    plan = one_gpu_plan(micro=4, recompute=recompute)
    if task.dtype == "float32":
        plan = Plan(plan.model, plan.global_batch_size, plan.microbatch_size, plan.stages, precision="bf16")
    runs = {}
    for graphs in (False, True):
        runs[graphs] = run_plan(plan, task, RunConfig(device="cuda", steps=3, optimizer="adam", lr=0.01,
                                                      cuda_graphs=graphs))
    assert "CUDA graphs" in runs[True].pipeline
    assert runs[True].losses == pytest.approx(runs[False].losses, rel=rel)


def test_the_profiler_times_a_graphed_microbatch_and_leaves_the_model_as_it_was() -> None:
    """``profile_layers(cuda_graphs=True)``: the layer times are scaled to a graphed whole-model
    microbatch (positive, each layer's share of its eager profile kept), and the model's weights
    and gradients are as before."""
    model = TinyGPTTask(n_layers=2).build_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prof = profile_layers(model, lambda m: TinyGPTTask(n_layers=2).batch(0, 0, m)[0], (2,), device="cuda",
                          repeats=3, cuda_graphs=True)
    times = prof.compute[2]
    assert all(f >= 0 and b >= 0 for f, b, _ in times) and sum(f + b for f, b, _ in times) > 0
    assert all(torch.equal(before[k], v.cpu()) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("graphs", [False, True], ids=["compiled", "compiled+graphs"])
def test_a_compiled_run_trains_as_the_eager_run(graphs: bool) -> None:
    """``compile`` (every plan layer through inductor's Triton backend), alone and captured as a
    CUDA graph after the compiling warm-up: the eager run's losses, float64 to 1e-9."""
    from heteroplan.runtime.compiled import compile_unavailable

    if compile_unavailable("cuda"):
        pytest.skip(f"torch.compile on CUDA: {compile_unavailable('cuda')}")
    plan = one_gpu_plan(micro=4, recompute="full")
    runs = {c: run_plan(plan, TASK, RunConfig(device="cuda", steps=3, lr=0.05, momentum=0.9, compile=c,
                                               cuda_graphs=graphs)) for c in (False, True)}
    assert runs[True].losses == pytest.approx(runs[False].losses, rel=1e-9)
