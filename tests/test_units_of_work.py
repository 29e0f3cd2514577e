"""No policy's decisions depend on the unit a job's work is counted in: samples, steps, epochs or
FLOPs. Scaling every job's goodput and total work by the same power of two (exact in floating
point, so every ratio is the same to the bit) must give the very same schedule. Before, under
Hadar 2**-40 changed HadarE's schedule, 2**100 was a ModelError from HiGHS (a makespan LP
coefficient of 4e30) and a goodput under 1e-300 a SolverError; under Gavel's LPs 2**-40 gave
another (suboptimal) answer and 2**40 a SolverError; HadarE's mixed copies never finished in
simulate_modelled."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from heteroplan import SchedulingSession, make_policy, preset
from heteroplan.cluster import Cluster, GPUType
from heteroplan.perf.goodput import ThroughputTable
from heteroplan.policies.registry import policy_names
from heteroplan.sim.modelled import ModelledJob, simulate_modelled

CLUSTER = Cluster.from_counts((GPUType("fast", 16, 4), GPUType("slow", 16, 4)), {"fast": 2, "slow": 2})


def _jobs(scale: float, seed: int) -> list[ModelledJob]:
    rng = np.random.default_rng(seed)
    rates, arrivals = rng.uniform(1, 10, (8, 2)), np.round(rng.uniform(0, 2000, 8))
    work, gpus = rng.uniform(1e3, 1e5, 8), rng.choice([1, 2, 4], 8)
    return [ModelledJob(f"j{i}", float(arrivals[i]),
                        ThroughputTable({"fast": rates[i, 0] * scale, "slow": rates[i, 1] * scale}),
                        float(work[i]) * scale, max_gpus=int(gpus[i]), restart_delay_s=10.0) for i in range(8)]


def _finish_times(policy: str, scale: float, seed: int) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or 0/0 on the way either
        records = simulate_modelled(CLUSTER, make_policy(policy), _jobs(scale, seed), 360.0)
    return {r.job_id: r.finish_time for r in records}


@pytest.mark.parametrize("policy", policy_names())
def test_the_schedule_is_the_same_in_any_unit_of_work(policy) -> None:
    base = _finish_times(policy, 1.0, seed=1)
    assert len(base) == 8
    for power in (-30, 100):
        assert _finish_times(policy, 2.0 ** power, seed=1) == base, f"work counted in units of 2**{-power}"


class _Rate:
    def __init__(self, per_gpu: float) -> None:
        self.per_gpu = per_gpu

    def goodput(self, gpu_type, num_nodes, num_gpus, progress=0.0):
        return self.per_gpu * np.asarray(num_gpus, dtype=float)


@pytest.mark.parametrize("per_gpu", [1e300, 1e30, 1e-30, 1e-300])
def test_extreme_goodputs_are_scheduled_beside_ordinary_ones(per_gpu) -> None:
    """A job whose work takes far less than a slot still takes one; one that would take longer
    than a float counts still gets its GPUs (it is alone on its gang's type)."""
    session = SchedulingSession(preset("sia-64"), make_policy("hadar"))
    session.submit("odd", arrival_time=0.0, application="x", perf_model=_Rate(per_gpu), requested_gpus=4,
                   total_work=100.0)
    session.submit("plain", arrival_time=0.0, application="x", perf_model=_Rate(1.0), requested_gpus=4,
                   total_work=100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decisions = session.round(0.0)
    assert {j: a.num_gpus for j, a in decisions.allocations.items()} == {"odd": 4, "plain": 4}
