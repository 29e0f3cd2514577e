"""docs/contributing.md's recipe for a scheduling policy, followed once: the guide's policy,
registered by name, runs in the simulator and in a scheduling session with known outcomes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heteroplan import Cluster, SchedulingSession, make_policy
from heteroplan.cluster import GPUType, Node
from heteroplan.perf.goodput import ThroughputTable
from heteroplan.policies.registry import POLICIES, policy_names
from heteroplan.scheduling import ParkReason
from heteroplan.sim.compare import compare_policies
from heteroplan.workload.rigid import RigidJob


@pytest.fixture(scope="module")
def recipe(docs_block) -> Iterator[dict[str, object]]:
    """The namespace of docs/contributing.md's policy block (it registers the policy, which is
    taken out of the registry again afterwards, as tests/test_scheduling_session.py does)."""
    namespace = docs_block("contributing.md", "class LeastWorkFirst")
    try:
        yield namespace
    finally:
        POLICIES._added.pop("least-work-first")


def one_gpu() -> Cluster:
    return Cluster((GPUType("g", 16, 1),), (Node("n0", "g", 1),))


def test_the_registered_policy_runs_the_least_work_first_in_the_simulator(recipe) -> None:
    assert "least-work-first" in policy_names()
    # two jobs arrive together on one GPU at 1 step/s: FIFO runs them in list order, the recipe's
    # policy the 100-step job first; neither preempts (the long job never has less work left)
    jobs = [RigidJob("long", 1, 1000.0, 0.0, {"g": 1.0}), RigidJob("short", 1, 100.0, 0.0, {"g": 1.0})]
    fifo, least = compare_policies(jobs, one_gpu(), ["fifo", "least-work-first"], round_length=100.0)
    assert fifo.completion == pytest.approx({"long": 1000.0, "short": 1100.0})
    assert least.completion == pytest.approx({"short": 100.0, "long": 1100.0})
    assert least.policy == "least-work-first"


def test_the_session_parks_what_cannot_fit_before_the_policy_sees_it(recipe) -> None:
    seen: list[list[str]] = []
    policy = make_policy("least-work-first")
    allocate = policy.allocate
    policy.allocate = lambda cluster, jobs, now: (seen.append([j.job_id for j in jobs]), allocate(cluster, jobs, now))[1]
    session = SchedulingSession(one_gpu(), policy)
    model = ThroughputTable({"g": 1.0})
    session.submit("big", arrival_time=0.0, perf_model=model, requested_gpus=2, elastic=False, total_work=50.0)
    session.submit("long", arrival_time=0.0, perf_model=model, elastic=False, total_work=500.0)
    session.submit("short", arrival_time=0.0, perf_model=model, elastic=False, total_work=50.0)
    decisions = session.round(0.0)
    assert decisions.parked["big"].reason is ParkReason.TOO_LARGE
    assert seen == [["long", "short"]]  # "big" never reaches allocate
    assert decisions["short"].allocation is not None and decisions["long"].allocation is None
