"""The session's invariants, admission, the checked policy answer and the saved-session schema
(issue 47, items 2 and 5; issue 48, items 3 and 6): each of the audit's findings as an example.

Oracles: hand-computed admission (GPUs of the types a job can run on), the rules of a policy's
answer stated independently of the checker, and save -> load -> equal records and decisions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from heteroplan.cluster import Cluster, preset
from heteroplan.errors import InputError, PolicyError
from heteroplan.perf.goodput import ThroughputTable
from heteroplan.policies.base import (
    Allocation,
    AllocationError,
    JobState,
    PolicyBase,
    check_allocations,
)
from heteroplan.policies.registry import make_policy
from heteroplan.scheduling import (
    SESSION_FORMAT,
    DecisionKind,
    ParkReason,
    SchedulingSession,
    StepTiming,
)
from heteroplan.scheduling.admission import admission

pytestmark = pytest.mark.filterwarnings("ignore::heteroplan.scheduling.UnreportedJobWarning")

SMALL = Cluster.from_counts(preset("sia-64").gpu_types, {"rtx": 8, "aws": 4}, "rtx-aws")  # 1 node of each
RTX, AWS = (n.name for n in SMALL.nodes)


def _session(policy: str = "fifo", cluster: Cluster = SMALL) -> SchedulingSession:
    return SchedulingSession(cluster, make_policy(policy))


# -- the clock, finish and reports -----------------------------------------------------------

@pytest.mark.parametrize("now", [math.nan, math.inf, -math.inf, -1.0, "60", True, None, 10**400])
def test_round_takes_finite_seconds_only(now) -> None:
    session = _session()
    with pytest.raises(InputError, match="now"):
        session.round(now)
    assert session.rounds == 0
    session.round(60)  # an int is seconds too
    with pytest.raises(InputError, match="before the previous round"):
        session.round(59.0)


def test_finish_is_after_the_arrival_and_the_last_round() -> None:
    session = _session()
    session.submit("a", arrival_time=100.0, application="mine", perf_model=ThroughputTable({"rtx": 1.0}),
                   total_work=10.0)
    with pytest.raises(InputError, match="before the job's arrival"):
        session.finish("a", 50.0)  # a negative JCT
    session.round(200.0)
    with pytest.raises(InputError, match="before the last round"):
        session.finish("a", 150.0)  # more GPU-seconds than time
    for at in (math.nan, math.inf, "300"):
        with pytest.raises(InputError, match="finish.at"):
            session.finish("a", at)
    record = session.finish("a", 230.0)
    assert record.jct_s == 130.0 and record.gpu_seconds == 30.0  # 1 GPU from 200 s to 230 s


def test_progress_never_goes_back_and_a_finished_record_is_final() -> None:
    session = _session()
    session.submit("a", arrival_time=0.0, application="mine", perf_model=ThroughputTable({"rtx": 1.0}),
                   total_work=10.0)
    session.report("a", work_done=5.0, steps_done=7)
    with pytest.raises(InputError, match="work never goes back"):
        session.report("a", work_done=4.0)
    with pytest.raises(InputError, match="steps never go back"):
        session.report("a", steps_done=6)
    with pytest.raises(InputError, match="phi"):
        session.report("a", phi=math.inf)
    with pytest.raises(InputError, match="work_done"):  # nothing of a refused report is kept
        session.report("a", steps_done=9, work_done=math.nan)
    assert session.record("a").steps_done == 7
    session.finish("a", 10.0)
    session.report("a", work_done=10.0)  # restating the final record is harmless
    with pytest.raises(InputError, match="record is final"):
        session.report("a", steps_done=8)
    with pytest.raises(InputError, match="record is final"):
        session.report("a", phi=3.0)
    assert session.record("a").steps_done == 7 and session.record("a").fraction_done == 1.0


def test_submit_refuses_a_maximum_below_the_request_and_bad_numbers() -> None:
    session = _session()
    table = ThroughputTable({"rtx": 1.0})
    with pytest.raises(InputError, match="max_gpus"):
        session.submit("a", arrival_time=0.0, application="mine", perf_model=table, total_work=1.0,
                       requested_gpus=4, max_gpus=2)
    for field, value in (("arrival_time", math.nan), ("total_work", math.inf), ("restart_delay_s", -1.0),
                         ("requested_gpus", 2.5), ("requested_gpus", 10**12), ("batch_size", -1), ("elastic", "no")):
        args = {"arrival_time": 0.0, "total_work": 1.0, field: value}
        with pytest.raises(InputError, match=field):
            session.submit("a", application="mine", perf_model=table, **args)
    assert session.job_ids == ()


def test_step_timings_are_checked_before_the_model_learns_from_them() -> None:
    session = _session("sia")
    session.submit("a", arrival_time=0.0, application="cifar10", perf_model="bootstrap")
    for bad, field in ((StepTiming("k80", (1,), 32.0, 0.1, 0.0), "gpu_type"),
                       (StepTiming("rtx", (), 32.0, 0.1, 0.0), "placement"),
                       (StepTiming("rtx", (1,), math.nan, 0.1, 0.0), "local_bsz"),
                       (StepTiming("rtx", (1,), 32.0, -0.1, 0.0), "step_time"),
                       (StepTiming("rtx", (1,), 32.0, 0.1, 0.2), "sync_time")):
        with pytest.raises(InputError, match=field):
            session.report("a", step_timing=bad)
    assert session.record("a").observations == 0


# -- admission -------------------------------------------------------------------------------

def test_a_job_that_can_never_run_is_parked_with_its_reason_every_round() -> None:
    session = _session()
    session.submit("huge", arrival_time=0.0, application="mine", perf_model=ThroughputTable({"rtx": 1.0}),
                   total_work=1.0, requested_gpus=10**6, max_gpus=10**6)
    session.submit("nowhere", arrival_time=0.0, application="mine", perf_model=ThroughputTable({"k80": 1.0}),
                   total_work=1.0)
    session.submit("twelve", arrival_time=0.0, application="mine",
                   perf_model=ThroughputTable({"rtx": 1.0, "aws": 0.0}), total_work=1.0, requested_gpus=12,
                   max_gpus=12)  # 12 > the 8 GPUs of the one type it runs on
    session.submit("fits", arrival_time=0.0, application="mine", perf_model=ThroughputTable({"rtx": 1.0}),
                   total_work=1.0, requested_gpus=8, max_gpus=8)
    for now in (0.0, 60.0):
        decisions = session.round(now)
        assert decisions.parked["huge"].reason is ParkReason.TOO_LARGE
        assert decisions.parked["nowhere"].reason is ParkReason.NO_USABLE_TYPE
        assert (decisions.parked["twelve"].need_gpus, decisions.parked["twelve"].usable_gpus) == (12, 8)
        assert "needs 12 GPUs together; only 8 GPUs" in decisions.parked["twelve"].detail
        assert set(decisions.parked) == {"huge", "nowhere", "twelve"}
        assert all(decisions[j].kind is DecisionKind.WAIT and decisions[j].allocation is None
                   for j in decisions.parked)
        assert decisions["fits"].allocation.num_gpus == 8
    assert session.parked("fits") is None and session.parked("twelve").reason is ParkReason.TOO_LARGE


def test_a_parked_job_runs_once_the_cluster_grows() -> None:
    """Admission reads ``session.cluster`` each round (what ``update_cluster`` replaces)."""
    session = _session()
    session.submit("twelve", arrival_time=0.0, application="mine", perf_model=ThroughputTable({"rtx": 1.0}),
                   total_work=1.0, requested_gpus=12, max_gpus=12)
    assert session.round(0.0)["twelve"].parked is not None
    session.cluster = Cluster.from_counts(preset("sia-64").gpu_types, {"rtx": 16}, "two-rtx")
    decision = session.round(60.0)["twelve"]
    assert decision.parked is None and decision.kind is DecisionKind.START and decision.allocation.num_gpus == 12
    session.cluster = SMALL  # shrunk again: it loses its GPUs, with the reason
    decision = session.round(120.0)["twelve"]
    assert decision.kind is DecisionKind.PREEMPT and decision.parked.reason is ParkReason.TOO_LARGE


def test_admission_counts_the_gpus_of_the_types_a_job_runs_on() -> None:
    rates = {"rtx": 1.0, "aws": 2.0}
    assert admission(SMALL, 12, False, lambda t, n, g: rates[t]) is None  # 8 + 4 (a spanning policy could)
    parked = admission(SMALL, 12, False, lambda t, n, g: rates[t] * (t == "rtx"))
    assert (parked.reason, parked.need_gpus, parked.usable_gpus) == (ParkReason.TOO_LARGE, 12, 8)
    assert admission(SMALL, 10**6, True, lambda t, n, g: 1.0) is None  # elastic: one GPU is enough
    assert admission(SMALL, 1, True, lambda t, n, g: 0.0).reason is ParkReason.NO_USABLE_TYPE
    assert admission(SMALL, 13, False, None).reason is ParkReason.TOO_LARGE  # no model: every GPU


# -- the policy's answer ---------------------------------------------------------------------

def _view(job_id: str, requested: int = 4, elastic: bool = False, max_gpus: int = 4) -> JobState:
    return JobState(job_id, "mine", 0.0, requested_gpus=requested, elastic=elastic, max_gpus=max_gpus)


@pytest.mark.parametrize(("alloc", "field"), [
    (Allocation("rtx", 8, ((RTX, 8),)), "num_gpus"),  # a rigid job asking 4 gets 8
    (Allocation("rtx", 2.5, ((RTX, 2.5),)), "num_gpus"),  # a fraction of a GPU
    (Allocation("v100", 4, ((RTX, 4),)), "gpu_type"),  # a type the cluster lacks
    (Allocation("rtx", 4, ((RTX, 2), (RTX, 2))), "node"),  # one node twice
    (Allocation("rtx", 4, (("elsewhere", 4),)), "node"),  # a node the cluster lacks
    (Allocation("rtx", 4, ((AWS, 4),)), "node"),  # a node of another type
    (Allocation("rtx", 4, ()), "placement"),  # not placed
])
def test_a_wrong_answer_names_the_policy_job_field_and_value(alloc: Allocation, field: str) -> None:
    with pytest.raises(AllocationError, match=rf"policy\[mine\]\.allocation\[j\]\.{field}") as info:
        check_allocations(SMALL, {"j": alloc}, [_view("j")], policy="mine")
    assert isinstance(info.value, PolicyError) and isinstance(info.value, InputError)


def test_caps_of_elastic_rigid_and_forked_jobs() -> None:
    eight = Allocation("rtx", 8, ((RTX, 8),))
    check_allocations(SMALL, {"j": eight}, [_view("j", 1, True, 8)])
    with pytest.raises(AllocationError, match="max_gpus"):
        check_allocations(SMALL, {"j": eight}, [_view("j", 1, True, 4)])
    check_allocations(SMALL, {"j": eight}, [_view("j")], forking=True)  # two gangs of 4
    with pytest.raises(AllocationError, match="gangs"):
        check_allocations(SMALL, {"j": eight}, [_view("j", 3, False, 3)], forking=True)
    with pytest.raises(AllocationError, match="over-committed"):
        check_allocations(SMALL, {"a": Allocation("rtx", 6, ((RTX, 6),)), "b": Allocation("rtx", 4, ((RTX, 4),))},
                          [_view("a", 6, True, 8), _view("b")])


class _TooMany(PolicyBase):
    def allocate(self, cluster, jobs, now):
        return {j.job_id: Allocation("rtx", 8, ((RTX, 8),)) for j in jobs}


def test_the_session_checks_every_answer_against_the_jobs_it_showed() -> None:
    session = SchedulingSession(SMALL, _TooMany())
    session.submit("a", arrival_time=0.0, application="mine", perf_model=ThroughputTable({"rtx": 1.0}),
                   total_work=1.0, requested_gpus=4, max_gpus=4, elastic=False)
    with pytest.raises(AllocationError, match=r"policy\[_toomany\]\.allocation\[a\]\.num_gpus=8"):
        session.round(0.0)


# -- save and load ---------------------------------------------------------------------------

def test_bootstrap_models_round_trip_after_timings_on_every_type(tmp_path: Path) -> None:
    cluster = preset("sia-64")
    session = SchedulingSession(cluster, make_policy("sia"))
    session.submit("a", arrival_time=0.0, application="cifar10", perf_model="bootstrap")
    session.submit("b", arrival_time=0.0, application="bert", perf_model="oracle")
    session.submit("c", arrival_time=0.0, application="mine", perf_model=ThroughputTable({"rtx": 2.0}),
                   total_work=5.0)
    session.submit("d", arrival_time=0.0, application="mine", perf_model=None, total_work=5.0)
    for i, gpu_type in enumerate(("rtx", "dgx-ext", "aws")):
        session.report("a", step_timing=StepTiming(gpu_type, (2,), 32.0, 0.1 + 0.01 * i, 0.01))  # KeyError before
        session.report("b", phi=100.0 + i)
        path = session.save(tmp_path / f"s{i}.json")
        loaded = SchedulingSession.load(path, cluster, make_policy("sia"))
        assert loaded.records() == session.records()
        here, there = session.round(60.0 * i), loaded.round(60.0 * i)
        assert [(d.job_id, d.kind, d.allocation) for d in here] == [(d.job_id, d.kind, d.allocation) for d in there]
        session.report("a", work_done=10.0 * (i + 1))
    assert json.loads(path.read_text())["format"] == SESSION_FORMAT


def test_a_damaged_file_names_the_file_the_field_and_the_value(tmp_path: Path) -> None:
    session = _session()
    session.submit("a", arrival_time=5.0, application="mine", perf_model=ThroughputTable({"rtx": 1.0}),
                   total_work=10.0)
    session.round(10.0)
    path = session.save(tmp_path / "s.json")
    text = path.read_text()
    good = json.loads(text)

    def load(data) -> InputError:
        bad = tmp_path / "bad.json"
        bad.write_text(data if isinstance(data, str) else json.dumps(data))
        with pytest.raises(InputError) as info:
            SchedulingSession.load(bad, SMALL, make_policy("fifo"))
        assert str(bad) in str(info.value)
        return info.value

    load(text[: len(text) // 2])  # truncated
    load("[" * 100_000)  # nested past the recursion limit
    assert "format" in load({**good, "format": 3}).field and load({**good, "format": 3}).value == 3
    for key, value, field in (("work_done", -1.0, "work_done"), ("requested_gpus", "4", "requested_gpus"),
                              ("model_kind", "pickle", "model_kind"), ("finish_time", 1.0, "finish_time"),
                              ("allocation", {"gpu_type": "rtx", "num_gpus": 2, "placement": [[RTX, 2], [RTX, 0]]},
                               "placement")):
        job = {**good["jobs"][0], key: value}
        assert field in load({**good, "jobs": [job]}).field
    job = dict(good["jobs"][0])
    del job["gpu_seconds"]
    assert "gpu_seconds" in load({**good, "jobs": [job]}).field
    assert "jobs" in load({**good, "jobs": {"a": 1}}).field
    old = {k: v for k, v in good.items() if k != "policy_state"}
    assert SchedulingSession.load(_write(tmp_path / "f1.json", {**old, "format": 1}), SMALL,
                                  make_policy("fifo")).records() == session.records()  # format 1 still loads


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path
