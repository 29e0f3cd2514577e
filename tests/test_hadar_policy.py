"""Hadar / HadarE online policy in the round loop: invariants and exact small cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heteroplan.cluster import Cluster, GPUType, Node, preset
from heteroplan.errors import InputError
from heteroplan.policies.base import Allocation, Policy, counts_by_type
from heteroplan.policies.hadar import HadarPolicy, Planning, price
from heteroplan.sim.loop import simulate
from heteroplan.workload.gavel import generate_workload, load_throughputs
from heteroplan.workload.rigid import RigidJob, rigid_jobs_from_gavel


def two_type_cluster(per_node: int = 1) -> Cluster:
    types = (GPUType("slow", 16, per_node), GPUType("fast", 16, per_node))
    return Cluster(types, (Node("s0", "slow", per_node), Node("f0", "fast", per_node)))


@given(
    st.lists(st.integers(0, 8), min_size=2, max_size=6),
    st.floats(0.01, 0.9),
    st.floats(1.0, 50.0),
)
def test_price_non_decreasing_in_utilization(committed, lower, upper):
    g = np.sort(np.array(committed))
    p = price(g, 8.0, lower, np.float64(max(upper, lower)))
    assert np.all(np.diff(p) >= -1e-12)
    assert p[0] >= lower - 1e-12 and price(8, 8.0, lower, upper) == pytest.approx(upper)


def test_is_a_policy():
    assert isinstance(HadarPolicy(), Policy)


def test_hadare_copies_add_progress_exactly():
    # One 1-task job, 1 slow GPU (1 step/s) + 1 fast GPU (3 steps/s), 3000 steps.
    cluster = two_type_cluster()
    job = RigidJob("a", 1, 3000.0, 0.0, {"slow": 1.0, "fast": 3.0})
    hadar = simulate([job], cluster, HadarPolicy(slot=100.0), round_length=100.0)
    hadare = simulate([job], cluster, HadarPolicy(slot=100.0, forking=True), round_length=100.0)
    assert hadar.completion["a"] == pytest.approx(1000.0)  # fast type alone
    assert hadare.completion["a"] == pytest.approx(750.0)  # fast + slow copy: 4 steps/s


def test_task_level_heterogeneous_allocation_spans_types():
    cluster = two_type_cluster()
    job = RigidJob("a", 2, 600.0, 0.0, {"slow": 1.0, "fast": 3.0})
    res = simulate([job], cluster, HadarPolicy(slot=100.0, lower=0.01), round_length=100.0, record=True)
    alloc = res.schedule[0][1]["a"]
    assert alloc.gpu_type == "slow+fast"
    assert counts_by_type(alloc, cluster) == {"slow": 1, "fast": 1}
    assert res.completion["a"] == pytest.approx(600.0)  # paced by the slow task: 1 step/s


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 1000), st.booleans())
def test_invariants_on_gavel_workloads(seed, forking):
    cluster = preset("gavel-108")
    tp = load_throughputs()
    jobs = rigid_jobs_from_gavel(generate_workload(25, 20.0, seed=seed, duration_scale=0.05), tp)
    policy = HadarPolicy(forking=forking)
    res = simulate(jobs, cluster, policy, record=True)  # the simulator raises on over-capacity
    arrival = {j.job_id: j.arrival_time for j in jobs}
    caps = {n.name: n.num_gpus for n in cluster.nodes}
    for now, allocs in res.schedule:
        used: dict[str, int] = {}
        for jid, a in allocs.items():
            assert now >= arrival[jid]  # never before arrival
            for n, c in a.placement:
                used[n] = used.get(n, 0) + c
        assert all(used[n] <= caps[n] for n in used)
    # admitted jobs complete, no later than the end of their committed schedule
    assert not res.unfinished
    for jid, adm in policy.admissions.items():
        assert res.completion[jid] <= (adm.end + 1) * policy.slot + 1e-6


def test_pure_online_drops_rejected_jobs_and_admitted_ones_finish():
    cluster = two_type_cluster()
    jobs = [RigidJob(f"j{i}", 1, 300.0 * (i + 1), 0.0, {"slow": 1.0, "fast": 3.0}) for i in range(4)]
    # Schedules must end by slot 3: j0 takes the fast GPU in slot 0, j1 in slots 1-2 (its slow
    # pace needs 6 slots); j2 and j3 fit nowhere before the horizon and are dropped.
    policy = HadarPolicy(slot=100.0, planning=Planning.COMMITTED, retry=False, lower=0.9, upper=50.0, max_slot=3)
    res = simulate(jobs, cluster, policy, round_length=100.0, max_rounds=50)
    assert set(res.completion) == set(policy.admissions) == {"j0", "j1"}
    assert policy.admissions["j0"].pace == policy.admissions["j1"].pace == "fast"
    assert set(res.unfinished) == policy.rejected == {"j2", "j3"}


def test_bad_input_is_rejected_cleanly():
    cluster = two_type_cluster()
    big = RigidJob("big", 3, 100.0, 0.0, {"slow": 1.0, "fast": 1.0})
    ok = RigidJob("ok", 1, 100.0, 0.0, {"slow": 1.0, "fast": 1.0})
    res = simulate([big, ok], cluster, HadarPolicy(slot=100.0), round_length=100.0)
    assert "big" in res.rejected and "ok" in res.completion
    with pytest.raises(InputError, match="big"):
        simulate([big], cluster, HadarPolicy(slot=100.0), round_length=100.0, on_infeasible="raise")
    missing = RigidJob("m", 1, 100.0, 0.0, {"slow": 1.0})
    with pytest.raises(InputError, match="fast"):
        simulate([missing], cluster, HadarPolicy(slot=100.0), round_length=100.0)
    with pytest.raises(InputError, match="no GPU type"):
        RigidJob("z", 1, 100.0, 0.0, {"slow": 0.0, "fast": 0.0})
    with pytest.raises(InputError, match="lower"):
        HadarPolicy(lower=0.0)
    with pytest.raises(InputError, match="planning"):
        HadarPolicy(planning="sometimes")
    with pytest.raises(InputError, match="order"):
        HadarPolicy(order="random")


def test_replan_order_decides_who_gets_the_fast_gpu():
    # One fast GPU, two 1-task jobs: 'short' (2 fast slots, 3x slower elsewhere) and 'long'
    # (10 fast slots, 10x slower elsewhere: the denser one). Shortest-first gives 'short' the fast
    # GPU first; densest-first gives it to 'long'.
    cluster = Cluster((GPUType("slow", 16, 1), GPUType("fast", 16, 1)), (Node("s0", "slow", 1), Node("f0", "fast", 1)))
    jobs = [RigidJob("short", 1, 200.0, 0.0, {"slow": 1 / 3, "fast": 1.0}),
            RigidJob("long", 1, 1000.0, 0.0, {"slow": 0.1, "fast": 1.0})]
    for order, first in (("shortest", "short"), ("densest", "long")):
        res = simulate(jobs, cluster, HadarPolicy(slot=100.0, order=order), round_length=100.0, record=True)
        assert res.schedule[0][1][first].gpu_type == "fast"


def test_counts_by_type_needs_placement_for_mixed_label():
    with pytest.raises(InputError):
        counts_by_type(Allocation("slow+fast", 2), two_type_cluster())


def _fewest_slots(work: dict[str, int], per_slot: dict[str, dict[str, int]]) -> int:
    """Brute force: fewest slots to finish every job, each slot giving each GPU to one job (or
    none); ``per_slot[job][gpu]`` = work per slot (exhaustive search over remaining-work states)."""
    names, gpus = sorted(work), sorted(next(iter(per_slot.values())))
    frontier, slots = {tuple(work[n] for n in names)}, 0
    while all(any(w > 0 for w in state) for state in frontier):
        nxt = set()
        for state in frontier:
            for pick in itertools.product([None, *names], repeat=len(gpus)):
                if any(p is not None and pick.count(p) > 1 for p in pick):
                    continue  # one GPU per job (1-task jobs)
                left = list(state)
                for g, p in zip(gpus, pick, strict=True):
                    if p is not None:
                        i = names.index(p)
                        left[i] = max(0, left[i] - per_slot[p][g])
                nxt.add(tuple(left))
        frontier, slots = nxt, slots + 1
    return slots


def test_critical_first_reaches_the_brute_force_makespan():
    # One fast and one slow GPU, 100 s slots, every job at t = 0. A: 1000 steps at 1/s fast,
    # 0.1/s slow (10 fast slots: it alone sets the makespan bound); B, C: 200 steps at 1/s
    # fast, 0.5/s slow. The GPUs need 10 slots for all the work (A on fast, B and C on slow),
    # so A is critical and must run on the fast GPU from slot 0. Shortest-first gives the fast
    # GPU to B and C first and ends later.
    cluster = two_type_cluster()
    jobs = [RigidJob("A", 1, 1000.0, 0.0, {"slow": 0.1, "fast": 1.0}),
            RigidJob("B", 1, 200.0, 0.0, {"slow": 0.5, "fast": 1.0}),
            RigidJob("C", 1, 200.0, 0.0, {"slow": 0.5, "fast": 1.0})]
    best = _fewest_slots({"A": 1000, "B": 200, "C": 200},
                         {"A": {"s": 10, "f": 100}, "B": {"s": 50, "f": 100}, "C": {"s": 50, "f": 100}})
    assert best == 10
    makespan = {}
    for order in ("critical", "shortest"):
        policy = HadarPolicy(slot=100.0, order=order)
        res = simulate(jobs, cluster, policy, round_length=100.0, record=True)
        makespan[order] = max(res.completion.values())
        if order == "critical":
            assert res.schedule[0][1]["A"].gpu_type == "fast"
    assert makespan["critical"] == pytest.approx(best * 100.0)
    assert makespan["shortest"] > best * 100.0 + 1.0


def test_replanned_job_keeping_its_types_keeps_its_nodes():
    # Two 1-GPU nodes of one type. 'a' runs on one of them; 'b' (shorter) arrives in slot 1 and
    # is re-planned first, onto the cheapest node. Which node of a type does not change a
    # pace, so 'a' keeps its node (no restore) and 'b' takes the other one.
    cluster = Cluster((GPUType("g", 16, 1),), (Node("n0", "g", 1), Node("n1", "g", 1)))
    jobs = [RigidJob("a", 1, 1000.0, 0.0, {"g": 1.0}), RigidJob("b", 1, 300.0, 100.0, {"g": 1.0})]
    res = simulate(jobs, cluster, HadarPolicy(slot=100.0, order="shortest"), round_length=100.0, record=True)
    placements = [allocs["a"].placement for _, allocs in res.schedule if "a" in allocs]
    assert len(set(placements)) == 1 and len(placements) == 10
    assert {j.job_id: j.restarts for j in res.jobs}["a"] == 0
    assert res.completion["a"] == pytest.approx(1000.0) and res.completion["b"] == pytest.approx(400.0)
