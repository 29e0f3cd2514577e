"""Hostile inputs to the Python API (session 25): what users' own schedulers, notebooks and pipelines
pass to the scheduling session, the planner, the simulator and the goodput models. Each bad value
must raise :class:`InputError` naming the field and the value (a plain TypeError for an unknown
keyword), never an exception from inside numpy, HiGHS or a policy, and never be taken silently."""

from __future__ import annotations

import math

import numpy as np
import pytest

from heteroplan import SchedulingSession, make_policy, preset
from heteroplan.errors import InputError
from heteroplan.formulations.sia import ConfigSet
from heteroplan.policies.base import JobState
from heteroplan.policies.common import goodput_pairs

SIA64 = preset("sia-64")


class _Rate:
    """A user's model: ``goodput`` alone (no ``gpu_types``), answering ``f(gpu_type, num_gpus)``."""

    def __init__(self, f) -> None:
        self.f = f

    def goodput(self, gpu_type, num_nodes, num_gpus, progress=0.0):
        return self.f(gpu_type, num_gpus)


def _scaled(g):
    return 1.0 * np.asarray(g)


# -- the scheduling session's performance models ---------------------------------------------

@pytest.mark.parametrize("policy", ["fifo", "sia", "gavel", "hadar"])
@pytest.mark.parametrize(("answer", "shown"), [
    (lambda t, g: math.nan, "nan"),  # was parked as "zero goodput on every type"
    (lambda t, g: math.inf, "inf"),  # likewise
    (lambda t, g: -1.0, "-1.0"),  # likewise
    (lambda t, g: math.nan if t == "aws" else _scaled(g), "nan"),  # was run on the other types, or a numpy error
    (lambda t, g: -5.0 if t == "aws" else _scaled(g), "-5.0"),
])
def test_a_model_answering_nan_inf_or_negative_is_refused_at_submit(policy, answer, shown) -> None:
    session = SchedulingSession(SIA64, make_policy(policy))
    with pytest.raises(InputError, match=rf"job\[a\]\.perf_model.*returned {shown}: must be a finite number >= 0"):
        session.submit("a", arrival_time=0.0, application="x", perf_model=_Rate(answer), requested_gpus=4,
                       total_work=100.0)
    assert session.job_ids == ()  # refused before anything changed


def test_a_model_answering_zero_on_every_type_is_still_parked() -> None:
    session = SchedulingSession(SIA64, make_policy("fifo"))
    session.submit("a", arrival_time=0.0, application="x", perf_model=_Rate(lambda t, g: 0.0), total_work=1.0)
    assert session.round(0.0)["a"].parked is not None


@pytest.mark.parametrize("policy", ["sia", "pollux"])
def test_a_model_answering_the_wrong_shape_is_named(policy) -> None:
    """Sia and Pollux ask for every configuration at once (arrays); a two-number answer to three
    configurations was a PolicyError from numpy's reshape that blamed the policy."""
    session = SchedulingSession(SIA64, make_policy(policy))
    session.submit("a", arrival_time=0.0, application="x", total_work=100.0,
                   perf_model=_Rate(lambda t, g: np.array([1.0, 2.0]) if np.ndim(g) else 1.0))
    with pytest.raises(InputError, match=r"job\[a\]\.perf_model.*answered shape \(2,\)"):
        session.round(0.0)


@pytest.mark.parametrize("policy", ["sia", "pollux"])
def test_a_model_answering_one_number_for_every_configuration_runs(policy) -> None:
    """A constant answer (a numpy scalar) to array arguments counts for every configuration, as it
    does under FIFO, Gavel and Hadar; it was a PolicyError (numpy reshape) under Sia."""
    session = SchedulingSession(SIA64, make_policy(policy))
    session.submit("a", arrival_time=0.0, application="x", total_work=100.0, perf_model=_Rate(lambda t, g: np.float32(2)))
    decision = session.round(0.0)["a"]
    assert decision.allocation is not None and decision.allocation.num_gpus == 1


def test_pollux_runs_a_model_without_gpu_types() -> None:
    """The session takes any object with ``goodput``; Pollux read ``estimator.gpu_types`` and failed
    with an AttributeError (a PolicyError) for one without."""
    session = SchedulingSession(SIA64, make_policy("pollux"))
    session.submit("a", arrival_time=0.0, application="x", total_work=100.0, perf_model=_Rate(lambda t, g: _scaled(g)))
    decision = session.round(0.0)["a"]
    assert decision.allocation is not None and decision.allocation.gpu_type in SIA64.type_names


def test_goodputs_read_with_arrays_refuse_nan_inside_the_array() -> None:
    """NaN on some configurations only (past what admission asks) never enters a policy's model."""
    configs = ConfigSet.from_cluster(SIA64)
    model = _Rate(lambda t, g: np.where(np.asarray(g) >= 8, np.nan, _scaled(g)))
    job = JobState("j", "x", 0.0, requested_gpus=1, elastic=True, remaining_work=1.0, estimator=model, max_gpus=64)
    with pytest.raises(InputError, match=r"job\[j\]\.perf_model.*goodput\('\w+', \d+, (8|16|24|32|40|48|56|64)\) returned nan"):
        goodput_pairs([job], configs, scale_up=None)


# -- the scheduling session's counts and times -----------------------------------------------

def _session_with_a_running_job() -> SchedulingSession:
    from heteroplan.perf.goodput import ThroughputTable

    session = SchedulingSession(SIA64, make_policy("fifo"))
    session.submit("a", arrival_time=0.0, perf_model=ThroughputTable({"aws": 1.0}), requested_gpus=2, total_work=100.0)
    session.round(0.0)
    return session


def test_numpy_integers_are_counts(tmp_path) -> None:
    """Steps, batch sizes and GPU counts read from numpy arrays (``np.int64``) were refused with
    'must be an integer' (work_done took numpy numbers already); they are taken as ints and saved."""
    from heteroplan import StepTiming
    from heteroplan.perf.goodput import ThroughputTable

    session = SchedulingSession(SIA64, make_policy("sia"))
    session.submit("a", arrival_time=0.0, perf_model=ThroughputTable({"aws": 1.0}), requested_gpus=np.int64(2),
                   max_gpus=np.int32(4), batch_size=np.int64(8), total_work=100.0)
    session.submit("c", arrival_time=0.0, application="cifar10")
    session.round(0.0)
    session.report("a", work_done=np.float32(3), steps_done=np.int64(4), batch_size=np.int64(16))
    session.report("c", step_timing=StepTiming("aws", (np.int64(1),), 32, 0.5, 0.1))
    session.fail("a", 10.0, steps_redone=np.int64(1))
    session.save(tmp_path / "s.json")
    restored = SchedulingSession.load(tmp_path / "s.json", SIA64, make_policy("sia"))
    record = restored.record("a")
    assert (record.steps_done, record.requested_gpus, type(record.steps_done)) == (3, 2, int)  # 4 steps, 1 redone
    assert restored.record("c").observations == 1
    with pytest.raises(InputError, match=r"job\[a\]\.steps_done"):
        session.report("a", steps_done=np.bool_(True))  # a numpy bool is no count


@pytest.mark.parametrize("event", [
    lambda s: s.fail("a", 50.0),
    lambda s: s.release("a", 50.0),
    lambda s: s.give_up("a", 50.0, "broken"),
    lambda s: s.update_cluster(SIA64, 50.0),
])
def test_an_event_before_the_last_round_is_refused(event) -> None:
    """A failure, release, give-up or cluster change dated before the last round was taken: the job
    had been charged its GPUs up to the round already, and a failure 'at 50 s' of a job that the round
    at 100 s kept running was recorded without a word (``finish`` refused such a time already)."""
    session = _session_with_a_running_job()
    session.report("a", work_done=10.0)
    session.round(100.0)
    before = session.record("a")
    with pytest.raises(InputError, match=r"at=50\.0: is before the last round \(100\.0 s\)"):
        event(session)
    assert session.record("a") == before


# -- the planner's request -------------------------------------------------------------------

def test_a_bound_of_more_than_a_float_holds_is_named() -> None:
    """``Goal(budget=10**400)`` was an OverflowError from math.isfinite."""
    from heteroplan.planner.goal import Goal

    with pytest.raises(InputError, match=r"^budget=1000.*must be a finite number > 0"):
        Goal(budget=10**400)
    with pytest.raises(InputError, match=r"^min_throughput=1000.*must be a finite number > 0"):
        Goal("cost", min_throughput=10**400)


def test_numpy_numbers_are_bounds_counts_and_batches() -> None:
    """A budget, floor, global batch or pool count read from numpy (np.float32, np.int64) was refused
    as 'must be a finite number' / 'must be an integer'; taken as Python numbers, the same plan."""
    from heteroplan.planner.api import plan_job
    from heteroplan.planner.goal import Goal

    assert Goal(budget=np.float32(0.5)) == Goal(budget=0.5)
    goal = Goal("cost", min_throughput=np.int64(2))
    assert goal.min_throughput == 2.0 and type(goal.min_throughput) is float
    pool = ("A100-40", "us-central1-a")
    got = plan_job("OPT-350", np.int64(64), {pool: np.int64(8)})
    assert got.plan == plan_job("OPT-350", 64, {pool: 8}).plan
    assert type(got.plan.global_batch_size) is int


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"gpu_types": ("A100-40",)}, "gpu_types"),  # was AttributeError: 'str' object has no attribute 'name'
    ({"gpu_types": "A100-40"}, "gpu_types"),
    ({"network": "us-central1-a"}, "network"),  # was AttributeError: 'str' object has no attribute 'zones'
])
def test_a_catalog_or_network_of_the_wrong_type_is_named(kwargs, field) -> None:
    from heteroplan.planner.api import plan_job

    with pytest.raises(InputError, match=rf"^{field}="):
        plan_job("OPT-350", 64, {("A100-40", "us-central1-a"): 8}, **kwargs)


# -- the planner's simulator and Pareto sweep ------------------------------------------------

def _one_stage_plan(zone: str = "us-central1-a", **kw):
    from heteroplan import Plan, ReplicaGroup, Stage

    return Plan("OPT-350", kw.pop("gbs", 64), kw.pop("mbs", 8), (Stage(0, 26, (ReplicaGroup("A100-40", zone, 1, 1),)),))


@pytest.mark.parametrize("catalog", [[1, 2], {"A100-40": "A100"}])
def test_simulate_plan_names_a_catalog_that_is_no_catalog(catalog) -> None:
    """``gpu_types={"A100-40": "A100"}`` was an AttributeError deep in the compute terms."""
    from heteroplan.planner.model.simulator import simulate_plan

    with pytest.raises(InputError, match=r"^gpu_types=.*must map GPU type names to GPUType"):
        simulate_plan(_one_stage_plan(), gpu_types=catalog)


def test_a_plan_takes_numpy_batch_sizes_as_its_stages_take_numpy_layers() -> None:
    from heteroplan.planner.model.simulator import simulate_plan

    plan = _one_stage_plan(gbs=np.int64(64), mbs=np.int32(8))
    assert type(plan.global_batch_size) is int and plan == _one_stage_plan()
    assert simulate_plan(plan).iteration_time_s == simulate_plan(_one_stage_plan()).iteration_time_s


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"n": 10**6}, "n"),  # was a million plan searches: no answer for hours
    ({"budgets": [0.1] * 1001}, "budgets"),
    ({"budgets": [10**400]}, "budgets"),  # was a TypeError from np.isfinite
    ({"min_throughputs": [complex(1, 1)]}, "min_throughputs"),
])
def test_pareto_front_refuses_a_sweep_it_cannot_run(kwargs, field) -> None:
    from heteroplan.planner.pareto import pareto_front

    with pytest.raises(InputError, match=rf"^{field}="):
        pareto_front("OPT-350", 64, {("A100-40", "us-central1-a"): 8}, **kwargs)


# -- policy options --------------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "option", "value"), [
    ("sia", "restart_penalty", "no"),  # was taken (a truthy string: the penalty stayed on)
    ("sia", "restart_penalty", None),  # was taken (falsy: the penalty silently off)
    ("fifo", "backfill", "false"),  # a truthy string: backfilling on
    ("gavel", "two_stage", 0),
    ("hadar", "fill_idle", math.nan),
    ("pollux", "merged_profile", "yes"),
    ("pollux", "p", "x"),  # was taken; the first round failed inside numpy
    ("pollux", "scale_up", math.nan),
    ("sia", "round_length", 10**400),  # was an OverflowError
    ("sia", "time_limit", 10**400),
    ("hadar", "slot", 10**400),
    ("pollux", "restart_price_s", 10**400),
    ("gavel", "round_length", math.inf),  # a round that never ends
    ("sia", "name", math.nan),  # a label that is no string
    ("sia", "_goodputs", None),  # the policy's own state, not an option
    ("gavel", "last_result", None),
    ("hadar", "max_slot", "x"),
    ("hadar", "max_slot", 10**400),  # was an OverflowError in the first round's float comparison
    ("fifo", "restart_delay_s", math.inf),  # every restart would never end
    ("fifo", "restart_delay_s", 10**400),
])
def test_a_policy_option_of_the_wrong_kind_is_named(policy, option, value) -> None:
    with pytest.raises(InputError, match=rf"\b{option}="):
        make_policy(policy, **{option: value})


def test_policy_options_of_the_right_kind_still_build_the_same_policy() -> None:
    assert make_policy("sia", restart_penalty=False, p=-1, round_length=np.float64(30)).restart_penalty is False
    assert make_policy("hadar", max_slot=np.int64(40), fill_idle=False).max_slot == 40
    assert make_policy("fifo", restart_delay_s=np.float32(5)).restart_delay_s == 5.0


# -- fitting measured steps ------------------------------------------------------------------

def _steps():
    from heteroplan.perf.measurements import Measurements

    return Measurements([1, 1, 1], [1, 1, 1], [32, 64, 128], [0.3, 0.5, 0.9], [0.0, 0.0, 0.0])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"init": "x"}, "init"),  # was an AttributeError: 'str' object has no attribute 'as_array'
    ({"prior": 3}, "prior"),
    ({"fallback": {"alpha_c": 1.0}}, "fallback"),
    ({"sync_weight": math.inf}, "sync_weight"),  # was taken
    ({"prior_weight": math.inf}, "prior_weight"),  # was taken: the prior alone, the data ignored
])
def test_fit_names_an_option_of_the_wrong_kind(kwargs, field) -> None:
    from heteroplan.perf.fit import fit_throughput_params

    with pytest.raises(InputError, match=rf"^{field}="):
        fit_throughput_params(_steps(), **kwargs)


def test_measurements_of_strings_are_named() -> None:
    """``Measurements(["a"], ...)`` was a ValueError from numpy's float conversion."""
    from heteroplan.perf.measurements import Measurements

    with pytest.raises(InputError, match=r"^num_nodes=\['a'\]: must be numbers"):
        Measurements(["a"], [1], [32], [0.5], [0.0])


# -- clusters, generated workloads and the simulator -----------------------------------------

def test_cluster_names_a_one_element_key_and_an_unhashable_preset() -> None:
    from heteroplan import Cluster, GPUType, preset

    with pytest.raises(InputError, match=r"^counts=\('g',\): keys must be"):  # was a ValueError from unpacking
        Cluster.from_counts((GPUType("g", 16, 4),), {("g",): 8}, "c")
    with pytest.raises(InputError, match=r"^cluster=\['sia-64'\]: unknown preset"):  # was a TypeError: unhashable
        preset(["sia-64"])


def test_newtrace_names_weights_whose_sum_overflows() -> None:
    """Each weight finite, their sum not: a ValueError from numpy ('probabilities do not sum to 1')."""
    from heteroplan.workload.newtrace import NewTraceSpec

    with pytest.raises(InputError, match=r"^newtrace\.mix=.*add up to a finite number"):
        NewTraceSpec(jobs=5, hours=1.0, mix={"cifar10": 1e308, "bert": 1e308})


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"stall_limit": math.nan}, "stall_limit"),  # was taken: a stalled run never stopped on it
    ({"max_rounds": 2.5}, "max_rounds"),  # was taken
    ({"record": "yes"}, "record"),  # was taken by truthiness
    ({"progress": "no"}, "progress"),  # a truthy string: a progress bar
])
def test_simulate_names_an_option_of_the_wrong_kind(kwargs, field) -> None:
    from heteroplan.sim.loop import simulate
    from heteroplan.workload.newtrace import NewTraceSpec, generate_newtrace

    jobs = generate_newtrace(NewTraceSpec(jobs=2, hours=1.0), seed=0)
    with pytest.raises(InputError, match=rf"^{field}="):
        simulate(jobs, SIA64, make_policy("fifo"), **kwargs)


@pytest.mark.parametrize(("name", "option"), [("pollux", "auto_limit"), ("pollux", "lam"), ("pollux-sia", "restart_price_s"),
                                              ("sia", "threads"), ("hadar", "max_slot")])
def test_make_policy_takes_none_where_the_option_admits_it(name, option) -> None:
    """The kind check above compares an option with its default's type; ``None`` stays valid where
    the policy annotates the option ``X | None`` (a numeric default of an Optional option was refused)."""
    from heteroplan.policies.registry import make_policy

    # taken: None itself, or the value None stands for (Pollux's lam: the default)
    assert getattr(make_policy(name, **{option: None}), option) in (None, getattr(make_policy(name), option))


@pytest.mark.parametrize(("name", "option", "value"), [("sia", "p", 0), ("sia", "lam", 0.0), ("sia", "lam", -1.0),
                                                       ("pollux", "p", 0.0), ("pollux-sia", "lam", -250.0)])
def test_sia_utility_options_are_checked_when_the_policy_is_made(name, option, value) -> None:
    """Sia's exponent p = 0 (the utility divides by it) was refused only by the first round's model,
    and a penalty lam <= 0 per job without GPUs (leaving a job idle free or rewarded) was taken by Sia."""
    from heteroplan.policies.registry import make_policy

    with pytest.raises(InputError, match=f"^{option}="):
        make_policy(name, **{option: value})


def test_sia_model_refuses_a_penalty_that_rewards_leaving_jobs_idle() -> None:
    from heteroplan.cluster import preset
    from heteroplan.formulations.sia import ConfigSet, build_sia_model

    configs = ConfigSet.from_cluster(preset("sia-64"))
    with pytest.raises(InputError, match="^lam=0"):
        build_sia_model(np.ones((2, len(configs))), configs, [8] * len(configs.gpu_types), p=-0.5, lam=0.0)
