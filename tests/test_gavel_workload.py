"""Gavel throughput loader and workload generator, and the YARN-CS / Tiresias baselines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import InputError
from heteroplan.policies.base import JobState
from heteroplan.policies.tiresias import TiresiasPolicy
from heteroplan.policies.yarn import YarnCSPolicy
from heteroplan.sim.loop import simulate
from heteroplan.workload.gavel import (
    SCALE_PROBS,
    GavelThroughputs,
    generate_workload,
    load_throughputs,
)
from heteroplan.workload.rigid import RigidJob

DATA = Path(__file__).parent / "data" / "gavel"


def test_shipped_table_matches_gavel_file():
    shipped = load_throughputs()
    original = load_throughputs(DATA / "simulation_throughputs_excerpt.json")
    for gpu in original.gpu_types:
        for job in original.job_types:
            for s in original.scales(job):
                assert shipped.throughput(job, s, gpu) == pytest.approx(original.throughput(job, s, gpu), rel=1e-6)
    # values read straight from Gavel's simulation_throughputs.json
    assert shipped.throughput("ResNet-50 (batch size 64)", 1, "v100") == pytest.approx(4.394774823323071)
    assert shipped.throughput("ResNet-50 (batch size 128)", 2, "k80") == 0.0
    assert len(shipped.job_types) == 26 and shipped.gpu_types == ("k80", "p100", "v100")


def test_unknown_gpu_type_is_clear():
    with pytest.raises(InputError, match="a100"):
        load_throughputs().throughput("A3C", 1, "a100")
    with pytest.raises(InputError, match="job_type"):
        load_throughputs().throughput("nope", 1, "k80")
    with pytest.raises(InputError):
        GavelThroughputs({"k80": {"A3C": {1: -1.0}}})


def test_generator_distributions_and_determinism():
    jobs = generate_workload(4000, arrival_rate=10.0, seed=11)
    assert jobs == generate_workload(4000, arrival_rate=10.0, seed=11)
    scales = np.array([j.scale_factor for j in jobs])
    freq = [np.mean(scales == s) for s in (1, 2, 4, 8)]
    np.testing.assert_allclose(freq, SCALE_PROBS, atol=0.025)
    tp = load_throughputs()
    dur = np.array([j.total_steps / tp.throughput(j.job_type, j.scale_factor, "v100") for j in jobs])
    assert dur.min() >= 60 * 10**1.5 - 1e-6 and dur.max() <= 60 * 10**4 + 1e-6
    assert np.mean(dur > 60 * 10**3) == pytest.approx(0.2, abs=0.025)
    gaps = np.diff([j.arrival_time for j in jobs])
    assert gaps.mean() == pytest.approx(360.0, rel=0.06)  # 10 jobs/hour
    assert all(tp.throughput(j.job_type, j.scale_factor, "v100") > 0 for j in jobs)
    assert all(j.arrival_time == 0 for j in generate_workload(5, None, seed=1))


def cluster2() -> Cluster:
    return Cluster((GPUType("a", 16, 2), GPUType("b", 16, 2)), (Node("a0", "a", 2), Node("b0", "b", 2)))


def test_yarn_fifo_blocks_and_mixes_types():
    c = cluster2()
    jobs = [
        RigidJob("j1", 3, 300.0, 0.0, {"a": 1.0, "b": 2.0}),
        RigidJob("j2", 2, 100.0, 0.0, {"a": 1.0, "b": 1.0}),
        RigidJob("j3", 1, 100.0, 0.0, {"a": 1.0, "b": 1.0}),
    ]
    res = simulate(jobs, c, YarnCSPolicy(), round_length=100.0, record=True)
    first_round = res.schedule[0][1]
    assert first_round["j1"].gpu_type == "a+b"  # heterogeneity-unaware: spans types
    assert set(first_round) == {"j1"}  # strict FIFO: j2 does not fit and blocks j3
    assert res.completion["j1"] == pytest.approx(300.0)  # paced by the slow type: 1 step/s
    backfill = simulate(jobs, c, YarnCSPolicy(backfill=True), round_length=100.0, record=True)
    assert set(backfill.schedule[0][1]) == {"j1", "j3"}


def test_tiresias_queues_and_preemption():
    pol = TiresiasPolicy(thresholds=(100.0,))
    assert pol.queue(0.0) == 0 and pol.queue(100.0) == 1
    c = Cluster((GPUType("a", 16, 1),), (Node("a0", "a", 1),))
    old = JobState("old", "x", 0.0, requested_gpus=1, attained_service=500.0)
    new = JobState("new", "x", 10.0, requested_gpus=1, attained_service=0.0)
    out = pol.allocate(c, [old, new], 20.0)
    assert list(out) == ["new"]  # least attained service first, preempting "old"
