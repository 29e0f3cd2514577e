"""Sailor planner: plans, the machine model that prices them (``simulate_plan``), the search."""

from heteroplan.planner.api import PlanResult, plan_job
from heteroplan.planner.goal import Objective
from heteroplan.planner.model.schedule import PipelineSchedule, pipeline_schedule
from heteroplan.planner.model.simulator import (
    CostTerms,
    MemoryFit,
    MemoryTerms,
    PlanEstimate,
    SimConfig,
    TimeTerms,
    simulate_plan,
)
from heteroplan.planner.notes import NoteKind, PlanNote
from heteroplan.planner.pareto import ParetoFront, ParetoPoint, pareto_front
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.request import PlanRequest, SearchOptions

__all__ = [
    "Objective",
    "CostTerms",
    "MemoryFit",
    "MemoryTerms",
    "PlanEstimate",
    "TimeTerms",
    "simulate_plan",
    "ParetoFront",
    "ParetoPoint",
    "PipelineSchedule",
    "Plan",
    "PlanRequest",
    "PlanResult",
    "PlanNote",
    "NoteKind",
    "ReplicaGroup",
    "SearchOptions",
    "SimConfig",
    "Stage",
    "pareto_front",
    "pipeline_schedule",
    "plan_job",
]
