"""Public entry point of the Sailor planner: :func:`plan_job`."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from heteroplan._html import table
from heteroplan.cluster import SAILOR_GPU_TYPES, Cluster, GPUType
from heteroplan.errors import InfeasibleError
from heteroplan.perf.sailor_network import NetworkModel
from heteroplan.planner.explain import (
    PipelineSetRunnerUp,
    PlanDiff,
    PlanFamily,
    PlanStructure,
    RunnerUp,
    TermKind,
    diff_plans,
    estimate_terms,
    plan_structure,
)
from heteroplan.planner.goal import Goal, Objective
from heteroplan.planner.model.simulator import MemoryFit, PlanEstimate, simulate_plan
from heteroplan.planner.notes import NoteKind, PlanNote
from heteroplan.planner.plan import OptimizerSharding, Plan, Recomputation
from heteroplan.planner.request import PlanRequest, SearchOptions, normalize_pool
from heteroplan.planner.search.pipeline_sets import best_pipeline_set
from heteroplan.planner.search.searcher import Searcher

_log = logging.getLogger(__name__)

__all__ = ["PlanResult", "PlanRequest", "PlanNote", "NoteKind", "plan", "plan_job", "normalize_pool"]


@dataclass(frozen=True, repr=False)
class PlanResult:
    """The plan found and what the simulator predicts for it.

    Each number has its unit in its name, the same in Python and in :meth:`to_dict` (what
    ``heteroplan plan --json`` prints).

    Attributes:
        plan: the training plan.
        iteration_time_s: seconds per iteration.
        throughput_iter_s: iterations per second.
        cost_per_iteration_usd: $ per iteration (GPU rental + egress).
        memory_per_gpu_gb: peak GB per GPU of each stage.
        search_time_s: seconds the search took.
        evaluated: block layouts whose layer split was optimized.
        notes: what the planner did beyond the request and why, in the order ``describe()``
            prints them (:class:`~heteroplan.planner.notes.PlanNote`: recomputation, ZeRO-1,
            uncalibrated GPU types).
        memory_fit: the tightest GPU's memory need against its capacity (a returned plan always fits).
        runner_ups: the best plan the search priced per GPU-type mix, per pipeline depth and per
            layout of the replicas (:class:`~heteroplan.planner.explain.PlanStructure`), other
            than ``plan`` (:class:`~heteroplan.planner.explain.RunnerUp`; :meth:`explain` prices them
            by term; :meth:`best_of` picks one family's).
        estimate: the plan's estimate itemised by term (:class:`PlanEstimate`).
        independent_pipelines: the best set of independent pipelines the search priced, one per GPU
            type (:class:`~heteroplan.planner.explain.PipelineSetRunnerUp`; pools of two or more GPU
            types), or None. Reported, not chosen: the runtime does not execute a set yet.
        uncalibrated_gpu_types: the plan's GPU types that had no fitted simulator constants (empty
            when every type is calibrated).
        search_iteration_time_s: seconds per iteration as the search priced the plan (the same as
            ``iteration_time_s`` up to rounding: the search prices as the simulator does); None
            for a result no search found (a baseline).
        search_cost_per_iteration_usd: $ per iteration as the search priced it (None likewise).
        milp_gpus: GPUs per ``(gpu_type, zone)`` the resource MILP chose to narrow the pool to
            (``SearchOptions(narrow_with_milp=True)``), or None.
    """

    plan: Plan
    iteration_time_s: float
    throughput_iter_s: float
    cost_per_iteration_usd: float
    memory_per_gpu_gb: tuple[float, ...]
    search_time_s: float
    evaluated: int = 0
    notes: tuple[PlanNote, ...] = field(default=(), compare=False)
    memory_fit: MemoryFit | None = None
    runner_ups: tuple[RunnerUp, ...] = field(default=(), compare=False)
    estimate: PlanEstimate | None = field(default=None, compare=False, repr=False)
    request: PlanRequest | None = field(default=None, compare=False, repr=False)
    independent_pipelines: PipelineSetRunnerUp | None = field(default=None, compare=False, repr=False)
    uncalibrated_gpu_types: tuple[str, ...] = field(default=(), compare=False)
    search_iteration_time_s: float | None = field(default=None, compare=False)
    search_cost_per_iteration_usd: float | None = field(default=None, compare=False)
    milp_gpus: Mapping[tuple[str, str], int] | None = field(default=None, compare=False, repr=False)

    def simulate(self, other: Plan) -> PlanEstimate:
        """``other`` priced with this result's data and constants (profile, network, GPU types)."""
        if self.request is None:
            return simulate_plan(other)
        r = self.request
        return simulate_plan(other, profile=r.profile, network=r.network, gpu_types=dict(r.gpu_types), config=r.options.config)

    def diff(self, other: Plan, labels: tuple[str, str] = ("chosen", "other")) -> PlanDiff:
        """This plan against ``other``, term by term (:func:`~heteroplan.planner.explain.diff_plans`)."""
        mine = self.estimate if self.estimate is not None else self.simulate(self.plan)
        return diff_plans(mine, self.simulate(other), labels, (self.plan, other))

    def explain(self) -> str:
        """The chosen plan against each runner-up: family, time, cost and the terms that differ most."""
        lines = [f"chosen: {self.iteration_time_s:.4g} s/iteration, ${self.cost_per_iteration_usd:.4g}/iteration"]
        for r in self.runner_ups:
            d = self.diff(r.plan, ("chosen", r.family.label))
            top = ", ".join(f"{t.term} {t.delta:+.3g} s" for t in d.largest(TermKind.TIME, 2))
            lines.append(f"best of {r.family}: PP{r.plan.pp} x DP{r.plan.dp}, {r.plan.num_gpus} GPUs, "
                         f"{d.b.iteration_time_s:.4g} s ({d.b.iteration_time_s / self.iteration_time_s - 1:+.1%}), "
                         f"${d.b.cost_per_iteration_usd:.4g}; {top}")
        return "\n".join(lines)

    @property
    def structure(self) -> PlanStructure:
        """The chosen plan's layout of the replicas: uniform pipeline or mixed replicas."""
        return plan_structure(self.plan)

    def best_of(self, family: PlanFamily | PlanStructure) -> RunnerUp | None:
        """The runner-up of ``family`` (a :class:`PlanStructure` stands for its layout family), or
        None: the chosen plan is of that family, or the search priced none that fits the goal (a
        set of independent pipelines is no :class:`Plan`: see :attr:`independent_pipelines`)."""
        if isinstance(family, PlanStructure):
            family = PlanFamily.layout(family)
        return next((r for r in self.runner_ups if r.family == family), None)

    @property
    def peak_memory_gb(self) -> float:
        """The largest of :attr:`memory_per_gpu_gb` (GB per GPU)."""
        return max(self.memory_per_gpu_gb)

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "iteration_time_s": self.iteration_time_s,
            "throughput_iter_s": self.throughput_iter_s,
            "cost_per_iteration_usd": self.cost_per_iteration_usd,
            "memory_per_gpu_gb": list(self.memory_per_gpu_gb),
            "peak_memory_gb": self.peak_memory_gb,
            "fits_memory": self.memory_fit is None or self.memory_fit.fits,
            "memory_headroom_gb": None if self.memory_fit is None else self.memory_fit.headroom_gb,
            "search_time_s": self.search_time_s,
            "evaluated": self.evaluated,
            "gpus": {f"{t}@{z}": n for (t, z), n in self.plan.gpus_by_type_zone().items()},
            "structure": self.structure.value,
            "independent_pipelines": None if self.independent_pipelines is None else {
                "iteration_time_s": self.independent_pipelines.iteration_time_s,
                "cost_per_iteration_usd": self.independent_pipelines.cost_per_iteration_usd,
                "pipeline_set": self.independent_pipelines.pipelines.to_dict(),
            },
            "uncalibrated_gpu_types": list(self.uncalibrated_gpu_types),
            "notes": [n.to_dict() for n in self.notes],
            "terms": {k.value: v for k, v in estimate_terms(self.estimate).items()} if self.estimate else {},
            "runner_ups": [r.to_dict() for r in self.runner_ups],
            "explanation": self.explain().splitlines(),
            "utilization": self.estimate.utilization.to_dict()
            if self.estimate is not None and self.estimate.utilization is not None else None,
        }

    def __repr__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """A few lines: the plan's stages, the predicted time, cost and memory, the search."""
        lines = [self.plan.describe()]
        lines.append(
            f"  predicted: {self.iteration_time_s:.4g} s/iteration = {self.throughput_iter_s:.4g} iter/s, "
            f"${self.cost_per_iteration_usd:.4g}/iteration, peak memory {self.peak_memory_gb:.3g} GB/GPU "
            f"(per stage: {', '.join(f'{m:.3g}' for m in self.memory_per_gpu_gb)})"
        )
        if self.memory_fit is not None:
            lines.append("  " + self.memory_fit.describe())
        if self.estimate is not None and self.estimate.utilization is not None:
            lines.append("  predicted " + self.estimate.utilization.describe())
        lines.append(f"  search: {self.search_time_s:.3g} s, {self.evaluated} layouts")
        lines.append("  " + self._structure_note())
        lines += ["  " + n.message for n in self.notes]
        return "\n".join(lines)

    def _structure_note(self) -> str:
        """``"layout: mixed replicas; best uniform pipeline: 23.11 s/iteration (+3.3%)"``."""
        others = []
        for structure in PlanStructure:
            r = self.best_of(structure) if structure is not self.structure else None
            if structure is PlanStructure.INDEPENDENT_PIPELINES:
                r = self.independent_pipelines
            if r is not None:
                others.append(f"best {structure.value}: {r.iteration_time_s:.4g} s/iteration "
                              f"({r.iteration_time_s / self.iteration_time_s - 1:+.1%}), ${r.cost_per_iteration_usd:.4g}/iteration")
        return "; ".join([f"layout: {self.structure.value}", *others])

    def _repr_html_(self) -> str:
        metrics = table(
            ("iteration time (s)", "throughput (iter/s)", "$/iteration", "peak memory (GB/GPU)", "search (s)"),
            [(self.iteration_time_s, self.throughput_iter_s, self.cost_per_iteration_usd, f"{self.peak_memory_gb:.3g}",
              f"{self.search_time_s:.3g}")],
        )
        return self.plan.html_title() + metrics + self.plan.html_table(self.memory_per_gpu_gb)


def plan_job(
    model: str,
    gbs: int,
    pool: Cluster | Mapping[tuple[str, str], int],
    objective: Objective | str = Objective.THROUGHPUT,
    budget: float | None = None,
    min_throughput: float | None = None,
    *,
    gpu_types: tuple[GPUType, ...] = SAILOR_GPU_TYPES,
    options: SearchOptions | None = None,
    network: NetworkModel | None = None,
    data_dir: str | Path | None = None,
) -> PlanResult:
    """Find the best training plan of ``model`` with global batch ``gbs`` over ``pool``.

    Args:
        model: a model with profiles in ``data_dir``
            (``heteroplan.perf.sailor_profiles.available_models(data_dir)``).
        gbs: global batch size (samples per iteration).
        pool: GPUs that can be rented, as a Cluster or ``{(gpu_type, zone): count}``.
        objective: :class:`~heteroplan.planner.goal.Objective` or its value: ``"throughput"`` (max
            iter/s, optionally under ``budget`` $/iteration) or
            ``"cost"`` (min $/iteration, optionally under a floor ``min_throughput`` iter/s).
        gpu_types: GPU catalog (memory, GPUs per node, $/h).
        options: search knobs; default ``SearchOptions()``, whose simulator constants are the
            shipped table per GPU type (``SHIPPED_PLATFORMS``) for shipped data and, when
            ``data_dir`` is given, its ``sim_config.json`` (``heteroplan profile --calibrate``) over
            ``PROFILED_CONFIG``; ``result.uncalibrated_gpu_types`` names the plan's GPU types that
            had none (a note of ``result.notes`` says so, with how to calibrate; logged at INFO, not WARNING).
        network: network model (default: that of ``data_dir``).
        data_dir: directory of profiles and network files written by
            :mod:`heteroplan.runtime.profiler` (default: the shipped Sailor data).

    Raises:
        InputError: bad arguments (names the field).
        InfeasibleError: no plan satisfies the request; ``reason`` says why.
    """
    request = PlanRequest.build(
        model, gbs, pool, Goal(objective, budget, min_throughput),
        gpu_types=gpu_types, options=options, network=network, data_dir=data_dir,
    )
    return plan(request)


def plan(request: PlanRequest) -> PlanResult:
    """Find the best training plan for ``request`` (see :func:`plan_job` for the arguments).

    Raises:
        InfeasibleError: no plan satisfies the request; ``reason`` says why.
    """
    t0 = time.perf_counter()
    notes: list[PlanNote] = []
    milp_gpus: Mapping[tuple[str, str], int] | None = None
    narrowed = request
    if request.options.narrow_with_milp:
        from heteroplan.planner.search.resources import choose_resources, narrow_pool, replica_kinds

        try:
            choice = choose_resources(replica_kinds(request), request)
            narrowed = replace(request, pool=narrow_pool(choice, request.pool))
            milp_gpus = MappingProxyType(dict(choice.gpus))
        except InfeasibleError:
            narrowed = request
    try:
        searcher, best, stats = _search(narrowed, request)
    except InfeasibleError as exc:
        if request.profile.measured is None or request.options.recompute is not Recomputation.NONE:
            raise _explain(exc, request) from None
        # nothing fits (or meets the goal) keeping every activation: recompute them
        retry = replace(request, options=replace(request.options, recompute=Recomputation.FULL))
        try:
            searcher, best, stats = _search(replace(narrowed, options=retry.options), retry)
        except InfeasibleError:
            raise _explain(exc, request) from None
        notes.append(PlanNote(NoteKind.RECOMPUTATION,
                              f"every stage recomputes its activations: no plan without recomputation: {exc}"))
        request = retry
    sim = simulate_plan(best.plan, profile=request.profile, network=request.network, gpu_types=dict(request.gpu_types),
                   config=request.options.config)
    if not sim.fits:  # the search prices memory as simulate does: a broken invariant, not a user error
        raise InfeasibleError(f"internal error: the search chose a plan that does not fit; {sim.memory_fit.describe()}")
    if any(st.optimizer_sharding is OptimizerSharding.ZERO1 for st in best.plan.stages):
        notes.append(PlanNote(NoteKind.OPTIMIZER_SHARDING, _why_sharded(best.plan, sim, request)))
    if sim.uncalibrated:
        notes.append(PlanNote(NoteKind.UNCALIBRATED, uncalibrated_note(sim.uncalibrated)))
        # INFO, not WARNING: the library is quiet unless asked, and the result itself names the types
        # (uncalibrated_gpu_types, notes, to_dict, describe(), which `heteroplan plan` prints); A100-40 and V100-16, shipped
        # as profiles without real runs to fit, would otherwise warn on every process that plans them
        _log.info("%s", uncalibrated_note(sim.uncalibrated), extra={"uncalibrated": sim.uncalibrated})
    return PlanResult(
        best.plan,
        sim.iteration_time_s,
        sim.throughput_iter_s,
        sim.cost_per_iteration_usd,
        sim.memory_per_stage_gb,
        time.perf_counter() - t0,
        stats["evaluated"],
        tuple(notes),
        sim.memory_fit,
        tuple(RunnerUp(family, c.plan, c.iteration_time, c.cost_per_iteration)
              for family, c in sorted(searcher.runner_ups.items(), key=lambda fc: fc[0].label) if c.plan != best.plan),
        sim,
        request,
        best_pipeline_set(searcher) if len({t for t, _ in searcher.pool}) >= 2 else None,
        uncalibrated_gpu_types=sim.uncalibrated,
        search_iteration_time_s=best.iteration_time,
        search_cost_per_iteration_usd=best.cost_per_iteration,
        milp_gpus=milp_gpus,
    )


def _search(narrowed: PlanRequest, request: PlanRequest) -> tuple[Searcher, Any, dict[str, Any]]:
    """The search over ``narrowed`` (a MILP-narrowed pool), else over the whole ``request``."""
    try:
        searcher = Searcher(narrowed)
        best, stats = searcher.run()
    except InfeasibleError:
        searcher = Searcher(request)
        best, stats = searcher.run()
    return searcher, best, stats


def _why_sharded(plan: Plan, sim: PlanEstimate, request: PlanRequest) -> str:
    """Which stages of ``plan`` shard their optimizer state (ZeRO-1) and why: the plan without
    it does not fit, or is slower (``sim``: the plan's estimate)."""
    sharded = [s for s, st in enumerate(plan.stages) if st.optimizer_sharding is OptimizerSharding.ZERO1]
    whole = replace(plan, stages=tuple(replace(st, optimizer_sharding=OptimizerSharding.NONE) for st in plan.stages))
    other = simulate_plan(whole, profile=request.profile, network=request.network, gpu_types=dict(request.gpu_types),
                          config=request.options.config)
    why = (f"without it the plan does not fit ({other.memory_fit.describe()})" if not other.fits else
           f"faster: {sim.iteration_time_s:.4g} s/iteration, {other.iteration_time_s:.4g} s without")
    who = f"stages {', '.join(map(str, sharded))} shard their" if len(sharded) > 1 else f"stage {sharded[0]} shards its"
    return f"ZeRO-1: {who} optimizer state over the data-parallel replicas; {why}"


def uncalibrated_note(gpu_types: Any) -> str:
    """What a plan on GPU types without fitted simulator constants means, and how to fit them."""
    names = ", ".join(gpu_types)
    return (f"no simulator calibration for {names} (no real runs to fit): predicted from the profiles with the "
            f"uncalibrated default constants; to calibrate, run `heteroplan profile --device cuda --gpu-type TYPE "
            f"--calibrate --out DIR` on such a GPU and plan with `--data-dir DIR`")


def _explain(exc: InfeasibleError, request: PlanRequest) -> InfeasibleError:
    """Sharpen a constrained infeasibility with the unconstrained optimum (one more search)."""
    goal = request.goal
    relaxed = goal.relaxed()
    if relaxed is None:
        return exc
    try:
        best, _ = Searcher(request.unconstrained(relaxed.value)).run()
    except InfeasibleError:
        return exc
    return InfeasibleError(goal.out_of_reach(best.iteration_time, best.cost_per_iteration))
