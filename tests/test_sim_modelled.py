"""simulate_modelled: the simulator's twin of a real run, checked against hand-computed schedules."""

from __future__ import annotations

import pytest

from heteroplan.cluster import Cluster, GPUType
from heteroplan.errors import InputError
from heteroplan.perf.goodput import ThroughputTable
from heteroplan.policies.registry import make_policy
from heteroplan.sim.modelled import ModelledJob, simulate_modelled

CLUSTER = Cluster.from_counts((GPUType("fast", 16, 1),), {"fast": 1})


def test_one_gpu_fifo_matches_the_hand_computed_schedule() -> None:
    """Rate 10 work/s on the one GPU, 5 s restore per start, 30 s rounds: job a (arrives 0, 400 work)
    runs 0..45 (5 s restore + 40 s); b (arrives 10, 100 work) starts at the first round after 45 (60):
    60 + 5 + 10 = 75."""
    table = ThroughputTable({"fast": 10.0})
    jobs = [ModelledJob("a", 0.0, table, 400.0, restart_delay_s=5.0),
            ModelledJob("b", 10.0, table, 100.0, restart_delay_s=5.0)]
    records = {r.job_id: r for r in simulate_modelled(CLUSTER, make_policy("fifo"), jobs, 30.0)}
    assert records["a"].finish_time == pytest.approx(45.0) and records["a"].start_time == 0.0
    assert records["b"].start_time == 60.0 and records["b"].finish_time == pytest.approx(75.0)
    assert records["a"].gpu_seconds == pytest.approx(45.0) and records["b"].gpu_seconds == pytest.approx(15.0)
    assert records["a"].restarts == records["b"].restarts == 0


def test_a_job_that_never_gets_gpus_is_reported() -> None:
    table = ThroughputTable({"other": 1.0})  # no rate on this cluster's type: never progresses
    with pytest.raises(InputError, match="max_rounds"):
        simulate_modelled(CLUSTER, make_policy("fifo"), [ModelledJob("x", 0.0, table, 10.0)], 10.0, max_rounds=5)
    with pytest.raises(InputError, match="total_work"):
        ModelledJob("x", 0.0, table, 0.0)
