"""Sailor planner: plans, simulator, search."""

from heteroplan.planner.api import OBJECTIVES, PlanResult, plan, plan_job
from heteroplan.planner.model.schedule import PipelineSchedule, pipeline_schedule
from heteroplan.planner.model.simulator import SimConfig, SimResult, simulate
from heteroplan.planner.pareto import ParetoFront, ParetoPoint, pareto_front
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.request import PlanRequest, SearchOptions

__all__ = [
    "OBJECTIVES",
    "ParetoFront",
    "ParetoPoint",
    "PipelineSchedule",
    "Plan",
    "PlanRequest",
    "PlanResult",
    "ReplicaGroup",
    "SearchOptions",
    "SimConfig",
    "SimResult",
    "Stage",
    "pareto_front",
    "pipeline_schedule",
    "plan",
    "plan_job",
    "simulate",
]
