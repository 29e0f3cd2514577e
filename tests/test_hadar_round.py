"""Hadar's pieces as functions (issue 48): the committed-GPU timeline, and keep-nodes, idle fill
and forking over a slot's residual.

Oracles: a brute-force per-slot sum for the timeline; for the slot functions, invariants a wrong
implementation breaks -- no node over capacity, every gang of its size on GPUs its job can use,
nothing taken from the allocations already made, and maximality: after idle fill no queued job
(whose restore is shorter than a slot) could still start on the idle GPUs, after forking no job
could still fork a copy onto an idle type.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_scheduling_policy_state import (
    _Rates,  # a job's whole-gang rate per GPU type, whatever the count
)

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.hadar_round import fill_idle, fork, keep_nodes, residual
from heteroplan.policies.hadar_schedule import Current
from heteroplan.policies.hadar_state import ClusterIndex, Timeline
from heteroplan.policies.packing import make_allocation

SLOT = 100.0
TYPES = ("slow", "mid", "fast")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(1, 8), st.lists(st.integers(0, 3), min_size=3,
                                                                           max_size=3)), max_size=8),
       st.integers(0, 6))
def test_the_timeline_holds_the_sum_of_its_pieces(pieces, released) -> None:
    timeline = Timeline(3, 0)
    for start, length, counts in pieces:
        timeline.add(start, start + length, np.array(counts))
    for start, length, counts in pieces[:released]:
        timeline.add(start, start + length, np.array(counts), sign=-1)
    timeline.compact()
    for t in range(0, 25):
        want = sum((np.array(c) for s, n, c in pieces[released:] if s <= t < s + n), np.zeros(3, dtype=int))
        i = int(np.searchsorted(timeline.starts, t, side="right")) - 1
        assert np.array_equal(timeline.usage[i], want), t
    assert all(not np.array_equal(a, b) for a, b in zip(timeline.usage, timeline.usage[1:], strict=False))


def _cluster(sizes: list[tuple[int, int]]) -> Cluster:
    """Nodes of (type index, GPUs)."""
    types = tuple(GPUType(t, 16, 8) for t in TYPES)
    return Cluster(types, tuple(Node(f"n{i}", TYPES[k], g) for i, (k, g) in enumerate(sizes)))


def _job(i: int, w: int, delay: float, alloc: Allocation | None = None) -> JobState:
    return JobState(f"j{i}", "x", float(i), requested_gpus=w, elastic=False, remaining_work=1e4,
                    restart_delay=delay, allocation=alloc)


def _rates(draw: st.DrawFn) -> np.ndarray:
    return np.array([draw(st.sampled_from([0.0, 1.0, 2.0, 3.5])) for _ in TYPES])


@st.composite
def slots(draw: st.DrawFn) -> tuple[ClusterIndex, dict[str, Allocation], list[JobState], list[np.ndarray]]:
    """A cluster, allocations already made on it (jobs a*), and jobs without GPUs with their rates."""
    sizes = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 8)), min_size=1, max_size=5))
    cluster = _cluster(sizes)
    index = ClusterIndex.of(cluster)
    free = {n.name: n.num_gpus for n in cluster.nodes}
    made: dict[str, Allocation] = {}
    for a in range(draw(st.integers(0, 3))):
        node = draw(st.sampled_from(sorted(free)))
        if free[node] > 0:
            c = draw(st.integers(1, free[node]))
            free[node] -= c
            made[f"a{a}"] = make_allocation(((node, c),), cluster)
    jobs, rates = [], []
    for i in range(draw(st.integers(1, 6))):
        jobs.append(_job(i, draw(st.integers(1, 6)), draw(st.sampled_from([0.0, 30.0, 150.0]))))
        rates.append(_rates(draw))
    return index, made, jobs, rates


def _used(index: ClusterIndex, allocations: dict[str, Allocation]) -> dict[str, int]:
    used = dict.fromkeys(index.nodes, 0)
    for a in allocations.values():
        for n, c in a.placement:
            used[n] += c
    return used


@settings(max_examples=80, deadline=None)
@given(slots())
def test_idle_fill_gives_whole_gangs_on_usable_gpus_until_none_fits(slot) -> None:
    index, made, jobs, rates = slot
    res = residual(index, made, jobs, rates)
    given_ = fill_idle(res, [None] * len(jobs), SLOT)
    assert set(given_) <= {j.job_id for j in jobs}
    everything = made | given_
    cap = dict(zip(index.nodes, index.capacity, strict=True))
    assert all(_used(index, everything)[n] <= cap[n] for n in index.nodes)
    rate_of = {j.job_id: r for j, r in zip(jobs, rates, strict=True)}
    for jid, a in given_.items():
        job = next(j for j in jobs if j.job_id == jid)
        assert a.num_gpus == job.requested_gpus
        assert all(rate_of[jid][index.types.index(t)] > 0 for t in a.gpu_types)
    idle = {n: cap[n] - u for n, u in _used(index, everything).items()}
    for job, r in zip(jobs, rates, strict=True):
        if job.job_id in given_ or job.restart_delay >= SLOT:
            continue
        usable = sum(idle[n] for k, names in enumerate(index.type_nodes) if r[k] > 0 for n in names)
        assert usable < job.requested_gpus, job  # it would have fitted: the fill stopped early


@settings(max_examples=80, deadline=None)
@given(slots())
def test_fork_adds_single_type_copies_until_no_job_fits_an_idle_type(slot) -> None:
    index, made, jobs, rates = slot
    planned = {j.job_id: make_allocation(a.placement, index.cluster) for j, a in zip(jobs, made.values(),
                                                                                     strict=False)}
    res = residual(index, planned, jobs, rates)
    out = fork(res, SLOT)
    cap = dict(zip(index.nodes, index.capacity, strict=True))
    assert all(_used(index, out)[n] <= cap[n] for n in index.nodes)
    for jid, a in planned.items():  # what was planned stays
        held = dict(out[jid].placement)
        assert all(held.get(n, 0) >= c for n, c in a.placement)
    for job, r in zip(jobs, rates, strict=True):
        after = index.type_counts(out[job.job_id].placement) if job.job_id in out else (0,) * len(TYPES)
        before = index.type_counts(planned[job.job_id].placement) if job.job_id in planned else (0,) * len(TYPES)
        for k, (a, b) in enumerate(zip(after, before, strict=True)):
            assert (a - b) % job.requested_gpus == 0  # whole copies of W_j GPUs of one type
            assert a == b or r[k] > 0  # copies only where the job runs
    idle = {n: cap[n] - u for n, u in _used(index, out).items()}
    for k, names in enumerate(index.type_nodes):
        free_k = sum(idle[n] for n in names)
        assert all(not (r[k] > 0 and j.requested_gpus <= free_k) for j, r in zip(jobs, rates, strict=True))


def test_keep_nodes_moves_a_replanned_gang_back_to_its_last_nodes() -> None:
    cluster = _cluster([(0, 2), (0, 2), (2, 2)])
    index = ClusterIndex.of(cluster)
    last = make_allocation((("n1", 2), ("n2", 2)), cluster)
    jobs = [_job(0, 4, 30.0, last), _job(1, 2, 30.0)]
    planned = {"j0": make_allocation((("n0", 2), ("n2", 2)), cluster),  # same types, other slow node
               "j1": make_allocation((("n1", 2),), cluster)}  # where j0 was: it must go elsewhere
    out = keep_nodes(index, jobs, planned)
    assert out["j0"] == last
    assert out["j1"].placement == (("n0", 2),)  # its planned nodes are j0's now: the slow type's rest
    assert all(index.type_counts(out[j].placement) == index.type_counts(planned[j].placement) for j in planned)


def test_idle_fill_keeps_a_queued_job_on_its_last_gpus() -> None:
    """Staying saves the restore: a job that ran on idle GPUs goes back to them, even when another
    type would run it as fast."""
    cluster = _cluster([(0, 2), (2, 2)])
    index = ClusterIndex.of(cluster)
    job = _job(0, 2, 50.0, make_allocation((("n0", 2),), cluster))
    rates = [np.array([1.0, 0.0, 1.0])]
    current = Current(0, index.node_counts((("n0", 2),)))
    out = fill_idle(residual(index, {}, [job], rates), [current], SLOT)
    assert out["j0"].placement == (("n0", 2),)
    moved = fill_idle(residual(index, {}, [job], rates), [None], SLOT)  # not running: slowest first
    assert moved["j0"].placement == (("n0", 2),)
    faster = [np.array([1.0, 0.0, 4.0])]  # 4x faster elsewhere beats the 50 s restore
    assert fill_idle(residual(index, {}, [job], faster), [current], SLOT)["j0"].placement == (("n1", 2),)


def test_commitments_follow_the_cluster_nodes_not_the_cluster_object() -> None:
    """Equal nodes in a new Cluster object: what was committed stays committed (a second job
    cannot be given the GPUs the first holds); other nodes: the commitments on the old ones are
    dropped and the jobs are planned afresh, on GPUs that exist."""
    from heteroplan.policies.base import check_allocations
    from heteroplan.policies.hadar import HadarPolicy

    model = _Rates({"slow": 1.0, "mid": 0.0, "fast": 4.0})
    first = JobState("a", "x", 0.0, requested_gpus=4, elastic=False, remaining_work=4e3, estimator=model)
    policy = HadarPolicy(slot=SLOT, planning="committed", fill_idle=False)
    out = policy.allocate(_cluster([(0, 4), (2, 4)]), [first], 0.0)
    assert out["a"].placement == (("n1", 4),)  # 10 slots on the fast node
    second = JobState("b", "x", 50.0, requested_gpus=4, elastic=False, remaining_work=4e3, estimator=model)
    running = JobState("a", "x", 0.0, requested_gpus=4, elastic=False, remaining_work=3.6e3, estimator=model,
                       allocation=out["a"])
    same = _cluster([(0, 4), (2, 4)])
    again = policy.allocate(same, [running, second], SLOT)
    check_allocations(same, again, ["a", "b"])  # raises on a node over capacity
    assert again["a"] == out["a"] and again.get("b") is None or again["b"].placement == (("n0", 4),)
    other = Cluster(same.gpu_types, (Node("m0", "slow", 4), Node("m1", "fast", 4)))
    moved = policy.allocate(other, [running, second], 2 * SLOT)
    check_allocations(other, moved, ["a", "b"])
    assert all(min(u) >= 0 for u in policy.state().segment_usage)
    assert policy.state().nodes == ("m0", "m1") and set(policy.state().plans) == {"a", "b"}
    assert moved["a"].placement == (("m1", 4),)  # planned afresh: the fast node again
