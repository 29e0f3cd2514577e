"""Simulator invariants across random workloads and policies, and its failure behaviour."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heteroplan.cluster import Cluster, preset
from heteroplan.errors import InputError, PolicyError
from heteroplan.perf.applications import get_app
from heteroplan.policies.base import Allocation
from heteroplan.policies.gavel import GavelPolicy
from heteroplan.policies.placement import place
from heteroplan.policies.pollux import PolluxPolicy
from heteroplan.policies.sia import SiaPolicy
from heteroplan.policies.tiresias import TiresiasPolicy
from heteroplan.policies.yarn import YarnCSPolicy
from heteroplan.sim.loop import simulate
from heteroplan.workload.sia import JobSpec, read_sia_workload

SMALL = Cluster.from_counts(preset("sia-64").gpu_types, {"aws": 8, "rtx": 8, "dgx-ext": 8}, "small")
APPS = ["cifar10", "deepspeech2", "yolov3", "bert"]
POLICIES = {"sia": SiaPolicy, "pollux": PolluxPolicy, "fifo": YarnCSPolicy, "tiresias": TiresiasPolicy,
            "gavel": GavelPolicy}


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 6))
    jobs = []
    for i in range(n):
        app = draw(st.sampled_from(APPS))
        jobs.append(JobSpec(f"{app}-{i}", float(draw(st.integers(0, 600))), app,
                            draw(st.sampled_from([1, 2, 4, 8])), get_app(app).init_batch_size * 2))
    return jobs


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=workloads(), policy=st.sampled_from(sorted(POLICIES)))
def test_capacity_never_exceeded_and_time_runs_forward(jobs, policy) -> None:
    res = simulate(jobs, SMALL, POLICIES[policy](), max_time=3 * 3600, progress=False)
    assert res.error is None
    cap = SMALL.capacity()
    for _, in_use, _ in res.timeline:
        assert all(in_use[t] <= cap[t] for t in cap)
    for rec in res.jobs:
        if rec.start_time is not None:
            assert rec.start_time >= rec.arrival_time - res.round_length
        if rec.finish_time is not None:
            assert rec.fraction_done == pytest.approx(1.0)
            assert rec.finish_time > rec.arrival_time
        else:
            assert rec.fraction_done < 1.0


def test_every_gpu_placed_at_most_once() -> None:
    cluster = preset("sia-64")
    rng = np.random.default_rng(1)
    for _ in range(30):
        wanted = {}
        free = dict(cluster.capacity())
        for j in range(rng.integers(1, 20)):
            t = str(rng.choice(cluster.type_names))
            k = int(rng.choice([1, 2, 4, 8]))
            if free[t] >= k:
                wanted[f"j{j}"] = (t, k)
                free[t] -= k
        placed, failed = place(cluster, wanted)
        used: dict[str, int] = {}
        for jid, alloc in placed.items():
            assert (alloc.gpu_type, alloc.num_gpus) == wanted[jid]
            for node, c in alloc.placement:
                used[node] = used.get(node, 0) + c
        node_gpus = {n.name: n.num_gpus for n in cluster.nodes}
        assert all(used[n] <= node_gpus[n] for n in used)
        assert set(placed) | set(failed) == set(wanted)


def test_sia_beats_fifo_on_a_busy_trace() -> None:
    from heteroplan.workload.sia import bundled_workload

    jobs = bundled_workload("philly/workload-1")[:30]
    sia = simulate(jobs, preset("sia-64"), SiaPolicy(mode="lp-round"), progress=False).summary()
    fifo = simulate(jobs, preset("sia-64"), YarnCSPolicy(), progress=False).summary()
    assert sia["finished"] == fifo["finished"] == 30
    assert sia["avg_jct_h"] < fifo["avg_jct_h"]


class RigidStub:
    """What the simulator reads of a rigid policy besides ``name`` and ``allocate``: 60 s rounds."""

    round_length = 60.0
    elastic = False
    forking = False


class OverCommit(RigidStub):
    name = "broken"

    def allocate(self, cluster, jobs, now):
        node = cluster.nodes[0]
        return {j.job_id: Allocation(node.gpu_type, node.num_gpus, ((node.name, node.num_gpus),)) for j in jobs}


def test_bad_policy_is_a_policy_error_with_results_kept() -> None:
    jobs = [JobSpec("a", 0, "cifar10", 1, 256), JobSpec("b", 0, "cifar10", 1, 256), JobSpec("c", 7200, "cifar10", 1, 256)]
    with pytest.raises(PolicyError, match="over-committed") as info:
        simulate(jobs, SMALL, OverCommit(), progress=False)
    assert len(info.value.result.jobs) == 3  # every job still reported


class Crashing(OverCommit):
    name = "crashing"

    def allocate(self, cluster, jobs, now):
        return {}[jobs[0].job_id]  # a bug: KeyError


def test_a_bug_inside_a_policy_is_raised_as_a_policy_error_not_swallowed() -> None:
    with pytest.raises(PolicyError, match="crashing.*KeyError") as info:
        simulate([JobSpec("a", 0, "cifar10", 1, 256)], SMALL, Crashing(), progress=False)
    assert isinstance(info.value.__cause__, KeyError)


def test_job_larger_than_cluster_is_rejected_before_the_first_round() -> None:
    jobs = [JobSpec("huge", 0, "cifar10", 64, 4096), JobSpec("ok", 0, "cifar10", 2, 256)]
    res = simulate(jobs, SMALL, YarnCSPolicy(backfill=True), progress=False)
    assert "huge" in res.rejected and "64 GPUs" in res.rejected["huge"]
    assert [j.job_id for j in res.jobs] == ["ok"] and res.jobs[0].finish_time is not None
    with pytest.raises(InputError, match="huge"):
        simulate(jobs, SMALL, YarnCSPolicy(backfill=True), progress=False, on_infeasible="raise")


class Idle(OverCommit):
    name = "idle"

    def allocate(self, cluster, jobs, now):
        return {}


def test_a_run_that_cannot_progress_stops_and_says_stalled() -> None:
    res = simulate([JobSpec("a", 0, "cifar10", 1, 256)], SMALL, Idle(), progress=False, stall_limit=3600)
    assert res.stop_reason == "stalled" and "a" in res.error
    assert res.end_time <= 3600 + 3 * 60


@pytest.mark.parametrize(("text", "match", "known"), [
    ("name,time,application,num_replicas,batch_size\na,0,cifar10,2,256\nb,10,cifar10,-1,256\n",
     r"w.csv:row 2.num_replicas", None),
    ("name,time,application\na,0,cifar10\n", "missing columns", None),
    ("name,time,application,num_replicas,batch_size\na,0,tpu-app,2,256\n", "unknown application", {"cifar10"}),
])
def test_bad_workload_rows_name_the_row(tmp_path, text, match, known) -> None:
    path = tmp_path / "w.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=match):
        read_sia_workload(path, known_apps=known) if known else read_sia_workload(path)


def test_empty_round_and_empty_workload() -> None:
    assert SiaPolicy().allocate(SMALL, [], 0.0) == {}
    with pytest.raises(InputError, match="no jobs"):
        simulate([], SMALL, SiaPolicy())


class Mixed(RigidStub):
    """Gives every job one aws GPU and one dgx-ext GPU (a task-level heterogeneous allocation)."""

    name = "mixed"

    def allocate(self, cluster, jobs, now):
        aws = cluster.nodes_of_type("aws")[0].name
        dgx = cluster.nodes_of_type("dgx-ext")[0].name
        return {j.job_id: Allocation("aws+dgx-ext", 2, ((aws, 1), (dgx, 1))) for j in jobs[:1]}


def test_mixed_type_allocation_runs_at_the_slowest_types_pace() -> None:
    from heteroplan.sim.fidelity import SimFidelity
    from heteroplan.sim.job_models import build_jobs

    job = JobSpec("c", 0, "cifar10", 2, 256)
    state = build_jobs([job], SMALL, False, None, SimFidelity())[0]

    def rate(gpu_type: str, fraction: float) -> float:
        state.done = fraction * state.total_work
        return state.rate_on(gpu_type, 1, 2)[0]

    # Efficiency rises as training progresses, so the rate is bracketed by its ends.
    slow = [rate("aws", 0.0), rate("aws", 1.0)]
    fast = [rate("dgx-ext", 0.0), rate("dgx-ext", 1.0)]
    assert max(slow) < min(fast)
    res = simulate([job], SMALL, Mixed(), progress=False)
    assert res.error is None and res.stop_reason == "finished"
    app = get_app("cifar10")
    jct = res.jobs[0].jct_s
    assert app.restart_delay + app.total_work / max(slow) - 60 <= jct <= app.restart_delay + app.total_work / min(slow) + 60
    assert jct > app.restart_delay + app.total_work / min(fast) + 60  # not at the fast type's pace
    assert all(u["aws"] == 1 and u["dgx-ext"] == 1 for _, u, _ in res.timeline)


def test_sia_gives_rigid_jobs_exactly_their_gpus_and_scales_elastic_ones_gradually() -> None:
    from heteroplan.perf.sia_data import bootstrap_model
    from heteroplan.policies.base import JobState

    jobs = [
        JobState("rigid", "cifar10", 0.0, requested_gpus=4, elastic=False, estimator=bootstrap_model("cifar10")),
        JobState("new", "cifar10", 0.0, estimator=bootstrap_model("cifar10")),
        JobState("grown", "bert", 0.0, estimator=bootstrap_model("bert"), last_gpus=2),
    ]
    alloc = SiaPolicy().allocate(SMALL, jobs, now=3600.0)
    assert alloc["rigid"].num_gpus == 4
    assert alloc["new"].num_gpus == 1  # new jobs start at one GPU
    assert alloc["grown"].num_gpus <= 4  # at most double the last allocation


class Interrupted(OverCommit):
    name = "interrupted"

    def allocate(self, cluster, jobs, now):
        if now >= 600:
            raise KeyboardInterrupt
        return {}


def test_an_interrupted_run_keeps_its_results_on_the_exception() -> None:
    with pytest.raises(KeyboardInterrupt) as info:
        simulate([JobSpec("a", 0, "cifar10", 1, 256)], SMALL, Interrupted(), progress=False)
    res = info.value.result
    assert res.stop_reason == "interrupted" and res.rounds == 10 and [j.job_id for j in res.jobs] == ["a"]
