"""The load breakdown: queued / restoring / running seconds and allocation changes per job,
checked against a schedule worked out by hand."""

from __future__ import annotations

import pytest

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import InputError
from heteroplan.policies.base import Allocation
from heteroplan.sim import simulate
from heteroplan.sim.breakdown import load_breakdown
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.workload.rigid import RigidJob


class _Script:
    """Gives the one GPU to the job the script names for each round (if it is active)."""

    name, round_length, elastic, forking = "script", 10.0, False, False

    def __init__(self, turns: list[str]) -> None:
        self.turns = turns

    def allocate(self, cluster, jobs, now):
        want = self.turns[int(now // 10)]
        return {j.job_id: Allocation("g", 1, (("n0", 1),)) for j in jobs if j.job_id == want}


def _run():
    cluster = Cluster((GPUType("g", 16, 1),), (Node("n0", "g", 1),))
    jobs = [RigidJob("A", 1, 25.0, 0.0, {"g": 1.0}), RigidJob("B", 1, 10.0, 3.0, {"g": 1.0})]
    fidelity = SimFidelity.ideal()
    fidelity = SimFidelity(slowdown=fidelity.slowdown, batch_size=fidelity.batch_size, grad_stats=fidelity.grad_stats,
                           free_moves=False, epoch_rates=False, restart_delay_s=5.0)
    return simulate(jobs, cluster, _Script(["A", "B", "A", "B", "A", "A", "A"]), fidelity=fidelity,
                    progress=False, record=True)


def test_breakdown_matches_the_schedule_worked_by_hand():
    # 10 s rounds, 5 s restore on every (re)start, 1 step/s.
    # t=0 A starts (5 restore + 5 run); t=10 B starts (5 + 5), A preempted; t=20 A resumes (5 + 5);
    # t=30 B resumes, runs its last 5 steps, finishes at 40; t=40 A resumes (5 + 5); t=50 A runs 10,
    # finishes at 60.
    result = _run()
    assert result.completion == {"A": 60.0, "B": 40.0}
    b = {j.name: j for j in load_breakdown(result).jobs}
    a_, b_ = b["A"], b["B"]
    assert (a_.queued, a_.restoring, a_.running) == pytest.approx((20.0, 15.0, 25.0))
    assert (a_.restarts, a_.preemptions, a_.allocation_changes) == (2, 2, 5)
    assert (b_.queued, b_.restoring, b_.running) == pytest.approx((17.0, 10.0, 10.0))
    assert (b_.restarts, b_.preemptions, b_.allocation_changes) == (1, 1, 3)
    for j in (a_, b_):
        assert j.queued + j.restoring + j.running == pytest.approx(j.jct)
        assert j.mean_gpus == 1.0


def test_per_round_state_and_summaries():
    bd = load_breakdown(_run())
    assert bd.times == (0.0, 10.0, 20.0, 30.0, 40.0, 50.0)
    assert bd.gpus_held == (1, 1, 1, 1, 1, 1)
    assert bd.jobs_waiting == (0, 1, 1, 1, 0, 0)
    everyone = bd.summaries()[0]
    assert everyone.label == "all" and everyone.jobs == 2
    assert everyone.queued_h == pytest.approx((20.0 + 17.0) / 2 / 3600)
    assert everyone.jct_h == pytest.approx((60.0 + 37.0) / 2 / 3600)
    assert "p99 tail" in bd.table()


def test_needs_a_recorded_schedule():
    result = _run()
    from dataclasses import replace

    with pytest.raises(InputError, match="record=True"):
        load_breakdown(replace(result, decisions=()))
