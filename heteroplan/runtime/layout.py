"""Where each rank of a plan sits: stage, pipeline replica, layers, microbatches, samples.

Rank ``r = stage * dp + replica``. Pipeline replica ``d`` is the chain of ranks
``[d, dp + d, 2 dp + d, ...]``; the data-parallel group of stage ``s`` is
``[s dp, ..., s dp + dp - 1]``. Replica ``d`` runs ``M_d`` microbatches of ``mbs`` samples and
takes samples ``[mbs * sum(M_<d), mbs * sum(M_<=d))`` of every global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from heteroplan.errors import InputError
from heteroplan.planner.plan import Plan

__all__ = ["RankInfo", "rank_layout", "check_runnable"]


@dataclass(frozen=True)
class RankInfo:
    """One process of a run.

    Attributes:
        rank: global rank.
        stage: pipeline stage index.
        replica: pipeline (data-parallel) replica index.
        first_layer, last_layer: layers ``[first, last)`` this rank holds.
        num_microbatches: microbatches this rank's replica runs per iteration.
        sample_offset: first sample of the global batch that this replica trains on.
        gpu_type, zone: where the plan puts it (informational on a single machine).
    """

    rank: int
    stage: int
    replica: int
    first_layer: int
    last_layer: int
    num_microbatches: int
    sample_offset: int
    gpu_type: str
    zone: str


def check_runnable(plan: Plan, num_layers: int | None = None) -> None:
    """Raise :class:`InputError` when the runtime cannot execute ``plan`` as given."""
    if not isinstance(plan, Plan):
        raise InputError("plan", type(plan).__name__, "must be a heteroplan.planner.Plan")
    for i, stage in enumerate(plan.stages):
        for g in stage.replicas:
            if g.tp != 1:
                raise InputError(
                    f"plan.stages[{i}].replicas.tp", g.tp,
                    "the runtime does not shard a layer across GPUs (tensor parallelism); plan with tp=1",
                )
    if num_layers is not None and plan.num_layers != num_layers:
        raise InputError("plan.stages", plan.num_layers, f"the model has {num_layers} layers; the plan must cover them")


def rank_layout(plan: Plan) -> list[RankInfo]:
    """One :class:`RankInfo` per rank, in rank order."""
    check_runnable(plan)
    micro = plan.microbatches()
    offsets = [sum(micro[:d]) * plan.microbatch_size for d in range(plan.dp)]
    out = []
    for s, stage in enumerate(plan.stages):
        for d, rep in enumerate(stage.replica_list()):
            out.append(RankInfo(
                s * plan.dp + d, s, d, stage.first_layer, stage.last_layer, micro[d], offsets[d], rep.gpu_type, rep.zone,
            ))
    return out
