"""The Sia artifact's Pollux (``pollux-sia``): each mechanism pinned by a hand-built instance
(fair-share speed-ups, type-blind virtual-node choice, policy state after the majority-type
fix-up, the fix-up's tie-break, restarts paid at the application's delay but priced at 30 s,
no pinning of restoring jobs, a saturated cluster admitting every job before growing any)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import InputError
from heteroplan.formulations.sia import ConfigSet, build_sia_model
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.pollux import PolluxPolicy
from heteroplan.policies.pollux_artifact import (
    VIRTUAL_NODE_GPUS,
    PolluxArtifactPolicy,
    fewest_virtual_nodes,
    place_virtual,
)
from heteroplan.policies.registry import make_policy
from heteroplan.policies.sia_solve import solve_sia


def _brute_force(G: np.ndarray, gpus: np.ndarray, capacity: int, base: np.ndarray, lam: float) -> tuple[int, ...]:
    """Best config per job (-1: none) for p = -1: minimize sum base/G + lam per unallocated job."""
    best, arg = np.inf, ()
    for choice in itertools.product(range(-1, G.shape[1]), repeat=G.shape[0]):
        if sum(gpus[c] for c in choice if c >= 0) > capacity:
            continue
        cost = sum(base[j] / G[j, c] if c >= 0 else lam for j, c in enumerate(choice))
        if cost < best:
            best, arg = cost, choice
    return arg


def test_fair_share_base_moves_gpus_to_the_job_that_scales():
    configs = ConfigSet.pooled(4, 4)  # 1, 2, 4 GPUs
    # Job 0 doubles its goodput on 2 GPUs; job 1 gains 1.5x. Three GPUs for both.
    G = np.array([[1.0, 2.0, 0.0], [1.0, 1.5, 0.0]])
    cap = np.array([3.0])
    one_gpu = solve_sia(build_sia_model(G, configs, cap, p=-1.0, lam=250.0), "milp").choice
    # Relative to one GPU: (2, 1) costs 1/2 + 1 = 1.5 < (1, 2): 1 + 1/1.5 = 1.67.
    assert tuple(one_gpu) == (1, 0)
    # Relative to a fair share with job 1's fair-share goodput 3x its 1-GPU goodput:
    # (2, 1) costs 1/2 + 3 = 3.5 > (1, 2): 1 + 3/1.5 = 3.
    base = np.array([1.0, 3.0])
    fair = solve_sia(build_sia_model(G, configs, cap, p=-1.0, lam=250.0, base=base), "milp").choice
    assert tuple(fair) == (0, 1)
    assert tuple(fair) == _brute_force(G, configs.num_gpus, 3, base, 250.0)
    # A base <= 0 falls back to the job's smallest goodput; a wrong shape is refused.
    same = solve_sia(build_sia_model(G, configs, cap, p=-1.0, lam=250.0, base=np.array([0.0, -1.0])), "milp")
    assert tuple(same.choice) == (1, 0)
    with pytest.raises(InputError, match="base"):
        build_sia_model(G, configs, cap, p=-1.0, base=np.ones(3))


def _mixed_cluster() -> Cluster:
    """Two slow 4-GPU nodes first, then two fast ones (virtual nodes in this order)."""
    types = (GPUType("aws", 16, 4), GPUType("dgx-ext", 80, 4))
    nodes = (Node("s0", "aws", 4), Node("s1", "aws", 4), Node("f0", "dgx-ext", 4), Node("f1", "dgx-ext", 4))
    return Cluster(types, nodes)


def test_shuffled_virtual_nodes_do_not_always_pick_the_first_type():
    cluster, job = _mixed_cluster(), [JobState("big", "imagenet", 0.0)]
    in_order = PolluxArtifactPolicy(vnode_order="node")
    # In node order the largest job always takes the first (slow) nodes.
    assert in_order.place(cluster, job, {"big": 8})["big"].gpu_type == "aws"
    kept = {PolluxArtifactPolicy(seed=s).place(cluster, job, {"big": 8})["big"].gpu_type
            for s in range(12)}
    assert kept == {"aws", "dgx-ext"}  # type-blind: either type, as the artifact's GA
    # Reproducible for a seed.
    a, b = (PolluxArtifactPolicy(seed=7).place(cluster, job, {"big": 8}) for _ in range(2))
    assert a == b
    with pytest.raises(InputError, match="vnode_order"):
        PolluxArtifactPolicy(vnode_order="random")
    with pytest.raises(InputError, match="speedup_base"):
        PolluxPolicy(speedup_base="half")
    with pytest.raises(InputError, match="seed"):
        PolluxArtifactPolicy(seed="x")
    with pytest.raises(InputError, match="lam"):
        PolluxPolicy(lam=0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, VIRTUAL_NODE_GPUS), min_size=1, max_size=8), st.integers(1, 20), st.randoms())
def test_fewest_virtual_nodes_never_overcommits(free, want, rnd):
    order = np.array(rnd.sample(range(len(free)), len(free)))
    before = list(free)
    got = fewest_virtual_nodes(free, want, order)
    if sum(before) < want:
        assert got is None and free == before
        return
    assert got is not None and sum(c for _, c in got) == want
    for v, c in got:
        assert 0 < c <= before[v]
    assert all(f >= 0 for f in free) and sum(before) - sum(free) == want
    whole = sum(1 for f in before if f == VIRTUAL_NODE_GPUS)
    if whole * VIRTUAL_NODE_GPUS >= want:  # enough whole nodes: the fewest (ceil(want / 4))
        assert len(got) == -(-want // VIRTUAL_NODE_GPUS)


def test_state_after_fixup_is_the_kept_gpus():
    # Virtual nodes: a0 (type a, 4 GPUs), b0/0 and b0/1 (type b, 8 GPUs).
    cluster = Cluster((GPUType("a", 16, 4), GPUType("b", 16, 8)), (Node("a0", "a", 4), Node("b0", "b", 8)))
    policy = PolluxArtifactPolicy(vnode_order="node")
    views = [JobState("y", "cifar10", 0.0)]
    out = policy.place(cluster, views, {"y": 10})
    assert out["y"] == Allocation("b", 6, (("b0", 6),))  # spans a (4) and b (6): keeps b
    # The policy's state is what the job runs on (as the artifact's base allocation after its
    # repair): keeping the 6 GPUs moves nothing; asking 10 again is a new placement.
    assert sum(c for _, c in policy.virtual_nodes["y"]) == 6
    assert policy.place(cluster, views, {"y": 6}) == out


def test_fixup_tie_keeps_the_faster_type():
    cluster = _mixed_cluster()  # virtual nodes s0, s1 (aws), f0, f1 (dgx-ext)
    held = {"p": ((0, 4),), "q": ((3, 4),)}  # p holds s0, q holds f1 and both stay
    views = [JobState(n, "cifar10", 0.0) for n in ("p", "q", "big")]
    out, _ = place_virtual(cluster, views, {"p": 4, "q": 4, "big": 8}, held, np.arange)
    assert out["p"].placement == (("s0", 4),) and out["q"].placement == (("f1", 4),)
    # big gets s1 and f0: 4 aws + 4 dgx-ext, a tie, and the artifact keeps the faster dgx-ext.
    assert out["big"] == Allocation("dgx-ext", 4, (("f0", 4),))


def test_pollux_sia_registry_defaults():
    policy = make_policy("pollux-sia")
    assert (policy.mechanism, policy.vnode_order, policy.speedup_base) == ("sia-artifact", "shuffled", "fair-share")
    assert (policy.lam, policy.restart_unallocated) == (250.0, True)  # the artifact's fitness
    assert (make_policy("pollux").speedup_base, make_policy("pollux").lam) == ("one-gpu", 1.1)
    assert policy.merged_profile and not make_policy("pollux").merged_profile
    with pytest.raises(InputError, match="merged_profile"):
        PolluxArtifactPolicy(merged_profile="yes")


def test_fair_share_speedups_are_relative_to_gpus_over_jobs_on_one_node(monkeypatch):
    from heteroplan.cluster import preset
    from heteroplan.perf.sia_data import bootstrap_model
    from heteroplan.policies import pollux as pollux_module

    seen = {}
    real = pollux_module.build_sia_model

    def spy(*args, **kwargs):
        seen["base"], seen["lam"] = args[8], args[7]
        return real(*args, **kwargs)

    monkeypatch.setattr(pollux_module, "build_sia_model", spy)
    cluster = preset("sia-64")
    jobs = [JobState(f"j{i}", app, 0.0, estimator=bootstrap_model(app))
            for i, app in enumerate(("cifar10", "imagenet", "bert"))]
    # The jobs' own (bootstrapped) models, not the merged profile, which has no data yet.
    policy = PolluxArtifactPolicy(speedup_base="fair-share", merged_profile=False)
    out = policy.allocate(cluster, jobs, 60.0)  # a minute old: restart factor 60 / (60 + 30) for new jobs
    # The fair share on one node of the job's first known type: the artifact's ceil(64 / 3) = 22
    # GPUs, capped at the 16 a job may hold (the same whenever 4 or more jobs share the 64 GPUs).
    fair = min(-(-64 // 3), 16)
    want = [float(np.ravel(j.estimator.goodput(np.array(["aws"], dtype=object), np.array([1]), np.array([fair])))[0])
            for j in jobs]
    assert seen["base"] == pytest.approx(want) and min(want) > 0
    assert seen["lam"] == 250.0  # the artifact's cost of a job without GPUs
    assert set(out) == {"j0", "j1", "j2"}  # every job gets GPUs
    assert PolluxArtifactPolicy(speedup_base="one-gpu").lam == 1.1


def _planned(policy: PolluxArtifactPolicy, cluster: Cluster, job: JobState, gpu_type: str, gpus: int) -> float:
    """Goodput the policy plans with for ``gpus`` GPUs of ``gpu_type`` on one node."""
    model = policy.merged_view(job, cluster).estimator
    return float(np.ravel(model.goodput(np.array([gpu_type], dtype=object), np.array([1]), np.array([gpus]),
                                        progress=0.0))[0])


def test_merged_profile_plans_a_fast_type_with_what_was_measured_on_a_slow_one():
    from heteroplan.perf.fit import fit_throughput_params
    from heteroplan.perf.goodput import GoodputModel
    from heteroplan.perf.measurements import Measurements
    from heteroplan.perf.sia_data import bootstrap_model, true_model

    cluster, truth = _mixed_cluster(), true_model("cifar10")
    est = bootstrap_model("cifar10")
    job = JobState("c", "cifar10", 0.0, estimator=est)
    policy = PolluxArtifactPolicy()
    # Before any observation: linear speed-up (the artifact's lambda n, r: r), whatever the type.
    assert [_planned(policy, cluster, job, t, k) for t in ("aws", "dgx-ext") for k in (1, 2, 4)] == [1, 2, 4] * 2

    def measure(gpu_type: str, k: int, local: int) -> tuple[float, float]:
        step = float(truth.step_time(gpu_type, 1, k, local, 0))
        est.observe(gpu_type, [k], local, step, 0.1 * step)
        return step, 0.1 * step

    slow = measure("aws", 2, 64)  # first measured on 2 slow T4s
    one_slow_fit = GoodputModel(est.app, {"aws": fit_throughput_params(
        Measurements([1], [2], [64], [slow[0]], [slow[1]]))}, est.phi)
    want = float(np.ravel(one_slow_fit.goodput("aws", 1, 2))[0])
    fast_planned = _planned(policy, cluster, job, "dgx-ext", 2)
    assert fast_planned == pytest.approx(want, rel=1e-9)
    assert _planned(policy, cluster, job, "aws", 2) == pytest.approx(want, rel=1e-9)
    # The job's own per-type model knows the A100 is several times faster: not what is planned.
    assert float(np.ravel(est.goodput("dgx-ext", 1, 2))[0]) > 2 * fast_planned
    # The same shape measured later on A100s does not replace the first observation.
    measure("dgx-ext", 2, 64)
    assert _planned(policy, cluster, job, "dgx-ext", 2) == pytest.approx(want, rel=1e-9)
    # A new shape (another local batch) is added: the one fit moves towards the A100.
    measure("dgx-ext", 2, 32)
    assert _planned(policy, cluster, job, "dgx-ext", 2) > 1.02 * want


def test_allocate_plans_with_the_merged_profile(monkeypatch):
    from heteroplan.perf.sia_data import bootstrap_model
    from heteroplan.policies import pollux as pollux_module

    seen = []
    real = pollux_module.build_sia_model
    monkeypatch.setattr(pollux_module, "build_sia_model", lambda *a, **k: seen.append(a[0].copy()) or real(*a, **k))
    cluster = _mixed_cluster()
    est = bootstrap_model("cifar10")
    # Ran on 4 GPUs before (the scale-up rule then allows 8) and measured there on 4 T4s.
    job = JobState("c", "cifar10", 0.0, estimator=est, max_gpus_run=4, last_gpus=4)
    policy = PolluxArtifactPolicy(speedup_base="one-gpu")
    policy.allocate(cluster, [job], 0.0)  # first seen: no observation yet, linear speed-up
    configs = policy.pooled(cluster)
    assert seen[-1][0] == pytest.approx(np.where(configs.num_gpus <= 8, configs.num_gpus, 0.0))
    est.observe("aws", [4], 64, 0.5, 0.05)
    policy.allocate(cluster, [job], 0.0)
    merged = policy.profiles["c"].model(est, cluster.type_names)
    want = merged.goodput(np.array(["aws"] * len(configs), dtype=object), configs.num_nodes, configs.num_gpus)
    assert seen[-1][0] == pytest.approx(np.where(configs.num_gpus <= 8, want, 0.0))
    # Without merging the optimiser sees the job's bootstrapped per-type model instead.
    PolluxArtifactPolicy(speedup_base="one-gpu", merged_profile=False).allocate(cluster, [job], 0.0)
    assert not np.allclose(seen[-1][0], seen[-2][0])


def test_fair_share_fitness_prices_a_job_without_gpus_as_restarting(monkeypatch):
    # The artifact's GA penalizes any state that differs from the base state; a job without
    # GPUs has an empty base state, so all its configurations carry the restart factor
    # max(T - n S, 0) / (T + S) (here S = 30 s, the price the artifact's GA puts on every restart).
    from heteroplan.cluster import preset
    from heteroplan.perf.sia_data import bootstrap_model
    from heteroplan.policies import pollux as pollux_module

    seen = []
    real = pollux_module.build_sia_model

    def spy(*args, **kwargs):
        seen.append(np.array(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(pollux_module, "build_sia_model", spy)
    cluster = preset("sia-64")
    jobs = [JobState("new", "cifar10", 50.0, estimator=bootstrap_model("cifar10"), restart_delay=30.0),
            JobState("old", "cifar10", 0.0, estimator=bootstrap_model("cifar10"), restart_delay=30.0,
                     num_restarts=1)]
    for flag in (False, True):
        PolluxArtifactPolicy(speedup_base="fair-share", merged_profile=False,
                     restart_unallocated=flag).allocate(cluster, jobs, 110.0)
    plain, penalized = seen
    np.testing.assert_allclose(penalized[0], plain[0] * 60 / 90)  # age 60 s, no restarts
    np.testing.assert_allclose(penalized[1], plain[1] * 80 / 140)  # age 110 s, one restart
    with pytest.raises(InputError, match="restart_unallocated"):
        PolluxPolicy(restart_unallocated="yes")


def _spy_model(monkeypatch) -> list[tuple]:
    """Record the arguments every allocate passes to build_sia_model."""
    from heteroplan.policies import pollux as pollux_module

    seen: list[tuple] = []
    real = pollux_module.build_sia_model

    def spy(*args, **kwargs):
        seen.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(pollux_module, "build_sia_model", spy)
    return seen


def test_pollux_sia_jobs_pay_their_restore_delay_but_restarts_are_priced_at_30_s(monkeypatch):
    # The artifact's jobs restart in their application's rescale_time (imagenet 250 s) while its
    # GA prices every restart at `delay = 30`: an imagenet job 100 s old with one restart has the
    # factor (100 - 30) / (100 + 30), not max(100 - 250, 0) / 350 = 0 (which would freeze it).
    from heteroplan.cluster import preset
    from heteroplan.perf.sia_data import bootstrap_model
    from heteroplan.scheduling.policy_check import restart_delay_of

    policy = make_policy("pollux-sia")
    assert restart_delay_of(policy) is None and policy.restart_price_s == 30.0 and not policy.pin_restoring
    assert make_policy("pollux").restart_price_s is None and make_policy("pollux").pin_restoring
    seen = _spy_model(monkeypatch)
    one = Allocation("rtx", 1, (("rtx@default/0", 1),))
    job = JobState("i", "imagenet", 0.0, allocation=one, num_restarts=1, restart_delay=250.0, max_gpus_run=1,
                   last_gpus=1, estimator=bootstrap_model("imagenet"))
    out = PolluxArtifactPolicy(speedup_base="one-gpu").allocate(preset("sia-64"), [job], 100.0)
    np.testing.assert_allclose(seen[-1][4], [70 / 130])
    # Linear speed-up (merged profile, nothing observed yet): 2 GPUs at factor 0.54 beat the one
    # GPU kept (1 / 1.08 < 1).
    assert out["i"].num_gpus == 2
    # Priced at what the job pays, the restart factor is 0 and the job stays on its one GPU.
    kept = PolluxArtifactPolicy(speedup_base="one-gpu", restart_price_s=250.0).allocate(preset("sia-64"), [job], 100.0)
    np.testing.assert_allclose(seen[-1][4], [0.0])
    assert kept["i"].num_gpus == 1
    with pytest.raises(InputError, match="restart_price_s"):
        PolluxPolicy(restart_price_s=-1.0)


def test_pollux_sia_does_not_pin_a_restoring_job(monkeypatch):
    from heteroplan.cluster import preset

    seen = _spy_model(monkeypatch)
    job = JobState("b", "bert", 0.0, allocation=Allocation("rtx", 2, (("rtx@default/0", 2),)), restoring=True,
                   restart_delay=120.0, max_gpus_run=2, last_gpus=2)
    PolluxArtifactPolicy().allocate(preset("sia-64"), [job], 60.0)
    PolluxPolicy().allocate(preset("sia-64"), [job], 60.0)
    assert list(seen[0][5]) == [False] and list(seen[1][5]) == [True]
    with pytest.raises(InputError, match="pin_restoring"):
        PolluxPolicy(pin_restoring="no")


def test_artifact_fitness_admits_every_job_before_growing_any():
    # A saturated cluster: 16 GPUs held by 8 jobs on 2 GPUs each (10 min old), 8 new jobs (1 min
    # old). The artifact's fitness (fair-share speed-ups, 250 per job without GPUs, new jobs at
    # their restart factor 60 / 90) gives all 16 jobs one GPU: 8 / (600 / 630) + 8 / (60 / 90)
    # = 20.4 against 8 / 2 + 8 * 250 for keeping. Relative to one GPU with lam = 1.1, keeping
    # (8 / 2 + 8 * 1.1 = 12.8) beats it (8 / 0.95 + 8 = 16.4): the new jobs queue.
    from heteroplan.perf.sia_data import bootstrap_model

    cluster = _mixed_cluster()
    nodes = [n.name for n in cluster.nodes]
    old = [JobState(f"old{i}", "cifar10", 0.0, estimator=bootstrap_model("cifar10"), max_gpus_run=2, last_gpus=2,
                    allocation=Allocation(cluster.nodes[i // 2].gpu_type, 2, ((nodes[i // 2], 2),)))
           for i in range(8)]
    new = [JobState(f"new{i}", "cifar10", 540.0, estimator=bootstrap_model("cifar10")) for i in range(8)]
    artifact = PolluxArtifactPolicy().allocate(cluster, old + new, 600.0)
    assert set(artifact) == {j.job_id for j in old + new}
    assert all(a.num_gpus == 1 for a in artifact.values())
    one_gpu = PolluxArtifactPolicy(speedup_base="one-gpu").allocate(cluster, old + new, 600.0)
    assert set(one_gpu) == {j.job_id for j in old} and all(a.num_gpus == 2 for a in one_gpu.values())
