"""heteroplan: plan and schedule deep-learning training on heterogeneous GPU clusters.

The everyday names are importable from here (``from heteroplan import preset, plan_job``);
they load on first use, so ``import heteroplan`` stays fast and never imports torch.

Subpackages:
    cluster        GPU types, nodes, zones, prices (frozen, validated)
    formulations   solver-neutral MILP/LP models (data in, Model out)
    solvers        Model -> Solution (HiGHS by default; pulp, cvxpy, scipy exports)
    perf           performance models (Pollux/Sia goodput, Sailor profiles and networks)
    policies       round-based cluster schedulers behind one Policy protocol
    scheduling     the scheduling session: one place that tracks each job's life between rounds
    planner        Sailor: plans, iteration-time/memory simulator, search
    sim            discrete-event cluster simulator and metrics
    runtime        thin PyTorch runtime (extra ``[runtime]``)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> module that defines it (imported lazily by __getattr__)
_PUBLIC = {
    "__version__": "heteroplan.version",
    "Cluster": "heteroplan.cluster", "GPUType": "heteroplan.cluster", "Node": "heteroplan.cluster",
    "Zone": "heteroplan.cluster", "preset": "heteroplan.cluster", "PRESETS": "heteroplan.cluster",
    "InputError": "heteroplan.errors", "HeteroplanError": "heteroplan.errors",
    "InfeasibleError": "heteroplan.errors", "SolverError": "heteroplan.errors",
    "Model": "heteroplan.milp",
    "solve": "heteroplan.solvers", "Solution": "heteroplan.solvers", "SolveStatus": "heteroplan.solvers",
    "JobSpec": "heteroplan.workload.sia", "bundled_workload": "heteroplan.workload.sia",
    "read_sia_workload": "heteroplan.workload.sia",
    "Allocation": "heteroplan.policies.base", "JobState": "heteroplan.policies.base",
    "Policy": "heteroplan.policies.base", "PolicyBase": "heteroplan.policies.base",
    "PolicyState": "heteroplan.policies.state",
    "register_policy": "heteroplan.policies.registry",
    "SchedulingSession": "heteroplan.scheduling", "Decision": "heteroplan.scheduling",
    "DecisionKind": "heteroplan.scheduling", "RoundDecisions": "heteroplan.scheduling",
    "StepTiming": "heteroplan.scheduling", "JobRecord": "heteroplan.scheduling",
    "UnreportedJobWarning": "heteroplan.scheduling", "PolicyStateLostWarning": "heteroplan.scheduling",
    "Plan": "heteroplan.planner.plan", "Stage": "heteroplan.planner.plan",
    "ReplicaGroup": "heteroplan.planner.plan", "plan_job": "heteroplan.planner.api",
    "compare_policies": "heteroplan.sim.compare", "make_policy": "heteroplan.sim.compare",
    "SimResult": "heteroplan.sim.metrics", "compare_table": "heteroplan.sim.metrics",
}

__all__ = [
    "__version__",
    "Cluster",
    "GPUType",
    "Node",
    "Zone",
    "preset",
    "PRESETS",
    "InputError",
    "HeteroplanError",
    "InfeasibleError",
    "SolverError",
    "Model",
    "solve",
    "Solution",
    "SolveStatus",
    "JobSpec",
    "bundled_workload",
    "read_sia_workload",
    "Allocation",
    "JobState",
    "Policy",
    "PolicyBase",
    "PolicyState",
    "register_policy",
    "SchedulingSession",
    "Decision",
    "DecisionKind",
    "RoundDecisions",
    "StepTiming",
    "JobRecord",
    "UnreportedJobWarning",
    "PolicyStateLostWarning",
    "Plan",
    "Stage",
    "ReplicaGroup",
    "plan_job",
    "compare_policies",
    "make_policy",
    "SimResult",
    "compare_table",
]  # the names of _PUBLIC, spelled out for linters


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'heteroplan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from heteroplan.cluster import PRESETS, Cluster, GPUType, Node, Zone, preset
    from heteroplan.errors import HeteroplanError, InfeasibleError, InputError, SolverError
    from heteroplan.milp import Model
    from heteroplan.planner.api import plan_job
    from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
    from heteroplan.policies.base import Allocation, JobState, Policy, PolicyBase
    from heteroplan.policies.registry import register_policy
    from heteroplan.policies.state import PolicyState
    from heteroplan.scheduling import (
        Decision,
        DecisionKind,
        JobRecord,
        PolicyStateLostWarning,
        RoundDecisions,
        SchedulingSession,
        StepTiming,
        UnreportedJobWarning,
    )
    from heteroplan.sim.compare import compare_policies, make_policy
    from heteroplan.sim.metrics import SimResult, compare_table
    from heteroplan.solvers import Solution, SolveStatus, solve
    from heteroplan.version import __version__
    from heteroplan.workload.sia import JobSpec, bundled_workload, read_sia_workload
