"""Sailor planner: plans, simulator, search."""

from heteroplan.planner.api import OBJECTIVES, PlanResult, plan_job
from heteroplan.planner.pareto import ParetoFront, ParetoPoint, pareto_front
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.schedule import PipelineSchedule, pipeline_schedule
from heteroplan.planner.search import SearchOptions
from heteroplan.planner.simulator import SimConfig, SimResult, simulate

__all__ = [
    "OBJECTIVES",
    "ParetoFront",
    "ParetoPoint",
    "PipelineSchedule",
    "Plan",
    "PlanResult",
    "ReplicaGroup",
    "SearchOptions",
    "SimConfig",
    "SimResult",
    "Stage",
    "pareto_front",
    "pipeline_schedule",
    "plan_job",
    "simulate",
]
