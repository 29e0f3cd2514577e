"""Issue 32: the fast paths (sparse goodputs, model from pairs, indexed placement, goodput
cache, auto solve mode, thread choice) against the straightforward computations they replace."""

from __future__ import annotations

import numpy as np
import pytest

from heteroplan.cluster import Cluster, GPUType, Node, preset
from heteroplan.formulations.sia import (
    ConfigSet,
    GoodputPairs,
    build_sia_model,
)
from heteroplan.perf.applications import get_app
from heteroplan.perf.sia_data import bootstrap_model
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.common import (
    GoodputCache,
    goodput_matrix,
    goodput_pairs,
    max_gpus_this_round,
)
from heteroplan.policies.placement import place
from heteroplan.policies.sia_solve import solve_sia
from heteroplan.solvers import solve

APPS = ("cifar10", "bert", "deepspeech2", "imagenet", "yolov3")


def scan_place(cluster, wanted, previous):
    """The placement rule written as a scan of every node per job (the oracle)."""
    by_type: dict[str, list[str]] = {}
    for n in cluster.nodes:
        by_type.setdefault(n.gpu_type, []).append(n.name)
    capacity = {n.name: n.num_gpus for n in cluster.nodes}
    free = dict(capacity)
    def kept(job):  # the job's previous allocation where it asks for the same again
        old = previous.get(job)
        return old if old is not None and old.placement and (old.gpu_type, old.num_gpus) == wanted[job] else None

    placed = {job: kept(job) for job in wanted if kept(job) is not None}
    for alloc in placed.values():
        for node, c in alloc.placement:
            free[node] -= c
    todo = sorted(((job, *wanted[job]) for job in wanted if job not in placed), key=lambda t: (-t[2], t[0]))
    failed = []
    for job, gpu_type, count in todo:
        nodes = [n for n in by_type.get(gpu_type, ()) if free[n] > 0]
        per_node = cluster.gpu_type(gpu_type).gpus_per_node
        chosen = []
        if count >= per_node:
            whole = [n for n in nodes if free[n] == capacity[n] == per_node]
            need = count // per_node
            if len(whole) >= need and count % per_node == 0:
                chosen = [(n, per_node) for n in whole[:need]]
        if not chosen:
            fits = [n for n in nodes if free[n] >= count]
            if fits:
                chosen = [(min(fits, key=lambda n: (free[n], n)), count)]
        if not chosen and sum(free[n] for n in nodes) >= count:
            left = count
            for n in sorted(nodes, key=lambda n: (-free[n], n)):
                take = min(free[n], left)
                chosen.append((n, take))
                left -= take
                if left == 0:
                    break
        if chosen:
            free.update({n: free[n] - c for n, c in chosen})
            placed[job] = Allocation(gpu_type, count, tuple(chosen))
        else:
            failed.append(job)
    return placed, failed


def random_cluster(rng: np.random.Generator) -> Cluster:
    types = (GPUType("a", 1, 4), GPUType("b", 1, 8))
    nodes = []
    for t in types:
        for i in range(int(rng.integers(1, 14))):
            size = t.gpus_per_node if rng.random() < 0.8 else int(rng.integers(1, t.gpus_per_node + 1))
            nodes.append(Node(f"{t.name}{i}", t.name, size))
    order = rng.permutation(len(nodes))  # cluster order differs from name order
    return Cluster(types, tuple(nodes[i] for i in order))


@pytest.mark.parametrize("seed", range(40))
def test_indexed_placement_matches_the_scan(seed):
    rng = np.random.default_rng(seed)
    cluster = random_cluster(rng)
    # previous placements: a valid packing of some jobs
    first = {f"p{i}": (str(rng.choice(["a", "b"])), int(rng.choice([1, 2, 3, 4, 8, 12, 16]))) for i in range(12)}
    previous, _ = scan_place(cluster, first, {})
    wanted = {}
    for i in range(int(rng.integers(1, 30))):
        job = f"p{i}" if i < 12 and rng.random() < 0.5 else f"n{i}"
        if job in previous and rng.random() < 0.7:
            wanted[job] = (previous[job].gpu_type, previous[job].num_gpus)
        else:
            wanted[job] = (str(rng.choice(["a", "b"])), int(rng.choice([1, 2, 3, 4, 5, 8, 12, 16, 24])))
    assert place(cluster, wanted, previous) == scan_place(cluster, wanted, previous)


def jobs_for(n: int, rng: np.random.Generator, now: float = 10_000.0) -> list[JobState]:
    models = {a: bootstrap_model(a) for a in APPS}
    jobs = []
    for i in range(n):
        app = APPS[i % len(APPS)]
        rigid = i % 7 == 3
        jobs.append(JobState(job_id=f"j{i}", application=app, arrival_time=now - float(rng.uniform(0, 7200)),
                             max_gpus=get_app(app).max_batch_size, progress=float(rng.uniform(0, 0.9)),
                             num_restarts=int(rng.integers(0, 3)), restart_delay=get_app(app).restart_delay,
                             estimator=models[app], last_gpus=int(rng.choice([0, 1, 2, 4, 8])),
                             elastic=not rigid, requested_gpus=int(rng.choice([1, 2, 4, 8]))))
    return jobs


def dense_goodputs(jobs, configs, scale_up=2.0):
    """Every configuration evaluated, then masked (the former goodput matrix)."""
    G = np.zeros((len(jobs), len(configs)))
    for i, job in enumerate(jobs):
        row = np.asarray(job.estimator.goodput(configs.type_names, configs.num_nodes, configs.num_gpus,
                                               progress=job.progress), dtype=float)
        if job.elastic:
            row = np.where(configs.num_gpus <= max_gpus_this_round(job, scale_up), row, 0.0)
        else:
            row = np.where(configs.num_gpus == job.requested_gpus, row, 0.0)
        G[i] = row
    return G


def big_cluster() -> Cluster:
    base = preset("sia-64")
    return Cluster.from_counts(base.gpu_types, {t: 4 * c for t, c in base.capacity().items()})


def test_goodputs_only_where_choosable_equal_the_dense_matrix():
    cluster = big_cluster()
    configs = ConfigSet.from_cluster(cluster)
    jobs = jobs_for(60, np.random.default_rng(1))
    expected = dense_goodputs(jobs, configs)
    np.testing.assert_array_equal(goodput_matrix(jobs, configs), expected)
    pairs = goodput_pairs(jobs, configs, cache=GoodputCache())
    assert np.all(np.diff(pairs.job_of) >= 0)
    np.testing.assert_array_equal(pairs.dense(len(configs)), expected)


def test_goodput_cache_follows_the_model_version():
    cluster = big_cluster()
    configs = ConfigSet.from_cluster(cluster)
    job = jobs_for(1, np.random.default_rng(2))[0]
    cache = GoodputCache()
    before = goodput_pairs([job], configs, cache=cache).goodput
    assert goodput_pairs([job], configs, cache=cache).goodput is not None
    version = job.estimator.version
    # a measured step on 2 GPUs of one node (slower than the model thought) refits the model
    job.estimator.observe("aws", "2", 64, 5.0, 1.0)
    assert job.estimator.version != version
    after = goodput_pairs([job], configs, cache=cache).goodput
    np.testing.assert_array_equal(after, goodput_pairs([job], configs).goodput)
    assert not np.array_equal(before, after)


def test_model_from_pairs_equals_model_from_the_dense_matrix():
    cluster = big_cluster()
    configs = ConfigSet.from_cluster(cluster)
    rng = np.random.default_rng(3)
    jobs = jobs_for(50, rng)
    G = dense_goodputs(jobs, configs)
    current = np.where(rng.random(50) < 0.5, rng.integers(0, len(configs), 50), -1)
    restart = rng.uniform(0, 1, 50)
    pinned = rng.random(50) < 0.2
    capacity = np.array([float(c) for c in cluster.capacity().values()])
    G[np.arange(50), np.maximum(current, 0)] += (current >= 0) * 1.0  # current configs are possible
    a = build_sia_model(G, configs, capacity, current, restart, pinned)
    b = build_sia_model(GoodputPairs.from_dense(G), configs, capacity, current, restart, pinned)
    sa, sb = a.model.to_standard_form(), b.model.to_standard_form()
    np.testing.assert_array_equal(sa.c, sb.c)
    np.testing.assert_array_equal(sa.col_lb, sb.col_lb)
    assert (sa.A != sb.A).nnz == 0
    np.testing.assert_array_equal(a.job_of, b.job_of)


def test_auto_keeps_lp_round_only_within_the_requested_gap():
    cluster = preset("sia-64")
    configs = ConfigSet.from_cluster(cluster)
    capacity = np.array([float(c) for c in cluster.capacity().values()])
    for seed in range(6):
        jobs = jobs_for(30, np.random.default_rng(seed))
        problem = build_sia_model(goodput_pairs(jobs, configs), configs, capacity)
        exact = solve_sia(problem, "milp", mip_gap=0)
        lp = solve_sia(problem, "lp-round")
        # the LP bound is below the optimum, so LP-round's reported gap is at least its true gap
        assert lp.bound <= exact.objective + 1e-9
        assert lp.gap >= (lp.objective - exact.objective) / abs(lp.objective) - 1e-12
        # auto also tries the knapsack bound (LP duals as prices) before the MILP
        relaxed = solve(problem.model, relax=True, algorithm="simplex")
        tight = max(lp.bound, problem.knapsack_bound(-relaxed.duals["capacity"]))
        assert lp.bound - 1e-9 <= tight <= exact.objective + 1e-9
        tight_gap = (lp.objective - tight) / abs(lp.objective)
        for gap in (1e-6, 0.5, (lp.gap + tight_gap) / 2):
            auto = solve_sia(problem, "auto", mip_gap=gap)
            assert auto.mode == ("lp-round" if min(lp.gap, tight_gap) <= gap else "milp")
            assert auto.objective <= lp.objective + 1e-9
            # whichever bound certified it, the answer is within the requested gap of the optimum
            assert auto.objective - exact.objective <= gap * abs(auto.objective) + 1e-9
            if auto.mode == "lp-round":
                np.testing.assert_array_equal(auto.choice, lp.choice)


def test_cluster_node_types_and_counts_by_type():
    from heteroplan.policies.base import counts_by_type

    cluster = preset("sia-64")
    assert dict(cluster.node_types) == {n.name: n.gpu_type for n in cluster.nodes}
    a100 = [n.name for n in cluster.nodes if n.gpu_type == "dgx-ext"]
    alloc = Allocation("dgx-ext", 12, ((a100[0], 8), (a100[1], 4)))
    assert counts_by_type(alloc, cluster) == {"dgx-ext": 12}


def test_cached_rates_follow_the_estimator():
    """A job's rate after its estimator learns equals that of a job never asked before."""
    from heteroplan.sim.fidelity import SimFidelity
    from heteroplan.sim.job_models import build_jobs
    from heteroplan.workload.sia import JobSpec

    cluster = preset("sia-64")
    spec = JobSpec("a", 0.0, "cifar10", 2, 256)

    def fresh():
        return build_jobs([spec], cluster, True, "bootstrap", SimFidelity())[0]

    job = fresh()
    job.done = 0.3 * job.total_work
    first = job.rate_on("rtx", 1, 4)
    assert job.rate_on("rtx", 1, 4) == first
    job.estimator.observe("rtx", "4", 128, 9.0, 3.0)  # much slower than the bootstrap thought
    other = fresh()
    other.done = job.done
    other.estimator.observe("rtx", "4", 128, 9.0, 3.0)
    after = job.rate_on("rtx", 1, 4)
    assert after == other.rate_on("rtx", 1, 4)
    assert after[1] != first[1]  # the learnt step time changed the batch choice
