"""One dialect (issue 48, item 4): the deprecated aliases are gone, the current API warns about
nothing, and no package attribute shadows a submodule of the same name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
import warnings
from pathlib import Path

import pytest

import heteroplan

PACKAGE_DIR = Path(heteroplan.__file__).parent

# (module, attribute) pairs that were deprecated aliases and must no longer resolve
REMOVED_NAMES = [
    ("heteroplan.planner", "simulate"), ("heteroplan.planner", "SimResult"),
    ("heteroplan.planner.model.simulator", "simulate"), ("heteroplan.planner.model.simulator", "SimResult"),
    ("heteroplan.policies", "GoodputEstimator"), ("heteroplan.policies.base", "GoodputEstimator"),
    ("heteroplan.runtime.rounds", "JobOutcome"),
    ("heteroplan.sim", "POLICY_FACTORIES"), ("heteroplan.sim.compare", "POLICY_FACTORIES"),
    ("heteroplan.sim.summary", "DEPRECATED_NAMES"),
]
REMOVED_MODULES = ["heteroplan._deprecated", "heteroplan.formulations.model", "heteroplan.solvers.solution"]
# (module, class, former attribute spellings)
REMOVED_ATTRIBUTES = [
    ("heteroplan.planner.api", "PlanResult",
     ("iteration_time", "throughput", "cost_per_iteration", "memory_per_gpu", "search_time")),
    ("heteroplan.planner.model.simulator", "PlanEstimate",
     ("iteration_time", "memory_per_stage", "cost_per_iteration", "pipeline_time", "sync_time", "throughput")),
    ("heteroplan.planner.explain", "RunnerUp", ("iteration_time", "cost_per_iteration")),
    ("heteroplan.scheduling.records", "JobRecord", ("name", "jct", "queueing_delay")),
    ("heteroplan.sim.summary", "SimSummary", ("avg_queuing_delay_h",)),
]


def _module_names() -> list[str]:
    return ["heteroplan"] + [m.name for m in pkgutil.walk_packages([str(PACKAGE_DIR)], "heteroplan.")
                             if not m.name.endswith("__main__")]  # importing it runs the CLI


def _import(name: str) -> types.ModuleType | None:
    """The module, or None where an optional dependency (torch, ray, ...) is missing."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        cause: BaseException | None = exc
        while cause is not None:  # heteroplan.runtime re-raises torch's ImportError with advice
            if isinstance(cause, ImportError) and cause.name and cause.name.split(".")[0] != "heteroplan":
                return None
            cause = cause.__cause__
        raise


@pytest.mark.parametrize(("module", "name"), REMOVED_NAMES)
def test_a_removed_alias_no_longer_resolves(module: str, name: str) -> None:
    mod = _import(module)
    if mod is None:
        pytest.skip(f"{module} needs torch (the [runtime] extra)")
    assert not hasattr(mod, name), f"{module}.{name}"
    assert name not in getattr(mod, "__all__", ())


@pytest.mark.parametrize("module", REMOVED_MODULES)
def test_a_removed_module_is_gone(module: str) -> None:
    # its file, not an import: an editable install of another checkout may still find one there
    relative = Path(*module.split(".")[1:])
    assert not (PACKAGE_DIR / relative.with_suffix(".py")).exists() and not (PACKAGE_DIR / relative).exists()


@pytest.mark.parametrize(("module", "cls", "former"), REMOVED_ATTRIBUTES)
def test_a_former_attribute_spelling_is_gone(module: str, cls: str, former: tuple[str, ...]) -> None:
    klass = getattr(importlib.import_module(module), cls)
    assert [name for name in former if hasattr(klass, name)] == []


def test_no_public_name_or_property_is_a_deprecated_spelling() -> None:
    """Every name of every ``__all__`` resolves; no exported class has a property documented as a
    deprecated or former spelling; no library module raises a DeprecationWarning itself."""
    for name in _module_names():
        mod = _import(name)
        if mod is None:
            continue
        for public in getattr(mod, "__all__", ()):
            value = getattr(mod, public)  # an AttributeError names a stale __all__ entry
            if not inspect.isclass(value):
                continue
            for attr, member in vars(value).items():
                doc = (getattr(member, "__doc__", None) or "").lower() if isinstance(member, property) else ""
                assert "deprecated" not in doc and "former spelling" not in doc, f"{name}.{public}.{attr}"
    sources = [p for p in PACKAGE_DIR.rglob("*.py") if "DeprecationWarning" in p.read_text(encoding="utf-8")]
    assert sources == []


def test_the_current_api_warns_nothing_deprecated() -> None:
    """Representative calls of the current API, planner and cluster simulator, under warnings as
    errors for DeprecationWarning raised in heteroplan's own frames."""
    from heteroplan.cluster import preset
    from heteroplan.planner import plan_job, simulate_plan
    from heteroplan.sim import run_policy
    from heteroplan.workload.sia import bundled_workload

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = plan_job("OPT-350", 64, {("GH-96", "us-central1-a"): 4})
        est = simulate_plan(res.plan)
        assert est.iteration_time_s == pytest.approx(res.iteration_time_s, rel=1e-9)
        res.to_dict(), res.describe(), res.explain(), est.describe()
        sim = run_policy(bundled_workload("philly/workload-1")[:3], preset("sia-64"), "fifo",
                         max_time=3600 * 48, progress=False)
        summary = sim.summary()
        sim.to_dict()
        assert summary.finished == len(sim.finished()) and summary["avg_queueing_delay_h"] >= 0
    ours = [w for w in caught if issubclass(w.category, DeprecationWarning | PendingDeprecationWarning)
            and Path(w.filename).resolve().is_relative_to(PACKAGE_DIR.resolve())]
    assert ours == [], [str(w.message) for w in ours]


def test_no_package_attribute_shadows_its_submodule() -> None:
    """``import heteroplan.x.y as m`` gives the module ``y`` wherever ``y`` is a submodule of the
    package ``heteroplan.x`` (a function re-exported as ``y`` made it the function)."""
    shadowed, unchecked = [], []
    for name in _module_names():
        pkg = _import(name)
        if pkg is None:
            unchecked.append(name)
        if pkg is None or not hasattr(pkg, "__path__"):
            continue
        for sub in pkgutil.iter_modules(pkg.__path__):
            full = f"{name}.{sub.name}"
            if sub.name == "__main__":
                continue
            if _import(full) is None:
                continue
            via_attribute = getattr(pkg, sub.name)
            via_import = importlib.import_module(full)
            if not isinstance(via_attribute, types.ModuleType) or via_attribute is not via_import:
                shadowed.append(full)
            exec(f"import {full} as _m", namespace := {})  # what a user writes
            if not isinstance(namespace["_m"], types.ModuleType):
                shadowed.append(full)
    assert shadowed == []
    if unchecked:  # so that CI's second phase, with torch and Ray, checks them too
        pytest.skip(f"{len(unchecked)} modules need torch or ray (optional extras), e.g. {unchecked[0]}")


# -- choices are enums: strings accepted at the boundary, a bad one names the field and the choices
def _sia_policy(**kw):
    from heteroplan.policies.sia import SiaPolicy

    return SiaPolicy(**kw)


def _pollux_policy(**kw):
    from heteroplan.policies.pollux import PolluxPolicy

    return PolluxPolicy(**kw)


def _fidelity(**kw):
    from heteroplan.sim.fidelity import SimFidelity

    return SimFidelity(**kw)


def _request(objective):
    from heteroplan.planner.request import PlanRequest

    return PlanRequest.build("OPT-350", 64, {("A100-40", "us-central1-a"): 8}, objective)


def _executor(kind):
    from heteroplan.sim.sweep.executors import make_executor

    return make_executor(kind)


CHOICES = [
    # (build with the value, what to read back, the enum, its field name in the error, a good value)
    (lambda v: _request(v).goal.objective, "heteroplan.planner.goal:Objective", "objective", "cost"),
    (lambda v: _sia_policy(mode=v).mode, "heteroplan.formulations.sia:SolveMode", "mode", "lp-round"),
    (lambda v: _sia_policy(scale_up_from=v).scale_up_from, "heteroplan.policies.common:ScaleFrom", "scale_up_from",
     "current"),
    (lambda v: _pollux_policy(scale_up_from=v).scale_up_from, "heteroplan.policies.common:ScaleFrom",
     "scale_up_from", "current"),
    (lambda v: _fidelity(batch_size=v).batch_size, "heteroplan.sim.fidelity:BatchSizeSource", "fidelity.batch_size",
     "truth"),
    (lambda v: _fidelity(grad_stats=v).grad_stats, "heteroplan.sim.fidelity:GradStatsSource", "fidelity.grad_stats",
     "median"),
]


def _enum(path: str) -> type:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(("build", "enum", "field", "good"), CHOICES)
def test_a_choice_takes_its_value_and_refuses_another_naming_the_field_and_the_choices(build, enum, field, good):
    members = _enum(enum)
    assert build(good) is members(good)
    with pytest.raises(heteroplan.InputError) as err:
        build("no-such-choice")
    assert err.value.field == field and str([m.value for m in members]) in str(err.value)


def test_the_simulator_and_the_executor_take_their_enums_values() -> None:
    from heteroplan.cluster import preset
    from heteroplan.sim import SimFidelity, run_policy
    from heteroplan.sim.fidelity import FidelityPreset
    from heteroplan.sim.loop import OnInfeasible
    from heteroplan.sim.sweep.executors import ExecutorKind, InProcessExecutor
    from heteroplan.workload.sia import bundled_workload

    assert isinstance(_executor(ExecutorKind.INPROCESS), InProcessExecutor)
    assert isinstance(_executor("inprocess"), InProcessExecutor)
    with pytest.raises(heteroplan.InputError, match=r"executor.*\['inprocess', 'processes', 'ray'\]"):
        _executor("threads")
    assert SimFidelity.preset("ideal") == SimFidelity.preset(FidelityPreset.IDEAL) == SimFidelity.ideal()
    with pytest.raises(heteroplan.InputError, match="fidelity"):
        SimFidelity.preset("real")
    jobs = bundled_workload("philly/workload-1")[:2]
    by_value = run_policy(jobs, preset("sia-64"), "fifo", max_time=3600.0, progress=False, estimator="oracle",
                          on_infeasible="raise")
    by_member = run_policy(jobs, preset("sia-64"), "fifo", max_time=3600.0, progress=False,
                           on_infeasible=OnInfeasible.RAISE)  # fifo is rigid: oracle by default
    assert by_value.summary().to_dict() | {"policy_ms_median": 0, "policy_ms_p95": 0, "policy_time_s": 0} == \
        by_member.summary().to_dict() | {"policy_ms_median": 0, "policy_ms_p95": 0, "policy_time_s": 0}
    for kw, field in (({"estimator": "truth"}, "estimator"), ({"on_infeasible": "skip"}, "on_infeasible")):
        with pytest.raises(heteroplan.InputError) as err:
            run_policy(jobs, preset("sia-64"), "fifo", max_time=3600.0, progress=False, **kw)
        assert err.value.field == field


def test_argparse_choices_are_the_enums_values() -> None:
    from heteroplan.cli import build_parser
    from heteroplan.inputs import enum_values
    from heteroplan.planner.goal import Objective
    from heteroplan.run_options import (
        CommBackend,
        Device,
        LayerTiming,
        Optimizer,
        PipelineEngine,
        PipelineSchedule,
    )
    from heteroplan.sim.fidelity import FidelityPreset

    parser = build_parser()
    commands = next(a for a in parser._actions if a.choices and "plan" in a.choices).choices
    expected = {("plan", "--objective"): Objective, ("simulate", "--fidelity"): FidelityPreset,
                ("profile", "--optimizer"): Optimizer, ("profile", "--timing"): LayerTiming,
                ("profile", "--backend"): CommBackend, ("run", "--optimizer"): Optimizer,
                ("run", "--schedule"): PipelineSchedule, ("run", "--pipeline"): PipelineEngine,
                ("run", "--device"): Device}
    for (command, flag), enum in expected.items():
        action = next(a for a in commands[command]._actions if flag in a.option_strings)
        assert tuple(action.choices) == enum_values(enum), (command, flag)
        assert action.default in enum_values(enum)


def test_more_choices_refuse_a_bad_value_naming_the_field_and_the_choices() -> None:
    from heteroplan.perf.fit import MissingSync, fit_throughput_params
    from heteroplan.perf.measurements import Measurements
    from heteroplan.planner.model.calibration import CalibratedQuantity, relative_errors
    from heteroplan.planner.model.sim_config import DEFAULT_CONFIG
    from heteroplan.topology import Topology, VertexKind

    assert relative_errors([], [], DEFAULT_CONFIG, quantity="peak_memory_gb").size == 0
    cases = [
        (lambda: relative_errors([], [], DEFAULT_CONFIG, quantity="memory"), "quantity", CalibratedQuantity),
        (lambda: fit_throughput_params(Measurements([1], [1], [32], [0.1], [0.0]), missing="guess"), "missing",
         MissingSync),
    ]
    import networkx as nx

    graph = nx.Graph()
    graph.add_node("a", kind="rack")
    cases.append((lambda: Topology.from_graph(graph), "graph.nodes['a'].kind", VertexKind))
    for call, field, enum in cases:
        with pytest.raises(heteroplan.InputError) as err:
            call()
        assert err.value.field == field and str([m.value for m in enum]) in str(err.value), err.value
    graph.nodes["a"].update(kind="node", intra_gbps=100.0)
    topology = Topology.from_graph(graph)
    assert topology.graph.nodes["a"]["kind"] is VertexKind.NODE and graph.nodes["a"]["kind"] == "node"
