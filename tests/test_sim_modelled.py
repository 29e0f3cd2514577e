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
    with pytest.raises(InputError, match=r"job\[x\].*can never run here"):  # was max_rounds' error, after them all
        simulate_modelled(CLUSTER, make_policy("fifo"), [ModelledJob("x", 0.0, table, 10.0)], 10.0, max_rounds=5)
    with pytest.raises(InputError, match="total_work"):
        ModelledJob("x", 0.0, table, 0.0)


def test_rigid_gangs_and_forked_copies_run_on_their_requested_gpus() -> None:
    """FIFO runs a job of ``requested_gpus = 2`` on its gang: 2 x 10 work/s, done at 5 + 400 / 20 = 25 s
    (every job ran on one GPU before: 45 s). HadarE's copies of that job (two gangs of 2 on a 4-GPU
    type) add up: at most 5 + 400 / 40 = 15 s, and never slower than the one gang."""
    cluster = Cluster.from_counts((GPUType("fast", 16, 4),), {"fast": 4})
    table = ThroughputTable({"fast": 10.0})
    job = ModelledJob("a", 0.0, table, 400.0, max_gpus=4, restart_delay_s=5.0, requested_gpus=2)
    (fifo,) = simulate_modelled(cluster, make_policy("fifo"), [job], 30.0)
    assert fifo.finish_time == pytest.approx(25.0) and fifo.gpu_seconds == pytest.approx(50.0)
    (forked,) = simulate_modelled(cluster, make_policy("hadare"), [job], 30.0)
    assert 15.0 - 1e-9 <= forked.finish_time <= 25.0 + 1e-9
    with pytest.raises(InputError, match="requested_gpus"):
        ModelledJob("b", 0.0, table, 1.0, max_gpus=1, requested_gpus=2)
    with pytest.raises(InputError, match=r"job\[c\].*can never run here: needs 8 GPUs together"):
        simulate_modelled(cluster, make_policy("fifo"), [ModelledJob("c", 0.0, table, 1.0, 8, requested_gpus=8)], 30.0)
