"""The machine model of independent pipelines (:class:`~heteroplan.planner.pipeline_set.PipelineSet`).

Each pipeline is priced as :func:`~heteroplan.planner.model.simulator.simulate_plan` prices it
alone (compute, pipeline sends, 1F1B, stragglers, memory per GPU, pipeline egress); what the set
changes is the gradient sync. An iteration takes

``T = max_p T_pipe(p) + max_(p, s) (sum_(g in s) AR_g + U_(p,s))``

``T_pipe(p)``: pipeline ``p``'s slowest replica; ``g``: the layer ranges between consecutive stage
boundaries of any pipeline (:meth:`PipelineSet.segments`); ``AR_g``: the ring all-reduce of range
``g``'s gradient over every replica of every pipeline, in pipeline order, at the ring's slowest
link, on the smallest TP degree's shard (as a mixed stage's ring, :func:`simulate_plan`);
a stage ``s`` of pipeline ``p`` takes part in the rings of the ranges it holds one after another,
then runs its optimizer step ``U_(p,s)``. With one pipeline, or pipelines that share their
split, every range is a stage and ``T`` is :func:`simulate_plan`'s of the plan whose stages hold
all the pipelines' replicas (tested). Cross-zone ring edges pay egress as in :func:`simulate_plan`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from heteroplan.cluster import GPUType
from heteroplan.errors import InputError
from heteroplan.perf.sailor_network import NetworkModel
from heteroplan.perf.sailor_profiles import ModelProfile
from heteroplan.planner.model import sync
from heteroplan.planner.model.sim_config import (
    PlatformConfigs,
    SimConfig,
)
from heteroplan.planner.model.simulator import PlanEstimate, model_inputs, simulate_plan
from heteroplan.planner.model.terms import rental_usd_per_s
from heteroplan.planner.pipeline_set import PipelineSet

__all__ = ["PipelineSetEstimate", "simulate_pipeline_set"]


@dataclass(frozen=True)
class PipelineSetEstimate:
    """What :func:`simulate_pipeline_set` predicts for a set of independent pipelines.

    Attributes:
        iteration_time_s: seconds per iteration.
        cost_per_iteration_usd: $ per iteration (rental of every GPU + pipeline and ring egress).
        pipeline_time_s: seconds of the slowest pipeline's slowest replica.
        sync_time_s: seconds of the slowest stage's all-reduces and optimizer step.
        segment_allreduce_s: seconds of each layer range's all-reduce (:meth:`PipelineSet.segments`).
        pipelines: each pipeline priced alone by :func:`simulate_plan` (its time, memory per GPU
            and fit; its own all-reduce is over its replicas only, not the set's).
        egress_usd: $ per iteration of cross-zone bytes (pipeline sends + the set's rings).
    """

    iteration_time_s: float
    cost_per_iteration_usd: float
    pipeline_time_s: float
    sync_time_s: float
    segment_allreduce_s: tuple[float, ...]
    pipelines: tuple[PlanEstimate, ...]
    egress_usd: float

    @property
    def throughput_iter_s(self) -> float:
        """Iterations per second."""
        return 1.0 / self.iteration_time_s

    @property
    def fits(self) -> bool:
        """Whether every GPU of every pipeline fits its memory."""
        return all(e.fits for e in self.pipelines)

    @property
    def peak_memory_gb(self) -> float:
        """The most GB any GPU of the set needs."""
        return max(e.peak_memory_gb for e in self.pipelines)


def simulate_pipeline_set(
    pset: PipelineSet,
    *,
    profile: ModelProfile | None = None,
    network: NetworkModel | None = None,
    gpu_types: dict[str, GPUType] | None = None,
    config: SimConfig | PlatformConfigs | None = None,
    data_dir: str | Path | None = None,
) -> PipelineSetEstimate:
    """Iteration seconds, $/iteration and memory of independent pipelines (module docstring);
    defaults as :func:`simulate_plan`'s."""
    if not isinstance(pset, PipelineSet):
        raise InputError("pipeline_set", type(pset).__name__, "must be a PipelineSet (one Plan: simulate_plan)")
    profile, network, gpu_types, table = model_inputs(pset.model, profile, network, gpu_types, config, data_dir)
    alone = tuple(simulate_plan(p, profile=profile, network=network, gpu_types=gpu_types, config=table)
                  for p in pset.pipelines)
    D = pset.replicas
    segments = pset.segments()
    ar = []
    ring_egress = 0.0
    for first, last in segments:
        reps = [r for p in pset.pipelines for st in p.stages if st.first_layer <= first < st.last_layer
                for r in st.replica_list()]
        tp = min(r.tp for r in reps)
        ring_cfg = max((table.for_gpu(r.gpu_type) for r in reps), key=lambda c: c.allreduce_latency_s)
        grad_bytes = ring_cfg.grad_bytes_per_param * profile.stage_sizes(tp, first, last)[0]
        edges = sync.ring_edges([(r.gpu_type, r.zone) for r in reps])
        ar.append(float(sync.ring_sync_s(network, set(edges), tp, D, grad_bytes, ring_cfg)) if D > 1 else 0.0)
        ring_egress += float(sync.ring_egress(network, edges, D, tp, sync.ring_bytes(grad_bytes))[1])
    sync_s = 0.0
    for p, est in zip(pset.pipelines, alone, strict=True):
        update = est.stage_times.optimizer_update.max(axis=1)
        for s, st in enumerate(p.stages):
            held = sum(t for (a, _), t in zip(segments, ar, strict=True) if st.first_layer <= a < st.last_layer)
            sync_s = max(sync_s, float(sync.stage_sync_s(held, float(update[s]))))
    pipe = max(e.pipeline_time_s for e in alone)
    t_iter = pipe + sync_s
    price = rental_usd_per_s(sum(n * gpu_types[t].price_per_hour for (t, _), n in pset.gpus_by_type_zone().items()))
    egress = sum(e.cost_terms.pipeline_egress for e in alone) + ring_egress
    return PipelineSetEstimate(t_iter, price * t_iter + egress, pipe, sync_s, tuple(ar), alone, egress)
