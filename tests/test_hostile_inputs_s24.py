"""Hostile inputs at the newest seams (session 24): enum fields given strings, numbers, None,
lists or another enum's member; independent-pipeline sets; policy options of the registry.
Each bad value must raise :class:`InputError` naming the field (and the choices where there are
some), never a TypeError/ValueError from inside, and never be taken silently."""

from __future__ import annotations

import math
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice
from heteroplan.planner import Plan, ReplicaGroup, SearchOptions, Stage
from heteroplan.planner.pipeline_set import PipelineSet
from heteroplan.planner.plan import OptimizerSharding, Precision, Recomputation
from heteroplan.policies.registry import make_policy

A, Z = "A100-40", "us-central1-a"


def _stage(**kw: object) -> Stage:
    return Stage(0, 24, (ReplicaGroup(A, Z, 1, 1),), **kw)  # type: ignore[arg-type]


# Every enum field of the planner's typed inputs, as (field named in the error, enum, build).
ENUM_FIELDS = [
    ("options.recompute", Recomputation, lambda v: SearchOptions(recompute=v).recompute),
    ("options.optimizer_sharding", OptimizerSharding, lambda v: SearchOptions(optimizer_sharding=v).optimizer_sharding),
    ("stage.recompute", Recomputation, lambda v: _stage(recompute=v).recompute),
    ("stage.optimizer_sharding", OptimizerSharding, lambda v: _stage(optimizer_sharding=v).optimizer_sharding),
    ("plan.precision", Precision, lambda v: Plan("OPT-350", 8, 2, (_stage(),), precision=v).precision),
]


@pytest.mark.parametrize(("field", "enum", "build"), ENUM_FIELDS, ids=[f for f, _, _ in ENUM_FIELDS])
@pytest.mark.parametrize("bad", ["nope", 3, 1.5, math.nan, None, ["none"], True, b"none"],
                         ids=["word", "int", "float", "nan", "None", "list", "bool", "bytes"])
def test_bad_enum_values_name_the_field_and_the_choices(field, enum, build, bad) -> None:
    with pytest.raises(InputError, match=rf"^{field}=.*choose one of \[") as info:
        build(bad)
    assert all(str(m.value) in str(info.value) for m in enum)


@pytest.mark.parametrize(("field", "enum", "build"), ENUM_FIELDS, ids=[f for f, _, _ in ENUM_FIELDS])
def test_every_value_and_member_of_the_enum_is_taken_as_the_member(field, enum, build) -> None:
    for member in enum:
        assert build(member) is member and build(str(member.value)) is member


@pytest.mark.parametrize(("field", "enum", "build"), ENUM_FIELDS, ids=[f for f, _, _ in ENUM_FIELDS])
def test_another_enums_member_is_refused_even_with_an_equal_value(field, enum, build) -> None:
    """``Recomputation.NONE == "none" == OptimizerSharding.NONE``: a member of the wrong enum is a
    mix-up of fields, refused by name rather than quietly turned into this enum's ``"none"``."""
    foreign = [m for other in (Recomputation, OptimizerSharding, Precision) if other is not enum for m in other]
    assert Recomputation.NONE == OptimizerSharding.NONE  # the mix-up this guards against: equal values
    for member in foreign:
        with pytest.raises(InputError, match=rf"^{field}=.*is a {type(member).__name__}, not a {enum.__name__}"):
            build(member)


def test_enum_choice_refuses_foreign_members_of_plain_enums_too() -> None:
    from heteroplan.policies.hadar import Planning
    from heteroplan.policies.hadar_order import Order

    assert enum_choice(Planning, "planning", "replan") is Planning.REPLAN
    with pytest.raises(InputError, match="planning=.*is a Order, not a Planning"):
        enum_choice(Planning, "planning", Order.SHORTEST_FIRST)


@pytest.mark.parametrize("bad", [None, 3, 1.5, True])
def test_a_pipeline_set_of_no_sequence_is_an_input_error(bad) -> None:
    with pytest.raises(InputError, match=r"^pipeline_set\.pipelines=.*sequence of at least one Plan"):
        PipelineSet(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [["sia"], {"sia": 1}, None, 3])
def test_make_policy_with_a_name_that_is_no_string_names_the_known_policies(name) -> None:
    with pytest.raises(InputError, match=r"^policy=.*unknown policy; known: \[.*'sia'"):
        make_policy(name)  # type: ignore[arg-type]


@pytest.mark.parametrize(("policy", "option", "bad", "field"), [
    ("gavel", "prices", "nope", "prices="),
    ("gavel", "prices", ["A100", 1.0], "prices="),
    ("gavel-cost", "prices", {"A100": -1.0}, r"prices\['A100'\]="),
    ("gavel-cost", "prices", {"A100": math.nan}, r"prices\['A100'\]="),
    ("gavel-sia", "slowdowns", "nope", "slowdowns="),
    ("gavel-sia", "slowdowns", {"resnet": 0}, r"slowdowns\['resnet'\]="),
    ("tiresias", "thresholds", "", r"policy\[tiresias\]\.options=.*must be a list of GPU-seconds, not str"),
    ("tiresias", "thresholds", [1.0, "x"], r"thresholds=\[1\.0, 'x'\]: \[1\]='x'"),
    ("tiresias", "thresholds", [1.0, math.inf], r"thresholds=\[1\.0, inf\]: \[1\]=inf"),
    ("hadar-committed", "lookahead", math.nan, "lookahead="),
    ("hadar-committed", "lookahead", math.inf, "lookahead="),
    ("hadar-committed", "lookahead", 2.5, "lookahead="),
    ("hadar-committed", "lookahead", "48", "lookahead="),
])
def test_policy_options_of_the_wrong_shape_name_the_option(policy, option, bad, field) -> None:
    """What a sweep file's ``options`` or ``make_policy(name, **options)`` hands a policy: before,
    a ValueError from ``dict()``/``float()`` (or an OverflowError from ``int(inf)``)."""
    with pytest.raises(InputError, match=rf"^{field}"):
        make_policy(policy, **{option: bad})


def test_policy_options_that_are_right_are_kept() -> None:
    assert make_policy("gavel-cost", prices={"A100": 2.5, "K80": 0}).prices == {"A100": 2.5, "K80": 0}
    assert make_policy("gavel-sia", slowdowns={"resnet": 2}).slowdowns == {"resnet": 2}
    assert list(make_policy("tiresias", thresholds=(10, 100.0)).thresholds) == [10.0, 100.0]
    assert make_policy("hadar-committed", lookahead=3.0).lookahead == 3


def _plan() -> Plan:
    return Plan("OPT-350", 32, 2, (Stage(0, 24, (ReplicaGroup(A, Z, 1, 2),)),))


@pytest.mark.parametrize("bad", [None, "plan.json", [1], {"stages": []}])
def test_simulating_what_is_no_plan_or_set_names_the_argument(bad) -> None:
    from heteroplan.planner import simulate_plan
    from heteroplan.planner.model.pipeline_set import simulate_pipeline_set

    with pytest.raises(InputError, match=r"^plan=.*must be a heteroplan Plan"):
        simulate_plan(bad)
    with pytest.raises(InputError, match=r"^pipeline_set=.*must be a PipelineSet"):
        simulate_pipeline_set(bad)


def test_a_plan_and_a_set_given_to_each_others_simulator_say_which_to_call() -> None:
    from heteroplan.planner import simulate_plan
    from heteroplan.planner.model.pipeline_set import simulate_pipeline_set

    plan = _plan()
    with pytest.raises(InputError, match=r"^pipeline_set='Plan'.*simulate_plan"):
        simulate_pipeline_set(plan)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^plan='PipelineSet'.*simulate_pipeline_set"):
        simulate_plan(PipelineSet((plan,)))  # type: ignore[arg-type]


@pytest.mark.parametrize(("keyword", "field"), [("profile", "profile"), ("network", "network")])
def test_a_profile_or_network_of_the_wrong_type_is_named(keyword, field) -> None:
    from heteroplan.planner import simulate_plan
    from heteroplan.planner.model.pipeline_set import simulate_pipeline_set

    with pytest.raises(InputError, match=rf"^{field}='str'"):
        simulate_plan(_plan(), **{keyword: "OPT-350"})
    with pytest.raises(InputError, match=rf"^{field}='dict'"):
        simulate_pipeline_set(PipelineSet((_plan(),)), **{keyword: {}})


@pytest.mark.parametrize("bad", [None, "OPT-350", SearchOptions()])
def test_the_set_oracle_wants_a_plan_request(bad) -> None:
    from heteroplan.planner.search.brute_force import brute_force_pipeline_set

    with pytest.raises(InputError, match=r"^request=.*must be a PlanRequest"):
        brute_force_pipeline_set(bad)


@pytest.mark.parametrize("bad", [None, 3, 2.5, "pipelines", ["pipelines"]])
def test_run_from_dict_refuses_what_is_no_json_object_by_name(bad) -> None:
    pytest.importorskip("torch", reason="heteroplan.runtime needs torch: pip install torch==2.13.0 (CPU wheel: "
                        "--index-url https://download.pytorch.org/whl/cpu)")
    from heteroplan.runtime.layout import run_from_dict

    with pytest.raises(InputError, match=r"^plan=.*must be a JSON object"):
        run_from_dict(bad)  # type: ignore[arg-type]
    assert run_from_dict(PipelineSet((_plan(),)).to_dict()) == PipelineSet((_plan(),))
    assert run_from_dict(_plan().to_dict()) == _plan()


@settings(max_examples=200, deadline=None)
@given(ready=st.floats(0, 1e8), L=st.floats(10, 1e24))
def test_a_jobs_first_round_is_a_boundary_at_or_after_it_is_ready(ready, L) -> None:
    """``simulate``'s round start for a job ready at ``ready`` s: a multiple of the round length,
    not before the job is due (1e-9 s), and the first such (the same as before wherever the old
    ``ceil(ready / L - 1e-9)`` was one: everywhere but a huge ``L``)."""
    from heteroplan.sim.loop import _round_start

    start = _round_start(ready, L)
    k = round(start / L)
    assert start == k * L and ready <= start + 1e-9 and (k == 0 or ready > (k - 1) * L + 1e-9)
    old = math.ceil(ready / L - 1e-9) * L
    if ready <= old + 1e-9:
        assert start == old


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM to stop a hang (POSIX)")
def test_a_round_far_longer_than_the_wait_for_the_first_job_still_runs_it() -> None:
    """``--round 1e9`` with a job arriving 0.5 s in: ``ceil(0.5 / 1e9 - 1e-9) = 0``, and the loop
    used to wait at t = 0 for the job forever; now it runs at the first boundary, t = 1e9 s, and
    finishes within that one round."""
    from heteroplan.cluster import preset
    from heteroplan.sim import simulate
    from heteroplan.workload.sia import JobSpec

    def hung(*_: object) -> None:
        raise TimeoutError("simulate hung waiting for a job that was never submitted")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    try:
        result = simulate([JobSpec("j", 0.5, "cifar10", 1, 128)], preset("sia-64"), make_policy("fifo"),
                          round_length=1e9, max_time=3e9, progress=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert result.stop_reason == "finished" and result.rounds == 1


def test_a_name_option_reaches_the_policy() -> None:
    """``make_policy("gavel", name=...)``: Gavel and YARN take a ``name``; it used to collide with
    ``make_policy``'s own first parameter (TypeError: got multiple values for argument 'name')."""
    assert make_policy("gavel", name="mine").name == "mine"
    assert make_policy("fifo", name="queue").name == "queue"


def _sweep_policy(name: str, **options: object):
    from heteroplan.sim.sweep.spec import PolicySpec

    return PolicySpec(name, "label", tuple(options.items())).build()


def test_a_sweep_picks_a_policys_mechanism_and_then_takes_that_class_options() -> None:
    """The registry's ``mechanism`` option (Pollux, Gavel) was refused by a sweep file as "no such
    option"; with it, the options are those of the class it picks (``vnode_order``: the artifact's)."""
    from heteroplan.policies.pollux_artifact import PolluxArtifactPolicy, VnodeOrder

    policy = _sweep_policy("pollux", mechanism="sia-artifact", vnode_order="node")
    assert type(policy) is PolluxArtifactPolicy and policy.vnode_order is VnodeOrder.NODE and policy.name == "label"
    with pytest.raises(InputError, match=r"^mechanism=3: choose one of \['pooled-type', 'sia-artifact'\]"):
        _sweep_policy("pollux", mechanism=3)
    with pytest.raises(InputError, match=r"^policy\.options\.vnode_order=.*no such option"):
        _sweep_policy("pollux", vnode_order="node")  # the pooled-type class has none


def test_a_sweep_neither_lists_nor_takes_a_policys_private_fields() -> None:
    with pytest.raises(InputError, match=r"^policy\.options\._goodputs=.*no such option; known: \[") as info:
        _sweep_policy("sia", _goodputs={})
    assert "'_" not in str(info.value).split("known:")[1]


@pytest.mark.parametrize(("text", "reason"), [
    ('{"a": NaN}', "invalid JSON: NaN is not a valid JSON number"),
    ('{"a": -Infinity}', "invalid JSON: -Infinity is not a valid JSON number"),
    ('{"a": 1, "a": 2}', "invalid JSON: json key 'a'=2: given twice"),
    ("[" * 100_000 + "]" * 100_000, "invalid JSON: nested too deeply"),
])
def test_a_bad_json_file_is_named_once_with_the_reason(tmp_path, text, reason) -> None:
    """``read_json``: NaN's error used to name the file twice (``plan JSON='p.json': invalid JSON:
    plan JSON='p.json': NaN ...``): InputError is a ValueError, and the ValueError branch wrapped it."""
    from heteroplan.inputs import read_json

    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_json(path, "plan JSON")
    assert str(info.value) == f"plan JSON={str(path)!r}: {reason}" + ("" if "twice" not in reason else
                                                                       " (the first value would be lost)")


BAD_CHOICES = ["nope", 3, None, ["time"], Precision.BF16]


@pytest.mark.parametrize("bad", BAD_CHOICES)
def test_goal_and_plan_diff_choices_name_the_field(bad) -> None:
    """``Goal(objective)`` and ``PlanDiff.largest(kind)`` called the enum directly (ValueError:
    'nope' is not a valid Objective)."""
    from heteroplan.planner import simulate_plan
    from heteroplan.planner.explain import TermKind, diff_plans
    from heteroplan.planner.goal import Goal, Objective

    with pytest.raises(InputError, match=r"^objective=.*choose one of \['throughput', 'cost'\]"):
        Goal(bad)
    assert Goal("cost").objective is Objective.COST
    plan = Plan("OPT-350", 32, 2, (Stage(0, 26, (ReplicaGroup(A, Z, 1, 2),)),))
    diff = diff_plans(simulate_plan(plan), simulate_plan(plan))
    with pytest.raises(InputError, match=r"^kind=.*choose one of \["):
        diff.largest(bad)
    assert diff.largest(TermKind.TIME.value) == diff.largest(TermKind.TIME)


@pytest.mark.parametrize("bad", ["fp8", 16, None])
def test_the_runtime_references_name_a_bad_precision(bad) -> None:
    pytest.importorskip("torch", reason="train_reference and profile_layers need torch: pip install torch==2.13.0 "
                        "(CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")
    from heteroplan.runtime import RunConfig, TinyGPTTask
    from heteroplan.runtime.profiler import profile_layers
    from heteroplan.runtime.reference import train_reference

    task = TinyGPTTask(n_layers=1, d_model=8, n_heads=2, seq_len=4)
    with pytest.raises(InputError, match=r"^precision=.*choose one of \['fp32', 'tf32', 'bf16'\]"):
        train_reference(task, 2, RunConfig(steps=1), precision=bad)
    with pytest.raises(InputError, match=r"^recompute=.*choose one of \['none', 'full'\]"):
        train_reference(task, 2, RunConfig(steps=1), recompute=bad)
    with pytest.raises(InputError, match=r"^precision=.*choose one of \['fp32', 'tf32', 'bf16'\]"):
        profile_layers(task.build_model(), lambda m: task.batch(0, 0, m)[0], (1,), warmup=0, repeats=1, precision=bad)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"microbatch_sizes": 3}, "options.microbatch_sizes"),
    ({"microbatch_sizes": "12"}, "options.microbatch_sizes"),
    ({"microbatch_sizes": [1, 0]}, "options.microbatch_sizes"),
    ({"config": "shipped"}, "config"),
    ({"config": None}, "config"),
])
def test_search_options_of_the_wrong_shape_are_named_when_built(kwargs, field) -> None:
    """``SearchOptions(microbatch_sizes=3)`` was a TypeError (not iterable); ``config="shipped"``
    was kept and failed only when a search read it."""
    with pytest.raises(InputError, match=rf"^{field}="):
        SearchOptions(**kwargs)


def test_search_options_keep_the_sizes_as_a_tuple() -> None:
    assert SearchOptions(microbatch_sizes=[2, 4.0]).microbatch_sizes == (2, 4)


@pytest.mark.parametrize(("kwargs", "field"), [({"options": "fast"}, "options"), ({"options": {"max_pp": 2}}, "options")])
def test_plan_job_names_options_that_are_no_search_options(kwargs, field) -> None:
    from heteroplan.planner import plan_job

    with pytest.raises(InputError, match=rf"^{field}='(str|dict)': must be a SearchOptions"):
        plan_job("OPT-350", 64, {(A, Z): 4}, **kwargs)


@pytest.mark.parametrize("model", [["OPT-350"], {"name": "OPT-350"}, 350, None])
def test_a_model_that_is_no_name_is_named(model) -> None:
    from heteroplan.perf.sailor_profiles import load_model_profile
    from heteroplan.planner import plan_job

    with pytest.raises(InputError, match=r"^model=.*must be a model name"):
        load_model_profile(model)
    with pytest.raises(InputError, match=r"^model="):
        plan_job(model, 64, {(A, Z): 4})


@pytest.mark.parametrize("lr", [math.inf, True, math.nan, 0, "0.1"])
def test_a_learning_rate_that_is_no_finite_positive_number_is_named(lr) -> None:
    """``RunConfig(lr=inf)`` and ``lr=True`` were kept (inf > 0; a bool is an int): the first
    trained to NaN losses, the second at lr 1."""
    pytest.importorskip("torch", reason="heteroplan.runtime needs torch: pip install torch==2.13.0 (CPU wheel: "
                        "--index-url https://download.pytorch.org/whl/cpu)")
    from heteroplan.runtime.config import RunConfig

    with pytest.raises(InputError, match=r"^config\.lr="):
        RunConfig(lr=lr)
    assert RunConfig(lr=0.5).lr == 0.5


def test_profile_without_the_runtime_says_what_to_install(monkeypatch, tmp_path, cli_error) -> None:
    """``heteroplan profile`` where torch is missing raised the ImportError as a traceback (``run``
    and ``schedule`` named it already); a None entry in sys.modules makes the import fail as then."""
    import sys

    monkeypatch.setitem(sys.modules, "heteroplan.runtime.profiler", None)
    err = cli_error(["profile", "--out", str(tmp_path / "data")])
    assert err.startswith("heteroplan profile: error: runtime='torch': ") and "Traceback" not in err
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("seconds", [math.inf, 1e300, 2e9])
def test_a_wait_beyond_what_torch_takes_is_named_before_any_rank_starts(seconds, cli_error) -> None:
    """``heteroplan run --timeout 1e300`` started the ranks and each failed with an OverflowError
    from torch's process-group timeout; ``RunConfig(timeout_s=inf)`` likewise."""
    from heteroplan.inputs import MAX_WAIT_S, check_wait

    assert "argument --timeout: " in cli_error(["run", "--timeout", repr(seconds)])
    with pytest.raises(InputError, match=r"^config\.timeout_s=.*must be at most 1e\+09 s"):
        check_wait("config.timeout_s", seconds)
    assert check_wait("config.timeout_s", MAX_WAIT_S) == MAX_WAIT_S


def test_run_config_checks_its_waits() -> None:
    pytest.importorskip("torch", reason="heteroplan.runtime needs torch: pip install torch==2.13.0 (CPU wheel: "
                        "--index-url https://download.pytorch.org/whl/cpu)")
    from heteroplan.runtime.config import RunConfig

    for name in ("timeout_s", "startup_timeout_s"):
        with pytest.raises(InputError, match=rf"^config\.{name}=inf: must be at most"):
            RunConfig(**{name: math.inf})


@pytest.mark.parametrize(("argv", "flag"), [(["--overhead", "1e300"], "--overhead"), (["--round", "1e300"], "--round")])
def test_schedule_waits_beyond_what_a_process_can_sleep_are_refused_by_the_flag(argv, flag, cli_error) -> None:
    """``schedule --overhead 1e300``: every job failed with ``OverflowError: timestamp out of range
    for platform time_t`` (the rank's emulated compute is a ``time.sleep``, which overflows near 9e9 s)."""
    assert f"argument {flag}: 1e+300 is out of range: must be > 0 and <= 1e+09" in cli_error(["schedule", *argv])


def test_an_emulated_iteration_longer_than_a_process_can_sleep_is_named() -> None:
    pytest.importorskip("torch", reason="heteroplan.runtime needs torch: pip install torch==2.13.0 (CPU wheel: "
                        "--index-url https://download.pytorch.org/whl/cpu)")
    from heteroplan.runtime.config import StepEmulation
    from heteroplan.runtime.emulated import EmulatedWorkload

    with pytest.raises(InputError, match=r"^emulate\.seconds_per_sample\[A100\]=1e\+300: must be <= 1e\+09"):
        StepEmulation({"A100": 1e300})
    with pytest.raises(InputError, match=r"^emulate\.overhead_s=1e\+300: must be <= 1e\+09"):
        StepEmulation({"A100": 1.0}, overhead_s=1e300)
    long = StepEmulation({"A100": 1e8, "V100": 1.0})  # 16 samples: 1.6e9 s on an A100
    with pytest.raises(InputError, match=r"^emulation=.*an iteration of 16 samples would last 1\.6e\+09 s"):
        EmulatedWorkload(long, (0.0,), (1,), batch_size=16)
    assert EmulatedWorkload(long, (0.0,), (1,), batch_size=8).batch_size == 8


@pytest.mark.parametrize(("emulation", "work", "overhead"), [({"A100": 1.0}, (1e308, 1e308), 0.1),
                                                              ({"A100": 0.0}, (60.0, 240.0), 0.0),
                                                              ({"A100": 0.0}, (60.0, 240.0), 1e-300)])
def test_generated_emulated_jobs_of_no_countable_length_are_named(emulation, work, overhead) -> None:
    """``schedule --work 1e308,1e308`` raised ``OverflowError: cannot convert float infinity to
    integer`` (work / step time); an emulation taking no time divided by zero."""
    pytest.importorskip("torch", reason="heteroplan.runtime needs torch: pip install torch==2.13.0 (CPU wheel: "
                        "--index-url https://download.pytorch.org/whl/cpu)")
    from heteroplan.runtime.config import StepEmulation
    from heteroplan.runtime.emulated import EmulatedWorkload

    with pytest.raises(InputError, match=r"^work_s=.*would run more than 9\.0072e\+15 iterations"):
        EmulatedWorkload.generate(2, StepEmulation(emulation, overhead_s=overhead), work_s=work)
    made = EmulatedWorkload.generate(2, StepEmulation({"A100": 1.0}, overhead_s=0.0), work_s=(64.0, 64.0), batch_size=16)
    assert made.steps == (4, 4)
