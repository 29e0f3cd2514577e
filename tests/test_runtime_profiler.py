"""Runtime profiler: layer profiles and network curves written for the planner, and planning with them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")
from torch import nn  # noqa: E402

from heteroplan.cli import main  # noqa: E402
from heteroplan.cluster import GPUType  # noqa: E402
from heteroplan.errors import InputError  # noqa: E402
from heteroplan.perf.sailor_network import BandwidthCurve, load_network  # noqa: E402
from heteroplan.perf.sailor_profiles import DATA_DIR, available_models, load_model_profile  # noqa: E402
from heteroplan.planner import plan_job, simulate_plan  # noqa: E402
from heteroplan.runtime.netbench import NetworkMeasurement, fit_bandwidth_curve, measure_network  # noqa: E402
from heteroplan.runtime.profiler import profile_layers  # noqa: E402

VOCAB, SEQ, D = 50, 32, 64


def mlp(d: int, h: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d))


def small_model(d: int = D, big: int = 1) -> nn.Sequential:
    """Embedding, MLP(d, d), MLP(d, big*d), head: layer 2 has about ``big`` times the params and flops of layer 1."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(VOCAB, d), mlp(d, d), mlp(d, big * d), nn.Linear(d, VOCAB))


def tokens(mbs: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (mbs, SEQ))


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    model = small_model()
    prof = profile_layers(model, tokens, (1, 2), warmup=1, repeats=2)
    root = tmp_path_factory.mktemp("prof")
    prof.write(root, "toy", "cpu")
    NetworkMeasurement((1_000_000,), (2.0,), (5e-4,), (0.0, 0.0, 2.0), 2e9).write(root, "cpu", "local")
    return model, prof, root


def test_written_profile_loads_with_exact_sizes(profiled) -> None:
    model, prof, root = profiled
    loaded = load_model_profile("toy", root)
    assert available_models(root) == ("toy",)
    assert loaded.num_layers == len(model) == 4
    assert loaded.gpu_types == ("cpu",) and loaded.microbatch_sizes("cpu") == (1, 2)
    assert loaded.tp_degrees("cpu", 2) == (1,)
    assert loaded.compute[("cpu", 2, 1)].shape == (3, 4)
    # the largest mbs is stored as measured; smaller ones have their prefix sums clipped to it
    np.testing.assert_allclose(loaded.compute[("cpu", 2, 1)], np.array(prof.compute[2]).T)
    small, large = np.array(prof.compute[1]).T, np.array(prof.compute[2]).T
    np.testing.assert_allclose(np.cumsum(loaded.compute[("cpu", 1, 1)], axis=1),
                               np.minimum(np.cumsum(small, axis=1), np.cumsum(large, axis=1)))
    assert np.all(loaded.compute[("cpu", 1, 1)] >= 0)
    np.testing.assert_array_equal(loaded.params[1], [sum(p.numel() for p in layer.parameters()) for layer in model])
    x = tokens(1)
    outs = []
    for layer in model:
        x = layer(x)
        outs.append(x.numel())
    np.testing.assert_array_equal(loaded.act_out[1], outs)
    # saved for backward, per sample: the embedding keeps its int64 ids; a Linear keeps its input;
    # MLP(d, h) keeps its input, the GELU input and the GELU output (both h wide)
    f32 = 4
    expected = [SEQ * 8, SEQ * (D + D + D) * f32, SEQ * (D + D + D) * f32, SEQ * D * f32]
    assert prof.act_mem_bytes == tuple(expected)
    np.testing.assert_array_equal(loaded.act_mem[1], np.array(expected) / 4)
    info = json.loads((root / "llm_info.json").read_text())["toy"]["1"]["3"]
    assert info["act_input_floats"] == SEQ * D and info["act_output_bytes"] == SEQ * VOCAB * 4
    assert set(json.loads((root / "profiles" / "toy" / "cpu.json").read_text())) == {"1", "2"}


def test_write_merges_models_and_reloads_changed_files(profiled, tmp_path) -> None:
    _, prof, _ = profiled
    prof.write(tmp_path, "a", "cpu")
    first = load_model_profile("a", tmp_path)
    prof.write(tmp_path, "b", "cpu")
    assert available_models(tmp_path) == ("a", "b")
    assert set(json.loads((tmp_path / "llm_info.json").read_text())) == {"a", "b"}
    doubled = type(prof)(
        {m: tuple(tuple(2 * t for t in row) for row in rows) for m, rows in prof.compute.items()},
        *(getattr(prof, k) for k in ("params_floats", "params_bytes", "act_output_floats", "act_output_bytes",
                                     "act_input_floats", "act_input_bytes", "act_mem_bytes")),
    )
    doubled.write(tmp_path, "a", "cpu")
    again = load_model_profile("a", tmp_path)
    assert again is not first
    np.testing.assert_allclose(again.compute[("cpu", 2, 1)], 2 * first.compute[("cpu", 2, 1)])
    # the shipped data is untouched and still the default
    assert load_model_profile("OPT-350") is load_model_profile("OPT-350", DATA_DIR)
    assert "local" not in load_network().zones


def test_profiling_restores_weights_and_times_the_loss() -> None:
    model = small_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    target = torch.randint(0, VOCAB, (2, SEQ))

    def loss(out: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.reshape(-1, VOCAB), target[: out.shape[0]].reshape(-1))

    prof = profile_layers(model, tokens, (2,), loss_fn=loss, warmup=0, repeats=1, optimizer="adam")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert all(u > 0 for _, _, u in prof.compute[2])
    with pytest.raises(InputError, match="loss_fn"):
        profile_layers(model, tokens, (2,), loss_fn=lambda out: out.sum(-1), warmup=0, repeats=1)


def _live_tensors() -> int:
    import gc
    import warnings

    gc.collect()
    with warnings.catch_warnings():  # isinstance on every object touches torch's deprecated aliases
        warnings.simplefilter("ignore", FutureWarning)
        return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


def test_profiling_leaves_nothing_of_the_model_alive() -> None:
    """Once the model and the profile are dropped no tensor of theirs survives: the saved-tensor
    hook that measures activations returned the saved tensors themselves, and an output saved
    for its own backward then holds its grad_fn, a cycle through autograd's C++ graph that gc
    cannot free (every profiled layer's weights and activations leaked; on a GPU the next
    profile counted them, 3.3 GB, as the device's overhead)."""
    from heteroplan.runtime import TinyGPTTask

    task = TinyGPTTask(vocab=VOCAB, seq_len=8, d_model=16, n_layers=2, n_heads=2)
    before = _live_tensors()
    for precision in ("fp32", "bf16"):
        prof = profile_layers(task.build_model(), lambda m: task.batch(0, 0, m)[0], (1, 2),
                              loss_fn=lambda out: out.float().logsumexp(-1).mean(), warmup=0, repeats=1,
                              optimizer="adam", precision=precision, time_recomputed=True)
        assert prof.overhead_bytes == 0  # CPU: the allocator keeps nothing of its own
        del prof
        assert _live_tensors() == before, precision


def test_times_are_positive_and_a_larger_layer_is_slower() -> None:
    # one intra-op thread and the fastest of 3 profiles: robust to other processes on the machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        profs = [profile_layers(small_model(d=128, big=8), tokens, (4,), warmup=1, repeats=3, timing="layer")
                     for _ in range(3)]
    finally:
        torch.set_num_threads(threads)
    times = np.min([np.array(p.compute[4]) for p in profs], axis=0)
    assert np.all(times[:, :2] > 0)
    assert profs[0].params_floats[2] > 7.5 * profs[0].params_floats[1]
    assert times[2, 0] > 2 * times[1, 0], times  # forward
    assert times[2, 1] > 2 * times[1, 1], times  # backward


def test_sweeps_keep_the_fastest_pass_of_every_measurement(monkeypatch) -> None:
    """A slow spell during one sweep (every timed call 3x slower) must not reach the profile."""
    from heteroplan.runtime import profiler

    calls = {"n": 0, "slow": range(0)}

    def fake_timer(self, fn):
        out = fn()
        calls["n"] += 1
        return (3e-3 if calls["n"] in calls["slow"] else 1e-3), out

    monkeypatch.setattr(profiler._Timer, "__call__", fake_timer)
    args = (small_model(), tokens, (1, 2))
    one = profile_layers(*args, warmup=0, repeats=3, timing="layer")
    per_sweep = calls["n"]
    for slow in (range(1, per_sweep + 1), range(per_sweep + 1, 2 * per_sweep + 1), range(per_sweep // 2, per_sweep + 5)):
        calls.update(n=0, slow=slow)
        two = profile_layers(*args, warmup=0, repeats=3, sweeps=2, timing="layer")
        assert calls["n"] == 2 * per_sweep
        assert two.compute == one.compute  # every time from the fast pass
    calls.update(n=0, slow=range(1, per_sweep + 1))
    slowed = profile_layers(*args, warmup=0, repeats=3, timing="layer")
    assert all(f == 3e-3 for rows in slowed.compute.values() for f, _, _ in rows)  # one sweep keeps the spell


@pytest.mark.parametrize("abc", [(-0.02, 0.3, 1.5), (0.01, 0.05, 0.9), (-0.2, 1.7, 3.0)])
def test_curve_fit_recovers_coefficients(abc) -> None:
    sizes = [1e6 * 2**k for k in range(7)] + [1e5]  # the sub-MB point is left out of the fit
    lg = np.log2(np.array(sizes[:-1]) / 1e6)
    bw = list(abc[0] * lg**2 + abc[1] * lg + abc[2]) + [100.0]
    coeffs, cap = fit_bandwidth_curve(sizes, bw)
    np.testing.assert_allclose(coeffs, abc, atol=1e-9)
    assert cap == 100.0e9
    curve = BandwidthCurve.from_entry([list(coeffs), max(bw[:-1]) * 1e9])
    peak = -abc[1] / (2 * abc[0]) if abc[0] < 0 else np.inf
    inside = lg <= peak
    np.testing.assert_allclose(curve.bandwidth(np.array(sizes[:-1]))[inside], np.array(bw[:-1])[inside])


def test_measure_network_with_two_gloo_processes(tmp_path) -> None:
    sizes = (1_000_000, 2_000_000, 4_000_000)
    net = measure_network(2, sizes=sizes, warmup=1, repeats=2, timeout_s=120)
    assert net.sizes_bytes == sizes and net.world_size == 2
    assert all(b > 0 for b in net.bandwidth_gbs)
    np.testing.assert_allclose(np.array(sizes) / np.array(net.latency_s) / 1e9, net.bandwidth_gbs)
    assert net.cap_bytes_per_s == pytest.approx(max(net.bandwidth_gbs) * 1e9)
    net.write(tmp_path, "cpu", "local")
    model = load_network(tmp_path)
    assert model.zones == ("local",)
    assert model.curve(("cpu", "local"), ("cpu", "local")) == net.curve()
    assert model.egress_per_gb("local", "local") == 0.0


def test_plan_job_on_the_written_profile(profiled) -> None:
    _, _, root = profiled
    cpu = GPUType("cpu", 16, 4, 0.5)
    result = plan_job("toy", 8, {("cpu", "local"): 4}, gpu_types=(cpu,), data_dir=root)
    assert result.plan.num_gpus <= 4
    sim = simulate_plan(result.plan, data_dir=root, gpu_types={"cpu": cpu})
    assert sim.iteration_time_s == pytest.approx(result.iteration_time_s)
    assert sim.cost_per_iteration_usd == pytest.approx(result.cost_per_iteration_usd)
    assert sim.memory_per_stage_gb == pytest.approx(result.memory_per_gpu_gb)
    # one GPU: no communication, so an iteration is M microbatches of (fwd + bwd) then the update;
    # the planner must pick the best microbatch size
    prof = load_model_profile("toy", root)
    one = plan_job("toy", 8, {("cpu", "local"): 1}, gpu_types=(cpu,), data_dir=root)
    oracle = min(
        8 // m * (prof.compute[("cpu", m, 1)][0].sum() + prof.compute[("cpu", m, 1)][1].sum())
        + prof.compute[("cpu", m, 1)][2].sum()
        for m in (1, 2)
    )
    assert one.iteration_time_s == pytest.approx(oracle)
    assert one.cost_per_iteration_usd == pytest.approx(0.5 / 3600 * oracle)
    with pytest.raises(InputError, match="pool.zone"):
        plan_job("toy", 8, {("cpu", "elsewhere"): 1}, gpu_types=(cpu,), data_dir=root)


def test_profile_cli_writes_a_loadable_directory(tmp_path, capsys) -> None:
    code = main(["profile", "--out", str(tmp_path), "--no-network", "--mbs", "1,2", "--seq", "8",
                 "--warmup", "0", "--repeats", "1", "--model-name", "cli-model", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == "cli-model" and summary["microbatch_sizes"] == [1, 2]
    loaded = load_model_profile("cli-model", tmp_path)
    assert loaded.num_layers == summary["layers"] and loaded.microbatch_sizes("cpu") == (1, 2)
    assert main(["profile", "--out", str(tmp_path), "--no-network", "--device", "tpu"]) == 2
    assert "device='tpu'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"model": nn.Sequential()}, "model"),
        ({"model": nn.Linear(2, 2)}, "model"),
        ({"microbatch_sizes": (0,)}, "microbatch_sizes"),
        ({"microbatch_sizes": ()}, "microbatch_sizes"),
        ({"device": "banana"}, "device"),
        ({"device": "meta"}, "device"),
        ({"repeats": 0}, "repeats"),
        ({"sweeps": 0}, "sweeps"),
        ({"optimizer": "lbfgs"}, "optimizer"),
        ({"make_input": lambda mbs: torch.randint(0, VOCAB, (mbs + 1, SEQ))}, "make_input"),
        ({"make_input": lambda mbs: torch.randn(mbs, SEQ)}, "model[0]"),
    ],
)
def test_bad_profiler_inputs_name_the_field(kwargs, field) -> None:
    args = {"model": small_model(), "make_input": tokens, "microbatch_sizes": (1,), "warmup": 0, "repeats": 1} | kwargs
    with pytest.raises(InputError) as info:
        profile_layers(**args)
    assert info.value.field == field


def test_bad_paths_and_network_inputs(profiled, tmp_path) -> None:
    _, prof, _ = profiled
    with pytest.raises(InputError, match="gpu_type"):
        prof.write(tmp_path, "toy", "a/b")
    with pytest.raises(InputError, match="data_dir"):
        load_model_profile("toy", tmp_path / "missing")
    with pytest.raises(InputError, match="model"):
        load_model_profile("nope", tmp_path)
    with pytest.raises(InputError, match="world_size"):
        measure_network(1)
    with pytest.raises(InputError, match="sizes_bytes"):
        measure_network(2, sizes=(1_000_000, 2_000_000))  # too few sizes to fit, before spawning
    with pytest.raises(InputError, match="backend"):
        measure_network(2, backend="mpi")


def test_prefix_timing_adds_up_to_the_whole_model(monkeypatch) -> None:
    """A machine where a span of k layers costs k^2 ms (launch and sync costs that a whole pass
    overlaps differently from layers run alone): per-layer timing sums to L ms, prefix timing's
    increments (2k - 1 ms) sum to the whole model's L^2 ms, forward and backward."""
    from heteroplan.runtime import profiler

    model = small_model()

    def fake_time_layer(torch_, timer, layer, inp, index, loss_fn, warmup, repeats):
        k = sum(1 for child in layer.children() if any(child is m for m in model)) or 1  # model layers in the span
        return k * k * 1e-3, 2 * k * k * 1e-3, layer(inp)

    monkeypatch.setattr(profiler, "_time_layer", fake_time_layer)
    L = len(model)
    per_layer = profile_layers(model, tokens, (2,), warmup=0, repeats=1, timing="layer")
    prefix = profile_layers(model, tokens, (2,), warmup=0, repeats=1, timing="prefix")
    assert sum(f for f, _, _ in per_layer.compute[2]) == pytest.approx(L * 1e-3)
    assert [f for f, _, _ in prefix.compute[2]] == pytest.approx([(2 * k - 1) * 1e-3 for k in range(1, L + 1)])
    assert sum(b for _, b, _ in prefix.compute[2]) == pytest.approx(2 * L * L * 1e-3)
    with pytest.raises(InputError, match="timing"):
        profile_layers(model, tokens, (2,), timing="whole")


@given(st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=1, max_size=30))
@settings(max_examples=200, deadline=None)
def test_prefix_fit_is_scipys_isotonic_regression(values) -> None:
    """The nondecreasing fit of noisy prefix times is the least-squares isotonic regression
    (scipy's, an independent implementation), and its increments are >= 0 and add up to it."""
    from scipy.optimize import isotonic_regression

    from heteroplan.runtime.profiler import _increments, _nondecreasing

    fit = _nondecreasing(values)
    np.testing.assert_allclose(fit, isotonic_regression(values).x, atol=1e-9)
    steps = _increments(fit)
    assert min(steps) >= 0 and np.cumsum(steps) == pytest.approx(fit)


def test_one_slow_prefix_does_not_set_the_whole_pass() -> None:
    """A spike at prefix 3 of 8 (10 ms where the prefixes grow 1 ms a layer) moves the whole-model
    time by its share of the pooled block, not to 10 ms as a running maximum would."""
    from heteroplan.runtime.profiler import _nondecreasing

    times = [1.0, 2.0, 10.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert _nondecreasing(times)[-1] == pytest.approx(8.0)


def test_recomputed_layers_are_timed_checkpointed_and_priced_from_the_profile(monkeypatch, tmp_path) -> None:
    """``time_recomputed=True`` times each layer wrapped in a checkpoint (a fake timer charges a
    checkpointed layer 5 ms forward and 7 ms backward, a plain one 1 and 2 ms); the planner prices a
    recomputing plan from those times (5 + 7 ms a layer), and a profile without them from
    ``f + (b + f)`` (1 + 3 ms a layer)."""
    from heteroplan.planner.model.sim_config import PROFILED_CONFIG
    from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
    from heteroplan.runtime import profiler

    model = small_model()

    def fake_time_layer(torch_, timer, layer, inp, index, loss_fn, warmup, repeats):
        checkpointed = type(layer).__name__ == "Checkpointed"
        return (5e-3, 7e-3, layer(inp)) if checkpointed else (1e-3, 2e-3, layer(inp))

    monkeypatch.setattr(profiler, "_time_layer", fake_time_layer)
    L = len(model)
    cpu = GPUType("cpu", memory_gb=16, gpus_per_node=2, price_per_hour=0.1)
    times = {}
    for timed in (True, False):
        prof = profile_layers(model, tokens, (2,), warmup=0, repeats=1, timing="layer", optimizer="adam",
                              time_recomputed=timed)
        assert (prof.recomputed is not None) == timed
        root = tmp_path / str(timed)
        prof.write(root, "toy", "cpu")
        NetworkMeasurement((1_000_000,), (2.0,), (5e-4,), (0.0, 0.0, 2.0), 2e9).write(root, "cpu", "local")
        assert load_model_profile("toy", root).has_recomputed("cpu", 2, 1) == timed
        plan = Plan("toy", 2, 2, (Stage(0, L, (ReplicaGroup("cpu", "local"),), "full"),))
        sim = simulate_plan(plan, data_dir=root, gpu_types={"cpu": cpu}, config=PROFILED_CONFIG)
        times[timed] = float(sim.stage_times.compute[0, 0])
    assert times[True] == pytest.approx(L * 12e-3)
    assert times[False] == pytest.approx(L * 4e-3)


def test_timed_backwards_accumulate_into_existing_gradients_as_the_runtime_does() -> None:
    """Every timed backward of a layer adds its gradients to gradients that already exist (the
    runtime's microbatches accumulate into one buffer), so the add is in the profile's time; the
    layer is left without gradients afterwards."""
    from heteroplan.runtime import profiler

    layer = torch.nn.Linear(8, 8)
    seen: list[bool] = []
    for p in layer.parameters():
        p.register_hook(lambda g, p=p: seen.append(p.grad is not None) or g)
    dev = torch.device("cpu")
    profiler._time_layer(torch, profiler._Timer(torch, dev), layer, torch.randn(4, 8, requires_grad=True), 0, None,
                         warmup=1, repeats=3)
    assert len(seen) == 2 * 4 and all(seen)
    assert all(p.grad is None for p in layer.parameters())
