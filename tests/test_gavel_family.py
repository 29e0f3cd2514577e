"""Gavel's policy family: each LP against a hand-solved instance and cvxpy written independently;
the Sia artifact's Gavel mechanism and the loop mechanisms it relies on, each pinned."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import InputError
from heteroplan.formulations.gavel import (
    finish_time_fairness_model,
    max_min_fairness_model,
    max_sum_throughput_model,
    min_makespan_model,
)
from heteroplan.policies import gavel as gavel_module
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.gavel import GavelPolicy, solve_finish_time_fairness, solve_time_fractions
from heteroplan.policies.registry import make_policy
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.sim.loop import simulate
from heteroplan.sim.metrics import artifact_p99
from heteroplan.solvers import solve
from heteroplan.workload.rigid import RigidJob

TP = np.array([[4.0, 1.0], [2.0, 1.0]])  # steps/s; two 1-GPU jobs, two 1-GPU types
ONE = np.ones(2)


# ---- hand-solved instances -------------------------------------------------------------------

def test_max_sum_throughput_hand_solved():
    # Job 0 on type 0 (4) + job 1 on type 1 (1) = 5 beats the swap (1 + 2 = 3).
    sol = solve(max_sum_throughput_model(TP, ONE, ONE))
    assert sol.objective == pytest.approx(5.0)
    assert sol["X"] == pytest.approx(np.eye(2), abs=1e-9)


def test_cost_and_slo_hand_solved():
    # Per dollar ($4/h, $1/h) the rows are [1, 1] and [0.5, 1]: job 0 on type 0, job 1 on type 1 -> 2.
    sol = solve(max_sum_throughput_model(TP, ONE, ONE, costs=np.array([4.0, 1.0])))
    assert sol.objective == pytest.approx(2.0)
    assert sol["X"] == pytest.approx(np.eye(2), abs=1e-9)
    # SLO: job 1 needs 1.5 steps/s = 2a + (1 - a) -> a >= 1/2; value 2 - a/2 = 1.75.
    sol = solve(max_sum_throughput_model(TP, ONE, ONE, costs=np.array([4.0, 1.0]), min_rates=np.array([0.0, 1.5])))
    assert sol.objective == pytest.approx(1.75)
    assert sol["X"][1] == pytest.approx([0.5, 0.5], abs=1e-7)
    # An SLO no allocation meets: infeasible.
    assert not solve(max_sum_throughput_model(TP, ONE, ONE, min_rates=np.array([0.0, 2.5]))).has_solution


def test_gavel_cost_uses_prices():
    # Raw throughput puts j0 on b and j1 on a (3.5 + 2 > 4 + 1); per dollar ($1/h a, $4/h b)
    # j0 on a and j1 on b (4 + 0.25 > 0.875 + 2).
    cluster = Cluster((GPUType("a", 16, 1, 1.0), GPUType("b", 16, 1, 4.0)), (Node("a0", "a", 1), Node("b0", "b", 1)))
    jobs = [RigidJob("j0", 1, 1e9, 0.0, {"a": 4.0, "b": 3.5}), RigidJob("j1", 1, 1e9, 0.0, {"a": 2.0, "b": 1.0})]
    res = simulate(jobs, cluster, make_policy("gavel-cost"), round_length=10.0, max_rounds=3, record=True)
    assert all(a["j0"].gpu_type == "a" and a["j1"].gpu_type == "b" for _, a in res.schedule)
    res = simulate(jobs, cluster, make_policy("gavel-throughput"), round_length=10.0, max_rounds=3, record=True)
    assert all(a["j0"].gpu_type == "b" and a["j1"].gpu_type == "a" for _, a in res.schedule)
    with pytest.raises(InputError, match="prices"):
        simulate(jobs, cluster, make_policy("gavel-cost", prices={"a": 4.0, "b": -1.0}), round_length=10.0,
                 max_rounds=1)


def test_min_makespan_hand_solved():
    # X = [[a, 1-a], [1-a, a]]: rates 3a + 1 and 2 - a are equal at a = 1/4 -> 1.75 steps/s each;
    # 100 steps each finish at 100 / 1.75 s.
    sol = solve(min_makespan_model(TP, ONE, ONE, np.array([100.0, 100.0])))
    assert 1 / sol["z"][0] == pytest.approx(100 / 1.75)
    assert sol["X"] == pytest.approx(np.array([[0.25, 0.75], [0.75, 0.25]]), abs=1e-7)


def test_max_min_fairness_aware_and_agnostic_hand_solved():
    # Aware: normalized rows [1.6, 0.4] and [4/3, 2/3]; equal at a = 1/2, level 1.
    sol = solve(max_min_fairness_model(TP, ONE, ONE), algorithm="simplex")
    assert sol.objective == pytest.approx(1.0)
    # Agnostic: three 1-GPU jobs on two 1-GPU types each get 2/3 of the time, whatever the speeds.
    tp3 = np.array([[4.0, 1.0], [2.0, 1.0], [9.0, 0.5]])
    sol = solve(max_min_fairness_model(tp3, np.ones(3), ONE, heterogeneity_aware=False), algorithm="simplex")
    assert sol.objective == pytest.approx(2 / 3)


def test_finish_time_fairness_hand_solved():
    # One 1-GPU type, two jobs, 10 steps each at 1 step/s, isolated times 10 s and 40 s:
    # rho_j = 10 / (thr_j * iso_j); equal at thr = (0.8, 0.2) -> rho = 1.25.
    x, rho = solve_finish_time_fairness(np.ones((2, 1)), ONE, np.ones(1), np.array([10.0, 10.0]),
                                        np.array([10.0, 40.0]), rel_tol=1e-7)
    assert rho == pytest.approx(1.25, rel=1e-5)
    assert x[:, 0] == pytest.approx([0.8, 0.2], abs=1e-4)
    # Just below the optimum the LP is infeasible, at it feasible.
    below = solve(finish_time_fairness_model(np.ones((2, 1)), ONE, np.ones(1), np.array([10.0, 10.0]),
                                             np.array([10.0, 40.0]), 1.25 * (1 - 1e-4)))
    assert not below.has_solution


def test_models_reject_bad_input():
    with pytest.raises(InputError, match="remaining_steps"):
        min_makespan_model(TP, ONE, ONE, np.array([1.0, 0.0]))
    with pytest.raises(InputError, match="rho"):
        finish_time_fairness_model(TP, ONE, ONE, ONE, ONE, -1.0)
    with pytest.raises(InputError, match="weights"):
        max_sum_throughput_model(TP, ONE, ONE, weights=np.array([1.0, 0.0]))
    with pytest.raises(InputError, match="objective"):
        GavelPolicy(objective="fastest")


# ---- an independent solver: the same problems written directly in cvxpy ---------------------

def _cvxpy_optimum(objective: str, tp, scale, cap, rem, iso):
    n, m = tp.shape
    usable = (tp > 0) & (scale[:, None] <= cap[None, :])
    x = cp.Variable((n, m), nonneg=True)
    thr = cp.sum(cp.multiply(np.where(usable, tp, 0.0), x), axis=1)
    cons = [cp.sum(x, axis=1) <= 1, scale @ x <= cap, cp.multiply(1.0 - usable, x) == 0]
    if objective == "max_sum_throughput":
        prob = cp.Problem(cp.Maximize(cp.sum(thr)), cons)
    elif objective == "max_throughput_per_cost":  # prices 1..m $/h, SLO: half of job 0's best rate
        per_dollar = cp.sum(cp.multiply(np.where(usable, tp, 0.0) / np.arange(1.0, m + 1), x))
        prob = cp.Problem(cp.Maximize(per_dollar), cons + [thr[0] >= 0.5 * tp[0, usable[0]].max()])
    elif objective == "max_min_fairness":
        prob = cp.Problem(cp.Maximize(cp.min(cp.multiply(1.0 / np.where(usable, tp, 0.0).mean(axis=1), thr))), cons)
    elif objective == "min_makespan":
        prob = cp.Problem(cp.Minimize(cp.max(cp.multiply(rem, cp.inv_pos(thr)))), cons)
    else:  # finish-time fairness, elapsed 0: minimize max_j rem_j / (thr_j iso_j) (convex)
        prob = cp.Problem(cp.Minimize(cp.max(cp.multiply(rem / iso, cp.inv_pos(thr)))), cons)
    prob.solve(solver="CLARABEL")
    return prob.value


def _our_optimum(objective: str, tp, scale, cap, rem, iso):
    usable = (tp > 0) & (scale[:, None] <= cap[None, :])
    prices = np.arange(1.0, tp.shape[1] + 1)
    slo = np.zeros(len(tp))
    slo[0] = 0.5 * tp[0, usable[0]].max()
    per_cost = objective == "max_throughput_per_cost"
    x = solve_time_fractions(objective, tp, scale, cap, remaining_steps=rem, isolated_time=iso,
                             costs=prices if per_cost else None, min_rates=slo if per_cost else None)
    thr = (x * np.where(usable, tp, 0.0)).sum(axis=1)
    assert (x.sum(axis=1) <= 1 + 1e-6).all() and ((x * scale[:, None]).sum(axis=0) <= cap + 1e-6).all()
    if objective == "max_sum_throughput":
        return thr.sum()
    if objective == "max_throughput_per_cost":
        assert thr[0] >= slo[0] * (1 - 1e-6)
        return (x * np.where(usable, tp, 0.0) / prices).sum()
    if objective == "max_min_fairness":
        return (thr / np.where(usable, tp, 0.0).mean(axis=1)).min()
    if objective == "min_makespan":
        return (rem / thr).max()
    return (rem / (thr * iso)).max()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["max_sum_throughput", "max_min_fairness", "min_makespan", "finish_time_fairness",
                        "max_throughput_per_cost"]),
       st.integers(1, 5), st.integers(1, 3), st.integers(0, 10_000))
@example("max_sum_throughput", 1, 2, 1)  # costs must not leak into the raw-throughput objective
def test_lp_family_matches_cvxpy(objective, num_jobs, num_types, seed):
    rng = np.random.default_rng(seed)
    tp = rng.uniform(0.5, 10.0, (num_jobs, num_types))
    scale = rng.choice([1, 2], num_jobs).astype(float)
    cap = rng.integers(2, 5, num_types).astype(float)
    rem = rng.uniform(100, 1000, num_jobs)
    iso = rng.uniform(50, 500, num_jobs)
    ours = _our_optimum(objective, tp, scale, cap, rem, iso)
    assert ours == pytest.approx(_cvxpy_optimum(objective, tp, scale, cap, rem, iso), rel=2e-3)


def test_interior_point_splits_identical_jobs_evenly():
    # Five identical jobs, 2 GPUs: a vertex gives two of them everything; the artifact's
    # interior-point solution (rounded to 5 decimals) gives each 0.4.
    tp = np.tile([[3.0]], (5, 1))
    x = solve_time_fractions("max_sum_throughput", tp, np.ones(5), np.array([2.0]), algorithm="ipm-interior",
                             decimals=5)
    assert x[:, 0] == pytest.approx([0.4] * 5, abs=1e-5)
    vertex = solve_time_fractions("max_sum_throughput", tp, np.ones(5), np.array([2.0]))
    assert sorted(np.round(vertex[:, 0], 6)) == [0, 0, 0, 1, 1]


# ---- the Sia artifact's Gavel mechanism -------------------------------------------------------

def _cluster(nodes: int = 1, per_node: int = 2) -> Cluster:
    return Cluster((GPUType("g", 16, per_node),), tuple(Node(f"n{i}", "g", per_node) for i in range(nodes)))


def test_registry_names_build_each_objective():
    for name, objective in [("gavel", "max_min_fairness"), ("gavel-agnostic", "max_min_fairness_agnostic"),
                            ("gavel-throughput", "max_sum_throughput"), ("gavel-ftf", "finish_time_fairness"),
                            ("gavel-makespan", "min_makespan"), ("gavel-cost", "max_throughput_per_cost"),
                            ("gavel-sia", "max_sum_throughput")]:
        policy = make_policy(name)
        assert policy.objective == objective and policy.name == name
    assert make_policy("gavel-sia").mechanism == "sia-artifact"


def test_half_round_credit_alternates_identical_jobs():
    # Two identical jobs, one GPU, X = 0.5 each: with half a round of credit each, priorities
    # tie in round 1 (job order breaks it), then the job that waited always leads.
    jobs = [RigidJob(f"j{i}", 1, 1e9, 0.0, {"g": 1.0}) for i in range(2)]
    res = simulate(jobs, _cluster(1, 1), make_policy("gavel-sia"), round_length=10.0, max_rounds=6, record=True)
    assert [sorted(a)[0] for _, a in res.schedule] == ["j0", "j1", "j0", "j1", "j0", "j1"]


def test_idle_gpus_go_to_jobs_the_lp_gave_nothing(monkeypatch):
    # The LP gives job b nothing; the GPU job a cannot use still goes to b.
    monkeypatch.setattr(gavel_module, "solve_time_fractions", lambda *a, **k: np.array([[1.0], [0.0]]))
    views = [JobState("a", "x", 0.0, requested_gpus=1), JobState("b", "x", 0.0, requested_gpus=1)]
    out = make_policy("gavel-sia").allocate(_cluster(1, 2), views, 0.0)
    assert set(out) == {"a", "b"}
    out = make_policy("gavel-throughput").allocate(_cluster(1, 2), views, 0.0)  # Gavel's rounds: no fix-up
    assert set(out) == {"a"}


def test_previous_gpus_kept_only_within_size_tier(monkeypatch):
    # Two 2-GPU nodes. Small job s ran on n0; the new 2-GPU job packs onto the first free GPUs
    # (n0) before the 1-GPU tier is placed, so s moves to n1.
    monkeypatch.setattr(gavel_module, "solve_time_fractions", lambda *a, **k: np.array([[1.0], [0.5]]))
    cluster = _cluster(2, 2)
    views = [JobState("big", "x", 0.0, requested_gpus=2),
             JobState("s", "x", 0.0, requested_gpus=1, allocation=Allocation("g", 1, (("n0", 1),)))]
    out = make_policy("gavel-sia").allocate(cluster, views, 0.0)
    assert out["big"].placement == (("n0", 2),)
    assert out["s"].placement == (("n1", 1),)


# ---- loop mechanisms the artifact has ---------------------------------------------------------

class _Hopper:
    """Moves its one 1-GPU job to the other node every round (same type, same shape)."""

    name, round_length, elastic, forking = "hopper", 10.0, False, False

    def __init__(self) -> None:
        self.turn = 0

    def allocate(self, cluster, jobs, now):
        self.turn += 1
        return {j.job_id: Allocation("g", 1, ((f"n{self.turn % 2}", 1),)) for j in jobs}


def test_same_shape_moves_are_free_only_with_free_moves():
    job = [RigidJob("j", 1, 95.0, 0.0, {"g": 1.0})]
    free = simulate(job, _cluster(2, 1), _Hopper(), fidelity=SimFidelity(free_moves=True))
    paid = simulate(job, _cluster(2, 1), _Hopper(), fidelity=SimFidelity(free_moves=False))
    assert free.jobs[0].restarts == 0
    assert paid.jobs[0].restarts == 9  # 10 rounds, a restart in each after the first


def test_restart_delay_charged_on_first_start_and_arrival_waits_for_round_boundary():
    from heteroplan.perf.applications import get_app
    from heteroplan.sim.events import SimEventKind
    from heteroplan.workload.sia import JobSpec

    cluster = Cluster((GPUType("dgx-ext", 80, 8),), (Node("d0", "dgx-ext", 8),))
    res = simulate([JobSpec("c", 5.0, "cifar10", 1, 128)], cluster, make_policy("gavel"), round_length=60.0,
                   fidelity=SimFidelity.ideal(), progress=False)
    rec = res.jobs[0]
    assert rec.start_time == 60.0  # arrived at 5 s, first seen at the next boundary
    delay = get_app("cifar10").restart_delay
    assert delay > 0
    first = [e for e in res.events if e.kind is SimEventKind.START]
    assert len(first) == 1 and rec.restarts == 0
    # Its run time is its work at its rate plus the restore delay of the first start.
    quick = simulate([JobSpec("c", 5.0, "cifar10", 1, 128)], cluster, make_policy("gavel"), round_length=60.0,
                     fidelity=SimFidelity.ideal(), progress=False, max_rounds=1)
    assert quick.jobs[0].fraction_done * (rec.finish_time - rec.start_time - delay) == pytest.approx(
        60.0 - delay, rel=0.05)


def test_p99_is_the_artifacts_sorted_index():
    values = np.arange(1.0, 101.0)  # sorted[int(99)] = 100, np.percentile would give 99.01
    assert artifact_p99(values) == 100.0
    assert artifact_p99(np.arange(1.0, 11.0)) == 10.0  # sorted[int(9.9)] = sorted[9]
    assert artifact_p99(np.array([3.0, 1.0, 2.0])) == 3.0


# ---- the Sia artifact's Pollux mechanism ------------------------------------------------------

def test_pollux_sia_keeps_majority_type_and_leaves_the_rest_idle():
    from heteroplan.policies.pollux import PolluxPolicy
    from heteroplan.policies.pollux_artifact import PolluxArtifactPolicy

    # Virtual 4-GPU nodes in order: a0 (type a, 4 GPUs), then b0 split in two (type b, 8 GPUs).
    cluster = Cluster((GPUType("a", 16, 4), GPUType("b", 16, 8)), (Node("a0", "a", 4), Node("b0", "b", 8)))
    policy = PolluxArtifactPolicy(vnode_order="node")
    views = [JobState("x", "cifar10", 0.0), JobState("y", "cifar10", 0.0)]
    out = policy.place(cluster, views, {"x": 2, "y": 10})
    # y (largest first) takes whole virtual nodes a0, b0/1, then 2 GPUs best-fit on b0/2: it spans
    # a (4) and b (6), keeps the 6 GPUs of type b; a0's 4 GPUs stay idle. x gets b0's last 2.
    assert out["y"] == Allocation("b", 6, (("b0", 6),))
    assert out["x"] == Allocation("b", 2, (("b0", 2),))
    # Next round with the GPUs they run on nothing moves (no restart).
    again = policy.place(cluster, views, {"x": 2, "y": 6})
    assert again == out
    with pytest.raises(TypeError, match="mechanism"):
        PolluxPolicy(mechanism="genetic")  # the class is the mechanism (the registry's option picks it)


def test_fixed_restart_delay_as_policy_option_or_run_option():
    from heteroplan.workload.sia import JobSpec

    cluster = Cluster((GPUType("dgx-ext", 80, 8),), (Node("d0", "dgx-ext", 8),))
    job = [JobSpec("c", 0.0, "cifar10", 1, 128)]
    run = dict(round_length=60.0, max_rounds=1, progress=False)
    fixed = simulate(job, cluster, make_policy("gavel", restart_delay_s=0.0), **run)
    measured = simulate(job, cluster, make_policy("gavel"), **run)
    whole_run = simulate(job, cluster, make_policy("gavel", restart_delay_s=40.0), **run,
                         fidelity=SimFidelity(restart_delay_s=0.0))
    # Same rate; the measured restore delay (cifar10: 50 s of a 60 s round) is gone with 0 s.
    assert fixed.jobs[0].fraction_done / measured.jobs[0].fraction_done == pytest.approx(60.0 / 10.0, rel=0.05)
    assert whole_run.jobs[0].fraction_done == fixed.jobs[0].fraction_done  # the run's option wins
    with pytest.raises(InputError, match="restart_delay_s"):
        SimFidelity(restart_delay_s=-1.0)
    with pytest.raises(InputError, match="restart_delay_s"):
        make_policy("gavel", restart_delay_s=-1.0)


def test_gavel_sia_never_places_a_job_where_its_rate_is_zero():
    # Gavel's throughput table has job types that cannot run on K80; the idle fix-up must skip them
    # (the loop raises AllocationError on a zero-rate type).
    from heteroplan.cluster import preset
    from heteroplan.workload.gavel import generate_workload, load_throughputs
    from heteroplan.workload.rigid import rigid_jobs_from_gavel

    jobs = rigid_jobs_from_gavel(generate_workload(60, 30.0, seed=3, duration_scale=0.05), load_throughputs())
    assert any(0.0 in j.throughputs.values() for j in jobs)
    res = simulate(jobs, preset("gavel-108"), make_policy("gavel-sia"), progress=False)
    assert res.stop_reason == "finished" and not res.unfinished


def test_rate_changes_at_each_epoch_boundary_inside_a_round():
    # The artifact's Job.step walks a round epoch by epoch, each at its own statistical
    # efficiency. Oracle: the sum over epochs of the epoch's work at that epoch's rate (plus the
    # restore delay of the first start), with no rounds at all. Once-per-round rates (the old
    # loop, epoch_rates=False) run a 360 s round at epoch 0's efficiency: cifar10 at batch
    # 4096 takes over twice as long.
    from heteroplan.sim.job_models import build_jobs
    from heteroplan.workload.sia import JobSpec

    cluster = Cluster((GPUType("dgx-ext", 80, 8),), tuple(Node(f"d{i}", "dgx-ext", 8) for i in range(2)))
    spec = JobSpec("c", 0.0, "cifar10", 16, 4096)
    job = build_jobs([spec], cluster, False, None, SimFidelity())[0]
    ends = list(job.grad.epoch_ends[job.grad.epoch_ends < 1.0] * job.total_work) + [job.total_work]
    expected, start = job.restart_delay, 0.0
    for end in ends:
        job.done = start * (1 + 1e-12)
        expected += (end - start) / job.rate_on("dgx-ext", 2, 16)[0]
        start = end
    policy = make_policy("gavel-sia")
    walked = simulate([spec], cluster, policy, progress=False, fidelity=SimFidelity())
    assert walked.jobs[0].jct_s == pytest.approx(expected, rel=1e-6)
    assert walked.jobs[0].jct_s / 3600 == pytest.approx(0.063, rel=0.05)  # the artifact's Job.step: 0.063 h
    once = simulate([spec], cluster, make_policy("gavel-sia"), progress=False,
                    fidelity=SimFidelity(epoch_rates=False))
    assert once.jobs[0].jct_s > 2 * expected
    with pytest.raises(InputError, match="epoch_rates"):
        SimFidelity(epoch_rates=1)
