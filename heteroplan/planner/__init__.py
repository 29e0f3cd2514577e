"""Sailor planner: plans, the machine model that prices them (``simulate_plan``), the search.

``simulate`` and ``SimResult`` are the old names of ``simulate_plan`` and ``PlanEstimate`` (kept as
aliases; the cluster simulator in :mod:`heteroplan.sim` has its own ``simulate``)."""

from heteroplan.planner.api import OBJECTIVES, PlanResult, plan, plan_job
from heteroplan.planner.model.schedule import PipelineSchedule, pipeline_schedule
from heteroplan.planner.model.simulator import (
    CostTerms,
    MemoryFit,
    MemoryTerms,
    PlanEstimate,
    SimConfig,
    SimResult,
    TimeTerms,
    simulate,
    simulate_plan,
)
from heteroplan.planner.notes import NoteKind, PlanNote
from heteroplan.planner.pareto import ParetoFront, ParetoPoint, pareto_front
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.request import PlanRequest, SearchOptions

__all__ = [
    "OBJECTIVES",
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
    "SimResult",
    "Stage",
    "pareto_front",
    "pipeline_schedule",
    "plan",
    "plan_job",
    "simulate",
]
