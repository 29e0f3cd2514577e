"""bf16 mixed precision, activation recomputation and ZeRO-1 in the runtime: numerics and memory terms.

Memory terms are pinned against torch's own record of allocations on CPU (its profiler)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner.plan import Plan, Precision, Recomputation, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan, train_reference  # noqa: E402
from heteroplan.runtime.dimensions import (  # noqa: E402
    check_optimizer_sharding,
    compute_context,
    run_layers,
    state_bytes,
)
from heteroplan.runtime.memory import peak_increase  # noqa: E402
from heteroplan.runtime.profiler import profile_layers  # noqa: E402

TASK32 = TinyGPTTask(n_layers=2)
TASK64 = TinyGPTTask(n_layers=2, dtype="float64")
GBS = 8


def _grads(task: TinyGPTTask, recompute: Recomputation, precision: Precision = Precision.FP32) -> list[torch.Tensor]:
    model = task.build_model()
    x, y = task.batch(0, 0, 4)
    with compute_context(precision, "cpu", recompute):
        loss = task.loss(run_layers(list(model), x, recompute), y)
    loss.backward()
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("precision", [Precision.FP32, Precision.BF16])
def test_recomputation_gives_bit_identical_gradients(precision: Precision) -> None:
    kept, recomputed = _grads(TASK32, Recomputation.NONE, precision), _grads(TASK32, Recomputation.FULL, precision)
    assert all(torch.equal(a, b) for a, b in zip(kept, recomputed, strict=True))


def test_a_recomputing_bf16_stage_holds_no_bf16_copy_of_its_weights() -> None:
    """Autocast caches every weight's bf16 cast until its context exits; a recomputing stage saves
    none of them, so with the cache on its forward ends holding a bf16 copy of all its weights
    (here 6 casts of 0.5 MB over 2 x 16 KB of kept inputs; on an H100, 0.54 GB at the peak of a
    320M-parameter GPT). The stage's forward peaks at most one layer's cast above what it keeps."""
    from torch import nn

    from heteroplan.runtime.worker import LayerRange

    torch.manual_seed(0)
    width, n = 512, 6
    model = nn.Sequential(*(nn.Linear(width, width) for _ in range(n)))
    cast = width * width * 2 + width * 2  # one layer's weight and bias in bf16, bytes
    x = torch.randn(8, width)
    kept_by = {}
    for recompute in (Recomputation.FULL, Recomputation.NONE):
        stage = LayerRange(model, 0, n, recompute, Precision.BF16, "cpu")
        peak, kept, out = peak_increase(lambda stage=stage: stage(x))
        kept_by[recompute] = kept
        if recompute is Recomputation.FULL:  # measured: 0.66 MB above the kept 0.08 MB (cache on: 3.2 MB)
            assert peak - kept < 2 * cast, (peak, kept)
        del out
    # without recomputation the casts are saved for the backward, where the profile counts them
    # (measured: 2.60 MB more than with recomputation; the first layer's input needs no gradient)
    assert kept_by[Recomputation.NONE] - kept_by[Recomputation.FULL] > (n - 2) * cast


def test_recomputation_keeps_only_layer_inputs_and_the_profile_counts_what_is_kept() -> None:
    """After the forward, live bytes are: with recomputation each layer's input (= the previous
    layer's output) plus the RNG state each checkpoint region saves; without it the activations the
    profiler counts for backward (``act_mem_bytes``), plus the output."""
    model, mbs = TASK32.build_model(), 4
    layers = list(model)
    x, _ = TASK32.batch(0, 0, mbs)
    with torch.no_grad():
        outputs, h = [], x
        for layer in layers:
            h = layer(h)
            outputs.append(h.numel() * h.element_size())
    rng_state = torch.get_rng_state().numel()
    _, kept, out = peak_increase(lambda: run_layers(layers, x, Recomputation.FULL))
    assert kept == sum(outputs) + len(layers) * rng_state
    del out
    _, kept_all, out = peak_increase(lambda: run_layers(layers, x, Recomputation.NONE))
    profile = profile_layers(model, lambda m: TASK32.batch(0, 0, m)[0], (mbs,), warmup=0, repeats=1)
    # layer 0 saves the token ids, which were alive before the forward began
    assert kept_all == mbs * sum(profile.act_mem_bytes[1:]) + outputs[-1]
    assert kept < kept_all / 3


def test_bf16_follows_the_fp32_loss_curve_with_fp32_master_weights() -> None:
    config = RunConfig(steps=16, optimizer="adam", lr=1e-2)
    fp32_model, fp32 = train_reference(TASK32, 2 * GBS, config)
    bf16_model, bf16 = train_reference(TASK32, 2 * GBS, config, precision=Precision.BF16)
    assert fp32[-1] < 0.9 * fp32[0]  # it learns
    rel = [abs(a - b) / a for a, b in zip(fp32, bf16, strict=True)]
    assert max(rel) < 0.01  # bf16 follows fp32 ...
    assert max(rel) > 1e-6  # ... but autocast did compute in bf16
    assert all(p.dtype == torch.float32 for p in bf16_model.parameters())


def test_zero1_divides_optimizer_state_by_the_replicas() -> None:
    """ZeroRedundancyOptimizer over 2 replicas (a fake process group: no peers needed): each rank
    holds Adam's two fp32 moments (+ a step counter per tensor) of the parameters it owns only."""
    dist = torch.distributed
    fake = pytest.importorskip("torch.testing._internal.distributed.fake_pg", reason="torch's fake process group")
    from heteroplan.planner.plan import OptimizerSharding
    from heteroplan.runtime.dimensions import make_stage_optimizer

    config = RunConfig(optimizer="adam", lr=1e-3)
    model = TASK32.build_model()
    params = list(model.parameters())
    full = make_stage_optimizer(params, config, OptimizerSharding.NONE, None)
    per_rank = []
    for rank in range(2):
        dist.init_process_group("fake", store=fake.FakeStore(), rank=rank, world_size=2)
        try:
            opt = make_stage_optimizer(params, config, OptimizerSharding.ZERO1, dist.group.WORLD)
            for p in params:
                p.grad = torch.ones_like(p)
            opt.step()
            owned = [p for g in opt.optim.param_groups for p in g["params"]]
            assert state_bytes(opt) == sum(2 * 4 * p.numel() + 4 for p in owned)
            per_rank.append(state_bytes(opt))
        finally:
            dist.destroy_process_group()
    full.step()
    assert state_bytes(full) == sum(2 * 4 * p.numel() + 4 for p in params) == sum(per_rank)
    largest = max(2 * 4 * p.numel() + 4 for p in params)
    assert max(per_rank) <= state_bytes(full) / 2 + largest


@pytest.mark.parametrize("replicas,shapes", [
    (2, [(8, 8), (8,), (32, 8), (8, 32), (3,)]),
    (3, [(16, 16)] * 4 + [(4, 4)] * 5 + [(7,)]),
    (8, [(64, 16)] * 4 + [(16, 16)] * 8),  # 4 large tensors over 8 replicas: 1/6 of the state, not 1/8
])
def test_the_planners_zero1_share_is_how_torch_partitions_the_parameters(replicas, shapes) -> None:
    """The largest share of the parameters a replica owns under ZeroRedundancyOptimizer (torch's own
    partition, read from each rank of a fake process group) is
    ``terms.zero1_largest_share`` of the tensors' sizes: what the planner charges a ZeRO-1 rank's
    state, step buffers and step time with."""
    dist = torch.distributed
    fake = pytest.importorskip("torch.testing._internal.distributed.fake_pg", reason="torch's fake process group")
    from heteroplan.planner.model.terms import zero1_largest_share
    from heteroplan.planner.plan import OptimizerSharding
    from heteroplan.runtime.dimensions import make_stage_optimizer

    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in shapes]
    owned = []
    for rank in range(replicas):
        dist.init_process_group("fake", store=fake.FakeStore(), rank=rank, world_size=replicas)
        try:
            opt = make_stage_optimizer(params, RunConfig(optimizer="adam"), OptimizerSharding.ZERO1, dist.group.WORLD)
            owned.append(sum(p.numel() for g in opt.optim.param_groups for p in g["params"]))
        finally:
            dist.destroy_process_group()
    total = sum(p.numel() for p in params)
    assert sum(owned) == total
    assert zero1_largest_share([p.numel() for p in params], replicas) == max(owned) / total
    if replicas == 8:
        assert max(owned) / total == pytest.approx(1 / 6)


def test_zero1_and_recomputation_on_heterogeneous_replicas_train_like_one_process(tmp_path: Path) -> None:
    """PP 2 x DP 2, replicas running 3 and 1 microbatches, ZeRO-1 + recomputation on every stage,
    Adam: the parameters of single-process training; the checkpoint (each rank writes the state it
    owns) resumes under a plan without sharding and continues exactly."""
    group = (ReplicaGroup("cpu", "local", 1, 2),)
    sharded = Plan("t", GBS, 2, (Stage(0, 2, group, "full", "zero1"), Stage(2, 4, group, "full", "zero1")), (3, 1))
    config = RunConfig(steps=2, optimizer="adam", lr=0.01, checkpoint_dir=str(tmp_path), memory_step=1)
    first = run_plan(sharded, TASK64, config)
    reference, losses = train_reference(TASK64, GBS, RunConfig(**{**config.__dict__, "steps": 3}))
    assert first.losses == pytest.approx(losses[:2], rel=1e-9)
    peaks = first.steps[1].peak_allocated_bytes
    assert len(peaks) == 4 and min(peaks) > 0
    plain = Plan("t", GBS, 2, (Stage(0, 4, group),), (1, 3))
    second = run_plan(plain, TASK64, RunConfig(**{**config.__dict__, "steps": 3, "memory_step": None}))
    assert second.start_step == 2 and second.losses == pytest.approx(losses[2:], rel=1e-9)
    state = second.checkpoint.model_state()
    assert max(float((state[k] - v).abs().max()) for k, v in reference.state_dict().items()) < 1e-9


def test_bf16_plan_runs_under_autocast_on_every_stage() -> None:
    """A bf16 PP 2 plan gives the losses of single-process bf16 training (up to the summation order
    of microbatches), not those of fp32 training."""
    plan = Plan("t", GBS, 4, (Stage(0, 2, (ReplicaGroup("cpu", "local"),)), Stage(2, 4, (ReplicaGroup("cpu", "local"),))),
                precision="bf16")
    config = RunConfig(steps=3, optimizer="adam", lr=3e-3)
    result = run_plan(plan, TASK32, config)
    _, bf16 = train_reference(TASK32, GBS, config, precision=Precision.BF16)
    _, fp32 = train_reference(TASK32, GBS, config)
    assert result.losses == pytest.approx(bf16, rel=2e-3)
    assert result.losses[0] != pytest.approx(fp32[0], rel=1e-6)


def test_dimensions_the_runtime_cannot_apply_are_refused_before_launch() -> None:
    with pytest.raises(InputError, match="plan.precision"):
        run_plan(Plan("t", GBS, 2, (Stage(0, 4, (ReplicaGroup("cpu", "local"),)),), precision="bf16"), TASK64)
    tp_zero = Plan("t", GBS, 2, (Stage(0, 4, (ReplicaGroup("cpu", "local", 2, 2),), "none", "zero1"),))
    with pytest.raises(InputError, match=r"plan.stages\[0\].optimizer_sharding"):
        check_optimizer_sharding(tp_zero)


def test_model_specs_load_a_task_or_say_what_is_wrong() -> None:
    from heteroplan.runtime.models import load_task

    assert isinstance(load_task("heteroplan.runtime.models:TinyGPTTask"), TinyGPTTask)
    for spec, why in (("no_colon", "package.module:factory"), ("heteroplan.nope:x", "cannot import"),
                      ("heteroplan.runtime.models:tiny_gpt", "returned a module"),
                      ("heteroplan.runtime.models:__all__", "TrainTask")):
        with pytest.raises(InputError, match=why):
            load_task(spec)


USER_MODEL = '''import torch
from torch import nn
from heteroplan.runtime import SequentialTask


def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(16, 8), nn.Linear(8, 12), nn.GELU(), nn.Linear(12, 16))


def batch(step, start, count):
    ids = (torch.arange(start, start + count)[:, None] * 3 + torch.arange(5)[None, :] + step) % 16
    return ids, (ids + 1) % 16


def loss(out, target):
    return nn.functional.cross_entropy(out.reshape(-1, 16), target.reshape(-1))


def task():
    return SequentialTask(build, batch, loss)
'''


def test_profile_cli_profiles_a_user_model_from_its_factory(tmp_path: Path, monkeypatch, capsys) -> None:
    import json

    from heteroplan.cli import main
    from heteroplan.perf.sailor_profiles import load_model_profile

    (tmp_path / "user_model_35.py").write_text(USER_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["profile", "--model", "user_model_35:task", "--out", str(tmp_path / "prof"), "--no-network",
                 "--mbs", "1,2", "--warmup", "0", "--repeats", "1", "--timing", "prefix", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == "task" and summary["layers"] == 4
    profile = load_model_profile("task", tmp_path / "prof")
    assert profile.num_layers == 4
    assert profile.stage_sizes(1, 0, 4)[0] == 16 * 8 + 8 * 12 + 12 + 12 * 16 + 16  # exact parameter count


def test_cuda_ranks_use_expandable_segments_unless_the_allocator_is_configured() -> None:
    """The allocator setting a rank applies before CUDA starts: expandable segments on CUDA, nothing
    where the user set ``PYTORCH_CUDA_ALLOC_CONF``, on CPU, or when switched off."""
    cuda = RunConfig(device="cuda")
    assert cuda.allocator_environment({}) == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert cuda.allocator_environment({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}) == {}
    assert RunConfig(device="cpu").allocator_environment({}) == {}
    assert RunConfig(device="cuda", cuda_expandable_segments=False).allocator_environment({}) == {}
    with pytest.raises(InputError, match="cuda_expandable_segments"):
        RunConfig(cuda_expandable_segments="yes")
