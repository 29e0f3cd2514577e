"""Sailor planner: plans, simulator, search."""

from heteroplan.planner.api import OBJECTIVES, PlanResult, plan_job
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.search import SearchOptions
from heteroplan.planner.simulator import SimConfig, SimResult, simulate

__all__ = [
    "OBJECTIVES",
    "Plan",
    "PlanResult",
    "ReplicaGroup",
    "SearchOptions",
    "SimConfig",
    "SimResult",
    "Stage",
    "plan_job",
    "simulate",
]
