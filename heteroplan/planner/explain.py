"""Why a plan: the runner-ups the search priced, and term-by-term differences of two plans.

:class:`RunnerUp`: the best plan the search priced within one family — a set of GPU types, a
pipeline depth, a layout of the replicas (:class:`PlanStructure`: uniform pipeline, mixed replicas). The search prunes layouts that cannot beat its best plan, so a runner-up is the
best of what it priced, an upper bound on how good its family can be, not always the family's
optimum. :func:`diff_plans` lays two :class:`~heteroplan.planner.model.simulator.PlanEstimate`
side by side, term by term (seconds, $ and GB per GPU), and names the terms that differ most.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum

from heteroplan.inputs import enum_choice
from heteroplan.planner.model.pipeline_set import PipelineSetEstimate
from heteroplan.planner.model.simulator import CostTerms, MemoryTerms, PlanEstimate, TimeTerms
from heteroplan.planner.pipeline_set import PipelineSet
from heteroplan.planner.plan import Plan

__all__ = ["FamilyKind", "PipelineSetRunnerUp", "PlanFamily", "PlanStructure", "RunnerUp", "TermKind", "TermDiff",
           "PlanDiff", "diff_plans", "gpu_mix", "plan_families", "plan_structure", "estimate_terms", "describe_terms"]


def gpu_mix(plan: Plan) -> str:
    """The plan's GPU types, sorted and joined by ``+``."""
    return "+".join(gpu_types(plan))


def gpu_types(plan: Plan) -> tuple[str, ...]:
    """The plan's GPU types, sorted."""
    return tuple(sorted({g.gpu_type for s in plan.stages for g in s.replicas}))


class FamilyKind(Enum):
    """What a family of plans shares: a set of GPU types, a pipeline depth, or a layout of the replicas."""

    GPU_MIX = "GPU types"
    DEPTH = "PP"
    STRUCTURE = "layout"


class PlanStructure(Enum):
    """How a plan lays out the data-parallel replicas of its stages (the plan families of issue 50).

    ``UNIFORM_PIPELINE``: every stage's replicas share one GPU type and TP degree (their zones may
    differ, and stages may differ from each other: a pipeline of V100 stages then A100 stages is
    uniform); all replicas run the same number of microbatches unless their zones or types differ.
    ``MIXED_REPLICAS``: some stage's replicas differ in GPU type or TP degree (Metis-style; e.g. 8
    A100 at TP 1 and 2 V100 at TP 4 as replicas of one stage), the faster replicas running more
    microbatches. ``INDEPENDENT_PIPELINES``: several pipelines, each its own depth, split and
    microbatches (:class:`~heteroplan.planner.pipeline_set.PipelineSet`: not a :class:`Plan`, so
    :func:`plan_structure` never returns it; :class:`PipelineSetRunnerUp`).
    """

    UNIFORM_PIPELINE = "uniform pipeline"
    MIXED_REPLICAS = "mixed replicas"
    INDEPENDENT_PIPELINES = "independent pipelines"


def plan_structure(plan: Plan) -> PlanStructure:
    """The :class:`PlanStructure` of ``plan``."""
    mixed = any(len({(g.gpu_type, g.tp) for g in s.replicas}) > 1 for s in plan.stages)
    return PlanStructure.MIXED_REPLICAS if mixed else PlanStructure.UNIFORM_PIPELINE


@dataclass(frozen=True)
class PlanFamily:
    """A family of plans competing for runner-up: one set of GPU types, one pipeline depth, or one
    layout of the replicas.

    Attributes:
        kind: :attr:`FamilyKind.GPU_MIX`, :attr:`FamilyKind.DEPTH` or :attr:`FamilyKind.STRUCTURE`.
        gpu_types: the family's GPU types, sorted (``GPU_MIX``; empty otherwise).
        pp: the family's number of pipeline stages (``DEPTH``; 0 otherwise).
        structure: the family's :class:`PlanStructure` (``STRUCTURE``; None otherwise).
    """

    kind: FamilyKind
    gpu_types: tuple[str, ...] = ()
    pp: int = 0
    structure: PlanStructure | None = None

    @classmethod
    def mix(cls, gpu_types: tuple[str, ...]) -> PlanFamily:
        """The family of plans on exactly these GPU types."""
        return cls(FamilyKind.GPU_MIX, tuple(sorted(gpu_types)))

    @classmethod
    def depth(cls, pp: int) -> PlanFamily:
        """The family of plans with ``pp`` pipeline stages."""
        return cls(FamilyKind.DEPTH, pp=pp)

    @classmethod
    def layout(cls, structure: PlanStructure) -> PlanFamily:
        """The family of plans of one :class:`PlanStructure`."""
        return cls(FamilyKind.STRUCTURE, structure=structure)

    @property
    def label(self) -> str:
        """``"GPU types A100-40+V100-16"``, ``"PP 4"`` or ``"layout mixed replicas"``."""
        if self.kind is FamilyKind.STRUCTURE:
            value = self.structure.value if self.structure is not None else "?"
        else:
            value = "+".join(self.gpu_types) if self.kind is FamilyKind.GPU_MIX else str(self.pp)
        return f"{self.kind.value} {value}"

    def __str__(self) -> str:
        return self.label


def plan_families(plan: Plan) -> tuple[PlanFamily, PlanFamily, PlanFamily]:
    """The families a plan competes in for runner-up: its GPU-type mix, its pipeline depth and its
    layout of the replicas (:func:`plan_structure`)."""
    return PlanFamily.mix(gpu_types(plan)), PlanFamily.depth(plan.pp), PlanFamily.layout(plan_structure(plan))


@dataclass(frozen=True)
class PipelineSetRunnerUp:
    """The best set of independent pipelines the search priced (``PlanStructure.INDEPENDENT_PIPELINES``).

    Attributes:
        pipelines: the set (:class:`~heteroplan.planner.pipeline_set.PipelineSet`).
        estimate: its :class:`~heteroplan.planner.model.pipeline_set.PipelineSetEstimate`.
    """

    pipelines: PipelineSet
    estimate: PipelineSetEstimate

    @property
    def iteration_time_s(self) -> float:
        """Seconds per iteration, as the search priced the set."""
        return self.estimate.iteration_time_s

    @property
    def cost_per_iteration_usd(self) -> float:
        """$ per iteration, as the search priced the set."""
        return self.estimate.cost_per_iteration_usd


@dataclass(frozen=True)
class RunnerUp:
    """The best plan the search priced in one family (see the module's note on pruning).

    Attributes:
        family: its :class:`PlanFamily` (prints as ``GPU types A100-40+V100-16``, ``PP 4`` or
            ``layout mixed replicas``).
        plan: the plan.
        iteration_time_s: seconds per iteration, as the search priced it.
        cost_per_iteration_usd: $ per iteration, as the search priced it.
    """

    family: PlanFamily
    plan: Plan
    iteration_time_s: float
    cost_per_iteration_usd: float

    def to_dict(self) -> dict[str, object]:
        """``family`` (its label), ``plan``, ``iteration_time_s`` and ``cost_per_iteration_usd``."""
        return {"family": self.family.label, "plan": self.plan.to_dict(), "iteration_time_s": self.iteration_time_s,
                "cost_per_iteration_usd": self.cost_per_iteration_usd}


class TermKind(StrEnum):
    """What a term measures; :attr:`unit` is the unit of its values."""

    TIME = "time"
    COST = "cost"
    MEMORY = "memory"

    @property
    def unit(self) -> str:
        """``s/iteration``, ``$/iteration``, or ``GB (tightest)`` (the tightest GPU's memory)."""
        return _UNITS[self]


_UNITS = {TermKind.TIME: "s/iteration", TermKind.COST: "$/iteration", TermKind.MEMORY: "GB (tightest)"}


@dataclass(frozen=True)
class TermDiff:
    """One term of two plans: ``a`` and ``b`` in ``unit``; ``kind`` is time, cost or memory."""

    kind: TermKind
    term: str
    a: float
    b: float

    @property
    def unit(self) -> str:
        """The unit of ``a``, ``b`` and ``delta`` (``kind.unit``)."""
        return self.kind.unit

    @property
    def delta(self) -> float:
        """``b - a``, in ``unit``."""
        return self.b - self.a


@dataclass(frozen=True)
class PlanDiff:
    """Two plans' estimates term by term.

    Attributes:
        labels: names of plan ``a`` and plan ``b``.
        a, b: their estimates.
        rows: time terms (s/iteration), cost terms ($/iteration), memory terms of each plan's
            tightest GPU (GB).
        shape: PP, DP, GPUs, microbatch size of each plan.
    """

    labels: tuple[str, str]
    a: PlanEstimate
    b: PlanEstimate
    rows: tuple[TermDiff, ...]
    shape: tuple[tuple[str, int, int], ...] = ()

    def largest(self, kind: TermKind, n: int = 3) -> list[TermDiff]:
        """The ``n`` terms of ``kind`` that differ most (by absolute delta)."""
        kind = enum_choice(TermKind, "kind", kind)  # the former spelling, a plain "time", still works
        rows = [r for r in self.rows if r.kind is kind and r.term != "total"]
        return sorted(rows, key=lambda r: -abs(r.delta))[:n]

    def describe(self) -> str:
        """A table of every term and a line naming the time terms that differ most."""
        a, b = self.labels
        width = max(len(r.term) for r in self.rows) + 2
        col = max(14, len(a) + 2, len(b) + 2)
        lines = [f"{'term':<{width}}{'unit':<14}{a:>{col}}{b:>{col}}{'b - a':>14}"]
        for name, x, y in self.shape:
            lines.append(f"{name:<{width}}{'':<14}{x:>{col}}{y:>{col}}{y - x:>+14}")
        for r in self.rows:
            lines.append(f"{r.term:<{width}}{r.unit:<14}{r.a:>{col}.4g}{r.b:>{col}.4g}{r.delta:>+14.4g}")
        top = ", ".join(f"{r.term} {r.delta:+.3g} s" for r in self.largest(TermKind.TIME))
        lines.append(f"time differs most in: {top}")
        return "\n".join(lines)


def diff_plans(a: PlanEstimate, b: PlanEstimate, labels: tuple[str, str] = ("a", "b"),
               plans: tuple[Plan, Plan] | None = None) -> PlanDiff:
    """Term-by-term difference of two estimates (:func:`~heteroplan.planner.model.simulator.simulate_plan`'s).

    Memory compares each plan's tightest GPU (the :attr:`PlanEstimate.memory_fit` stage and
    replica with the least headroom)."""
    time, cost, memory = TermKind.TIME, TermKind.COST, TermKind.MEMORY
    rows: list[TermDiff] = []
    for name in TimeTerms.NAMES:
        rows.append(TermDiff(time, name, getattr(a.time_terms, name), getattr(b.time_terms, name)))
    rows.append(TermDiff(time, "total", a.iteration_time_s, b.iteration_time_s))
    for name in CostTerms.NAMES:
        rows.append(TermDiff(cost, name, getattr(a.cost_terms, name), getattr(b.cost_terms, name)))
    rows.append(TermDiff(cost, "total", a.cost_per_iteration_usd, b.cost_per_iteration_usd))
    ma, mb = _tightest(a), _tightest(b)
    for name in MemoryTerms.NAMES:
        rows.append(TermDiff(memory, name, getattr(ma, name), getattr(mb, name)))
    shape: tuple[tuple[str, int, int], ...] = ()
    if plans is not None:
        pa, pb = plans
        shape = (("PP", pa.pp, pb.pp), ("DP", pa.dp, pb.dp), ("GPUs", pa.num_gpus, pb.num_gpus),
                 ("microbatch size", pa.microbatch_size, pb.microbatch_size))
    return PlanDiff(labels, a, b, tuple(rows), shape)


def _tightest(est: PlanEstimate) -> MemoryTerms:
    """Memory terms of the GPU with the least headroom."""
    head = est.stage_memory.capacity - est.stage_memory.total
    s, d = divmod(int(head.argmin()), head.shape[1])
    return est.stage_memory.at(s, d)


def estimate_terms(est: PlanEstimate) -> dict[TermKind, dict[str, float]]:
    """One estimate term by term: ``TIME`` seconds per iteration (they add up to it), ``COST`` $ per
    iteration, ``MEMORY`` GB of its tightest GPU (``total`` included); empty where it has no terms."""
    if est.time_terms is None or est.cost_terms is None:
        return {}
    terms = {TermKind.TIME: est.time_terms.as_dict(), TermKind.COST: est.cost_terms.as_dict()}
    tight = _tightest(est)
    terms[TermKind.MEMORY] = {n: getattr(tight, n) for n in MemoryTerms.NAMES}
    return terms


def describe_terms(est: PlanEstimate) -> str:
    """A line per kind of term: ``time (s/iteration): compute 1.9, ...`` (terms that are 0 left out)."""
    return "\n".join(f"{kind.value} ({kind.unit}): " + (", ".join(f"{n} {v:.4g}" for n, v in values.items() if v)
                                                        or "0")
                     for kind, values in estimate_terms(est).items())
